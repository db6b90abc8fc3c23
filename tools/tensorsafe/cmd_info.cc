// `tensorsafe info FILE [--json]`: what the file is and how it is laid out.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <optional>

#include "command.h"
#include "exit_codes.h"
#include "metadata_view.h"
#include "source.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::cli {
namespace {

nlohmann::json TensorJson(const TensorInfo& t) {
  nlohmann::json j = {{"name", t.name},
                      {"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"offset", t.data_offset},
                      {"nbytes", t.data_length}};
  if (t.layout == Layout::kCoo) {  // FORMAT.md §6.2: the shape is the dense one
    j["layout"] = "coo";
    j["nnz"] = t.nnz;
    j["coalesced"] = t.coalesced;
  }
  if (auto q = gguf::FindQuantized(t)) {  // ggml blocks carried as u8 (gguf.h)
    j["gguf_type"] = std::string(q->type.name);
    j["gguf_shape"] = q->shape;
  }
  return j;
}

// A value of the description, or null where the format has no such field.
template <typename T>
nlohmann::json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

// A sharded checkpoint's index metadata and shards (docs/SHARDED.md).
void AddShardedInfo(nlohmann::json& j, const FileDescription& d) {
  j["sharded"] = true;
  j["index_metadata"] = d.index_metadata_json->empty() ? nlohmann::json::object()
                                                       : nlohmann::json::parse(*d.index_metadata_json, nullptr, false);
  nlohmann::json shards = nlohmann::json::array();
  for (const FileDescription::Shard& s : d.shards) {
    shards.push_back({{"name", s.name}, {"file_size", s.file_size}, {"tensor_count", s.tensor_count}});
  }
  j["shards"] = std::move(shards);
}

int Run(const std::string& path, bool json, bool full, Format from) {
  auto d = DescribeFile(path, from);
  if (!d.ok()) return Fail("info", d.status());
  const bool sharded = !d->shards.empty();
  from = d->format;
  nlohmann::json j;
  j["file"] = d->path;
  j["format"] = std::string(FormatName(from));
  j["file_size"] = d->file_size;
  j["version"] = OrNull(d->version);
  j["alignment"] = OrNull(d->alignment);
  j["tensor_count"] = d->tensor_count;
  j["data_bytes"] = d->data_bytes;
  j["index_offset"] = OrNull(d->index_offset);
  j["index_length"] = OrNull(d->index_length);
  j["unused_bytes"] = OrNull(d->unused_bytes);
  j["header_slot"] = !d->header_sequence        ? nlohmann::json()
                     : *d->header_sequence == 0 ? nlohmann::json("streamed (trailer)")
                                                : nlohmann::json(*d->header_sequence);
  // In file order, for the listing and the summary (j sorts its keys).
  const auto ordered =
      nlohmann::ordered_json::parse(d->metadata_json.empty() ? "{}" : d->metadata_json, nullptr, false);
  j["metadata"] = nlohmann::json::parse(d->metadata_json.empty() ? "{}" : d->metadata_json, nullptr, false);
  if (!full && ordered.is_object()) j["metadata"] = SummariseMetadata(ordered);
  if (sharded) AddShardedInfo(j, *d);
  if (json) {
    nlohmann::json tensors = nlohmann::json::array();
    Status st = ForEachTensorInfo(d->path, from, [&](const TensorInfo& t) {
      tensors.push_back(TensorJson(t));
      if (sharded) tensors.back()["shard"] = d->shards[d->shard_of[tensors.size() - 1]].name;
      return true;
    });
    if (!st.ok()) return Fail("info", st);
    j["tensors"] = std::move(tensors);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  auto field = [](const char* name, const std::string& value) { fmt::print("{:<14}{}\n", name, value); };
  auto opt = [&](const char* key) { return j[key].is_null() ? std::string("-") : j[key].dump(); };
  field("file:", d->path);
  field("format:", j["format"].get<std::string>() + (d->version ? " " + *d->version : "") +
                       (sharded ? fmt::format(", sharded ({} shards)", d->shards.size()) : ""));
  field("file size:", fmt::format("{} bytes", d->file_size));
  field("tensors:", opt("tensor_count"));
  field("data bytes:", opt("data_bytes"));
  if (d->unused_bytes) {
    field("unused bytes:",
          fmt::format("{} (alignment padding, and space updates left; `compact` reclaims it)", *d->unused_bytes));
  }
  field("alignment:", opt("alignment"));
  if (d->index_offset && d->index_length) {
    field("index:", fmt::format("offset {}, length {}", *d->index_offset, *d->index_length));
  }
  if (d->header_sequence) {
    field("header slot:", *d->header_sequence == 0 ? std::string("streamed (trailer)")
                                                   : fmt::format("sequence {}", *d->header_sequence));
  }
  // Typed key/values (GGUF's) are listed one a line with their types.
  if (InfoOf(from).edit_metadata != nullptr && ordered.is_object()) {
    const std::size_t keys = ordered.size() - (ordered.contains("tensorsafe.gguf_types") ? 1 : 0);
    field("metadata:", fmt::format("{} key/value{}{}", keys, keys == 1 ? "" : "s", keys ? ":" : ""));
    fmt::print("{}", FormatGgufKeyValues(ordered, full));
    return kExitOk;
  }
  field("metadata:", j["metadata"].dump());
  if (sharded) {
    field("index meta:", j["index_metadata"].dump());
    for (const FileDescription::Shard& shard : d->shards) {
      field("shard:", fmt::format("{} ({} tensor{}, {} bytes)", shard.name, shard.tensor_count,
                                  shard.tensor_count == 1 ? "" : "s", shard.file_size));
    }
  }
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto full = std::make_shared<bool>(false);
  auto from = std::make_shared<Format>(Format::kUnknown);
  AddFileOptions(sub, path.get(), from.get());
  sub.add_flag("--json", *json, "Print one JSON object, with a tensors array");
  sub.add_flag("--full", *full, "Print long metadata arrays and strings whole (default: length and first items)");
  return [path, json, full, from] { return Run(*path, *json, *full, *from); };
}

}  // namespace

TS_REGISTER_COMMAND("info", "Describe a file: format, layout, sizes, metadata", SetupCommand);

}  // namespace tensorsafe::cli
