#include "gguf_meta.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "exit_codes.h"
#include "metadata_view.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_kv.h"

namespace tensorsafe::cli {

int RunGgufMeta(const GgufMetaArgs& a) {
  if (!a.tensor.empty()) {
    return Fail("meta", InvalidArgument(a.file + ": GGUF has no per-tensor metadata (--tensor)"));
  }
  auto set = gguf::ReadFile(a.file);
  if (!set.ok()) return Fail("meta", set.status());
  if (!a.sets.empty() || !a.dels.empty()) {
    std::vector<gguf::KeyValueEdit> edits;
    for (const std::string& kv : a.sets) {
      auto e = gguf::ParseKeyValueEdit(kv);
      if (!e.ok()) return Fail("meta", e.status().WithContext("--set"));
      edits.push_back(std::move(*e));
    }
    auto md = gguf::EditKeyValues(set->metadata_json, edits, a.dels);
    if (!md.ok()) return Fail("meta", md.status().WithContext(a.file));
    set->metadata_json = std::move(*md);
    // The tensors stream from the old file's mapping into a temporary file
    // that replaces it (gguf.h WriteFile).
    if (Status s = gguf::WriteFile(a.file, *set); !s.ok()) return Fail("meta", s);
  }
  const auto md = nlohmann::ordered_json::parse(set->metadata_json.empty() ? "{}" : set->metadata_json);
  if (a.json) {
    fmt::print("{}\n", (a.full ? md : SummariseMetadata(md)).dump());
  } else {
    fmt::print("{}", FormatGgufKeyValues(md, a.full));
  }
  return kExitOk;
}

}  // namespace tensorsafe::cli
