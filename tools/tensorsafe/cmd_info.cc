// `tensorsafe info FILE [--json]`: what the file is and how it is laid out.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "command.h"
#include "exit_codes.h"
#include "source.h"
#include "tensorsafe/formats/gguf.h"

namespace tensorsafe::cli {
namespace {

nlohmann::json TensorJson(const TensorInfo& t) {
  nlohmann::json j = {{"name", t.name}, {"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape},
                      {"offset", t.data_offset}, {"nbytes", t.data_length}};
  if (t.layout == Layout::kCoo) {  // FORMAT.md §6.2: the shape is the dense one
    j["layout"] = "coo";
    j["nnz"] = t.nnz;
    j["coalesced"] = t.coalesced;
  }
  return j;
}

// A sharded checkpoint's index metadata and shards.
void AddShardedInfo(nlohmann::json& j, const sharded::Checkpoint& ck) {
  j["sharded"] = true;
  j["index_metadata"] = ck.index.metadata_json.empty() ? nlohmann::json::object()
                                                       : nlohmann::json::parse(ck.index.metadata_json, nullptr, false);
  nlohmann::json shards = nlohmann::json::array();
  for (const sharded::ShardInfo& s : ck.shards) {
    shards.push_back({{"name", s.name}, {"file_size", s.file_size}, {"tensor_count", s.tensor_count}});
  }
  j["shards"] = std::move(shards);
}

int Run(const std::string& path, bool json, Format from) {
  auto src = OpenSource(path, false, from);
  if (!src.ok()) return Fail("info", src.status());
  nlohmann::json j;
  j["file"] = src->checkpoint ? src->path : path;
  j["format"] = std::string(FormatName(src->format));
  j["file_size"] = src->file_size;
  nlohmann::json tensors = nlohmann::json::array();
  if (src->reader) {
    const FileSummary s = src->reader->summary();
    j["version"] = fmt::format("{}.{}", s.version_major, s.version_minor);
    j["alignment"] = s.alignment;
    j["tensor_count"] = s.tensor_count;
    j["data_bytes"] = s.data_bytes;
    j["index_offset"] = s.index_offset;
    j["index_length"] = s.index_length;
    j["unused_bytes"] = s.unused_bytes;
    if (s.via_trailer) {
      j["header_slot"] = "streamed (trailer)";
    } else {
      j["header_slot"] = s.sequence;
    }
    auto meta = src->reader->Metadata();
    if (!meta.ok()) return Fail("info", meta.status());
    j["metadata"] = nlohmann::json::parse(*meta, nullptr, false);
    if (json) {
      Status st = src->reader->ForEach([&](const TensorInfo& t) {
        tensors.push_back(TensorJson(t));
        return true;
      });
      if (!st.ok()) return Fail("info", st);
    }
  } else {
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < src->set.tensors.size(); ++i) {
      const Tensor& t = src->set.tensors[i];
      bytes += t.info.data_length;
      tensors.push_back(TensorJson(t.info));
      if (src->checkpoint) tensors.back()["shard"] = src->checkpoint->shards[src->checkpoint->shard_of[i]].name;
    }
    // Fields the format does not have are null. GGUF aligns its data to
    // general.alignment, 32 when the key is absent (the reader checked it).
    j["version"] = nullptr;
    j["alignment"] = nullptr;
    if (src->format == Format::kGguf) {
      auto md = nlohmann::json::parse(src->set.metadata_json.empty() ? "{}" : src->set.metadata_json, nullptr, false);
      j["alignment"] = md.is_object() && md.contains("general.alignment") && md["general.alignment"].is_number_unsigned()
                           ? md["general.alignment"].get<std::uint64_t>()
                           : tensorsafe::gguf::kDefaultAlignment;
    }
    j["tensor_count"] = src->set.tensors.size();
    j["data_bytes"] = bytes;
    j["index_offset"] = nullptr;
    j["index_length"] = nullptr;
    j["header_slot"] = nullptr;
    j["unused_bytes"] = nullptr;
    j["metadata"] = src->set.metadata_json.empty() ? nlohmann::json::object()
                                                  : nlohmann::json::parse(src->set.metadata_json, nullptr, false);
  }
  if (src->checkpoint) AddShardedInfo(j, *src->checkpoint);  // docs/SHARDED.md
  if (json) {
    j["tensors"] = std::move(tensors);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  auto field = [](const char* name, const std::string& value) { fmt::print("{:<14}{}\n", name, value); };
  auto opt = [&](const char* key) { return j[key].is_null() ? std::string("-") : j[key].dump(); };
  field("file:", j["file"].get<std::string>());
  field("format:", j["format"].get<std::string>() +
                       (j["version"].is_null() ? "" : " " + j["version"].get<std::string>()) +
                       (src->checkpoint ? fmt::format(", sharded ({} shards)", src->checkpoint->shards.size()) : ""));
  field("file size:", fmt::format("{} bytes", src->file_size));
  field("tensors:", opt("tensor_count"));
  field("data bytes:", opt("data_bytes"));
  if (src->reader) {
    field("unused bytes:", fmt::format("{} (alignment padding, and space updates left; `compact` reclaims it)",
                                       j["unused_bytes"].get<std::uint64_t>()));
  }
  field("alignment:", opt("alignment"));
  if (src->reader) {
    field("index:", fmt::format("offset {}, length {}", j["index_offset"].get<std::uint64_t>(),
                                j["index_length"].get<std::uint64_t>()));
    field("header slot:", j["header_slot"].is_string() ? j["header_slot"].get<std::string>()
                                                       : fmt::format("sequence {}", j["header_slot"].get<std::uint64_t>()));
  }
  field("metadata:", j["metadata"].dump());
  if (src->checkpoint) {
    field("index meta:", j["index_metadata"].dump());
    for (const auto& shard : j["shards"]) {
      const auto count = shard["tensor_count"].get<std::uint64_t>();
      field("shard:", fmt::format("{} ({} tensor{}, {} bytes)", shard["name"].get<std::string>(), count,
                                  count == 1 ? "" : "s", shard["file_size"].get<std::uint64_t>()));
    }
  }
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto from = std::make_shared<Format>(Format::kUnknown);
  sub.add_option("FILE", *path, "Tensor file in any supported format, or a sharded checkpoint's index or directory")
      ->required();
  sub.add_flag("--json", *json, "Print one JSON object, with a tensors array");
  AddFormatOption(sub, "--from", from.get(), "Read FILE as this format instead of detecting it");
  return [path, json, from] { return Run(*path, *json, *from); };
}

}  // namespace

TS_REGISTER_COMMAND("info", "Describe a file: format, layout, sizes, metadata", SetupCommand);

}  // namespace tensorsafe::cli
