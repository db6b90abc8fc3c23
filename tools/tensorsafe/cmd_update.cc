// In-place updates of a .tsafe file (include/tensorsafe/updater.h): `add`,
// `rm`, `mv`, `meta` and `compact`. Each command is one transaction.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "command.h"
#include "exit_codes.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/updater.h"
#include "typed_meta.h"

namespace tensorsafe::cli {
namespace {

struct Common {
  std::string file;
  double wait_seconds = 0;
  UpdaterOptions Options() const {
    UpdaterOptions o;
    o.lock_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(wait_seconds * 1000));
    return o;
  }
};

void AddCommon(CLI::App& sub, Common& c) {
  sub.add_option("FILE", c.file, "The .tsafe file to change")->required();
  sub.add_option("--wait", c.wait_seconds, "Seconds to wait for another updater's lock (default: fail at once)");
}

// The tensor named by SOURCE: FILE:NAME, a tensor of a file in any format
// (its checksum checked where the format has one), or FILE, a file of
// exactly one tensor (an .npy).
Result<Tensor> LoadSource(const std::string& source) {
  const auto colon = source.rfind(':');
  if (colon != std::string::npos && colon > 0 && !std::filesystem::exists(source)) {
    return ReadTensor(source.substr(0, colon), Format::kUnknown, source.substr(colon + 1));
  }
  TS_ASSIGN_OR_RETURN(TensorSet set, ReadTensorSet(source));
  if (set.tensors.size() != 1) {
    return InvalidArgument(source + ": holds " + std::to_string(set.tensors.size()) + " tensors; name one as " +
                           source + ":NAME");
  }
  return std::move(set.tensors.front());
}

std::function<int()> SetupAdd(CLI::App& sub) {
  auto c = std::make_shared<Common>();
  auto name = std::make_shared<std::string>();
  auto source = std::make_shared<std::string>();
  auto meta = std::make_shared<std::string>();
  auto replace = std::make_shared<bool>(false);
  AddCommon(sub, *c);
  sub.add_option("NAME", *name, "Name of the new tensor")->required();
  sub.add_option("SOURCE", *source, "OTHER:NAME, a tensor of a file in any format, or a one-tensor file (.npy)")
      ->required();
  sub.add_option("--meta", *meta, "Per-tensor metadata, a JSON object");
  sub.add_flag("--replace", *replace, "Replace the tensor if it exists");
  return [=] {
    auto t = LoadSource(*source);
    if (!t.ok()) return Fail("add", t.status());
    auto u = ExplainFormatMismatch(c->file, Format::kTsafe, Updater::Open(c->file, c->Options()));
    if (!u.ok()) return Fail("add", u.status());
    const TensorView view = TensorView::Contiguous(t->info.dtype, t->info.shape, t->data);
    const bool exists = (*u)->Contains(*name);
    Status s = exists && *replace
                   ? (*u)->Replace(*name, view, meta->empty() ? std::nullopt : std::optional<std::string_view>(*meta))
                   : (*u)->Add(*name, view, *meta);
    if (s.ok()) s = (*u)->Commit();
    if (!s.ok()) return Fail("add", s);
    fmt::print("{} {} ({} {}, {} bytes) in {}\n", exists ? "replaced" : "added", *name, DTypeName(t->info.dtype),
               ShapeToString(t->info.shape), t->info.data_length, c->file);
    return kExitOk;
  };
}

std::function<int()> SetupRm(CLI::App& sub) {
  auto c = std::make_shared<Common>();
  auto names = std::make_shared<std::vector<std::string>>();
  AddCommon(sub, *c);
  sub.add_option("NAME", *names, "Tensors to remove")->required();
  return [=] {
    auto u = ExplainFormatMismatch(c->file, Format::kTsafe, Updater::Open(c->file, c->Options()));
    if (!u.ok()) return Fail("rm", u.status());
    for (const auto& n : *names) {
      Status s = (*u)->Remove(n);
      if (!s.ok()) return Fail("rm", s);
    }
    Status s = (*u)->Commit();
    if (!s.ok()) return Fail("rm", s);
    fmt::print("removed {} tensor{} from {}\n", names->size(), names->size() == 1 ? "" : "s", c->file);
    return kExitOk;
  };
}

std::function<int()> SetupMv(CLI::App& sub) {
  auto c = std::make_shared<Common>();
  auto from = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>();
  AddCommon(sub, *c);
  sub.add_option("OLD", *from, "Current name")->required();
  sub.add_option("NEW", *to, "New name")->required();
  return [=] {
    auto u = ExplainFormatMismatch(c->file, Format::kTsafe, Updater::Open(c->file, c->Options()));
    if (!u.ok()) return Fail("mv", u.status());
    Status s = (*u)->Rename(*from, *to);
    if (s.ok()) s = (*u)->Commit();
    if (!s.ok()) return Fail("mv", s);
    fmt::print("renamed {} to {} in {}\n", *from, *to, c->file);
    return kExitOk;
  };
}

std::function<int()> SetupMeta(CLI::App& sub) {
  auto c = std::make_shared<Common>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto dels = std::make_shared<std::vector<std::string>>();
  auto tensor = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto full = std::make_shared<bool>(false);
  sub.add_option("FILE", c->file, "The .tsafe file (or a file with typed key/values: .gguf) to change")->required();
  sub.add_option("--wait", c->wait_seconds, "Seconds to wait for another updater's lock (default: fail at once)");
  sub.add_option("--set", *sets, "KEY=JSON: set a top-level key (repeatable); GGUF: KEY=TYPE:VALUE");
  sub.add_option("--del", *dels, "KEY: delete a top-level key (repeatable)");
  sub.add_option("--tensor", *tensor, "Change this tensor's metadata instead of the file's");
  sub.add_flag("--json", *json, "GGUF: print the metadata JSON instead of typed lines");
  sub.add_flag("--full", *full, "GGUF: print long arrays and strings whole");
  return [=] {
    // A format with typed key/values (GGUF) edits them its own way.
    if (auto f = DetectFormat(c->file); f.ok() && InfoOf(*f).edit_metadata != nullptr) {
      return RunTypedMeta({c->file, *f, *sets, *dels, *tensor, *json, *full});
    }
    auto u = ExplainFormatMismatch(c->file, Format::kTsafe, Updater::Open(c->file, c->Options()));
    if (!u.ok()) return Fail("meta", u.status());
    // The changes form one RFC 7386 merge patch.
    nlohmann::json patch = nlohmann::json::object();
    for (const auto& kv : *sets) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) return Fail("meta", InvalidArgument("--set " + kv + ": expected KEY=JSON"));
      auto value = nlohmann::json::parse(kv.substr(eq + 1), nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded() || value.is_null()) {
        return Fail("meta", InvalidArgument("--set " + kv + ": the value is not JSON (quote strings: KEY='\"text\"')"));
      }
      patch[kv.substr(0, eq)] = std::move(value);
    }
    for (const auto& k : *dels) patch[k] = nullptr;
    Status s;
    if (!patch.empty()) {
      s = tensor->empty() ? (*u)->MergeMetadata(patch.dump()) : (*u)->MergeTensorMetadata(*tensor, patch.dump());
      if (s.ok()) s = (*u)->Commit();
      if (!s.ok()) return Fail("meta", s);
    }
    if (tensor->empty()) {
      auto m = (*u)->Metadata();
      if (!m.ok()) return Fail("meta", m.status());
      fmt::print("{}\n", *m);
    } else {
      auto t = (*u)->Find(*tensor);
      if (!t.ok()) return Fail("meta", t.status());
      fmt::print("{}\n", t->metadata_json.empty() ? "{}" : t->metadata_json);
    }
    return kExitOk;
  };
}

std::function<int()> SetupCompact(CLI::App& sub) {
  auto c = std::make_shared<Common>();
  AddCommon(sub, *c);
  return [=] {
    auto r = ExplainFormatMismatch(c->file, Format::kTsafe, Compact(c->file, c->Options()));
    if (!r.ok()) return Fail("compact", r.status());
    fmt::print("compacted {}: {} -> {} bytes, {} bytes reclaimed\n", c->file, r->bytes_before, r->bytes_after,
               r->bytes_reclaimed());
    return kExitOk;
  };
}

}  // namespace

TS_REGISTER_COMMAND("add", "Add (or --replace) a tensor from an .npy file or OTHER.tsafe:NAME, in place", SetupAdd);
TS_REGISTER_COMMAND("rm", "Remove tensors, in place", SetupRm);
TS_REGISTER_COMMAND("mv", "Rename a tensor, in place", SetupMv);
TS_REGISTER_COMMAND("meta", "Show or change file (or --tensor) metadata, in place (.tsafe, .gguf)", SetupMeta);
TS_REGISTER_COMMAND("compact", "Rewrite the live tensors into a fresh file, reclaiming dead space", SetupCompact);

}  // namespace tensorsafe::cli
