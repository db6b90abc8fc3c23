// Builds an index (FORMAT.md §6) and its trailer from entries in file order.
// Shared by the Writer and the Updater so both produce the canonical bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "format/layout.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::internal {

class IndexBuilder {
 public:
  // Appends an entry; Status errors when the entries section would pass 8 TiB.
  // `name_hash` is NameHash(t.name) when the caller has it already.
  Status Add(const TensorInfo& t, std::optional<std::uint64_t> name_hash = std::nullopt);
  // Whether an entry of that name was added.
  bool Contains(std::string_view name, std::uint64_t name_hash) const;
  std::uint64_t count() const { return slots_.size(); }
  std::uint64_t data_bytes() const { return data_bytes_; }
  // Feature bits the entries need (FORMAT.md §3.2): kFeatureCoo once a COO
  // entry was added.
  std::uint64_t features() const { return features_; }

  // Serialises the index that will start at `index_offset` (a multiple of 8):
  // root, entries, hash table, metadata and zero padding, followed by the
  // trailer. *ptr receives the pointer that a header slot or trailer holds.
  std::string Finish(std::uint64_t index_offset, std::string_view metadata_json, IndexPointer* ptr) const;

 private:
  std::string_view EntryName(std::uint64_t entry_off) const;
  void Place(std::uint64_t slot);

  std::string entries_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> slots_;  // (name hash, entry offset)
  // The names added so far, as an open-addressing table laid out like the
  // file's own (FORMAT.md §6.3): a 24-bit tag over 40 bits of position in
  // slots_ (+1; 0 = empty). 8 bytes a name, and a probe reads an entry only
  // on a tag match: a string set cost 2x the time of a whole Add.
  std::vector<std::uint64_t> dedup_;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t features_ = 0;
};

}  // namespace tensorsafe::internal
