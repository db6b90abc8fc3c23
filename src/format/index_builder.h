// Builds an index (FORMAT.md §6) and its trailer from entries in file order.
// Shared by the Writer and the Updater so both produce the canonical bytes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/layout.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::internal {

class IndexBuilder {
 public:
  // Appends an entry; Status errors when the entries section would pass 8 TiB.
  Status Add(const TensorInfo& t);
  std::uint64_t count() const { return slots_.size(); }
  std::uint64_t data_bytes() const { return data_bytes_; }

  // Serialises the index that will start at `index_offset` (a multiple of 8):
  // root, entries, hash table, metadata and zero padding, followed by the
  // trailer. *ptr receives the pointer that a header slot or trailer holds.
  std::string Finish(std::uint64_t index_offset, std::string_view metadata_json, IndexPointer* ptr) const;

 private:
  std::string entries_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> slots_;  // (name hash, entry offset)
  std::uint64_t data_bytes_ = 0;
};

}  // namespace tensorsafe::internal
