#include "typed_meta.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "exit_codes.h"
#include "metadata_view.h"

namespace tensorsafe::cli {

int RunTypedMeta(const TypedMetaArgs& a) {
  const FormatInfo& row = InfoOf(a.format);
  if (!a.tensor.empty()) {
    return Fail("meta",
                InvalidArgument(a.file + ": " + std::string(row.name) + " has no per-tensor key/values (--tensor)"));
  }
  auto set = ReadTensorSet(a.file, a.format);
  if (!set.ok()) return Fail("meta", set.status());
  if (!a.sets.empty() || !a.dels.empty()) {
    auto md = row.edit_metadata(set->metadata_json, a.sets, a.dels);
    if (!md.ok()) return Fail("meta", md.status().WithContext(a.file));
    set->metadata_json = std::move(*md);
    // The tensors stream from the old file's mapping into a temporary file
    // that replaces it.
    if (Status s = WriteTensorSet(a.file, *set, a.format); !s.ok()) return Fail("meta", s);
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
