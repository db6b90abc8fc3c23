// safetensors' conversion of a state dict (bindings/python/convert.py,
// convert_file), applied to a flattened checkpoint, so that `tensorsafe
// convert model.bin model.safetensors` writes the bytes that script writes.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "formats/pytorch/pickle.h"
#include "tensorsafe/status.h"

namespace tensorsafe::pytorch::internal {

// One flattened tensor entry: its dotted name and its TensorDecl.
struct Entry {
  std::string name;
  std::size_t tensor = 0;
};

// Removes from `entries` (in their order, a state dict's) the tensors
// convert.py's _remove_duplicate_names drops: for each group of tensors
// sharing a storage (grouped and split as safetensors.torch's
// _find_shared_tensors and _filter_shared_not_shared do), every name but the
// smallest of those covering the whole storage. Returns the metadata
// convert.py passes to save_file: {"format": "pt", removed: kept, ...} in
// its insertion order. `discard` is convert.py's discard_names: of the
// complete names, the smallest one not in it is kept when there is one.
// kUnsupported (naming `file`) where convert.py raises: a group of several
// tensors none of which covers its storage.
Result<nlohmann::ordered_json> ApplySafetensorsConvention(std::vector<Entry>& entries, const Tables& tables,
                                                          const std::vector<std::string>& discard,
                                                          const std::string& file);

}  // namespace tensorsafe::pytorch::internal
