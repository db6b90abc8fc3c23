// Builds an index (FORMAT.md §6) and its trailer from entries in file order.
// Shared by the Writer and the Updater so both produce the canonical bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "format/data_writer.h"
#include "format/layout.h"
#include "util/page_buffer.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::internal {

class IndexBuilder {
 public:
  // Appends an entry; Status errors when the entries section would pass 8 TiB.
  // `name_hash` is NameHash(t.name) when the caller has it already.
  Status Add(const EntryFields& e, std::optional<std::uint64_t> name_hash = std::nullopt);
  Status Add(const TensorInfo& t, std::optional<std::uint64_t> name_hash = std::nullopt) {
    return Add(FieldsOf(t), name_hash);
  }
  // Whether an entry of that name was added.
  bool Contains(std::string_view name, std::uint64_t name_hash) const;
  // Starts loading the table slot Contains(_, name_hash) reads first.
  void Prefetch(std::uint64_t name_hash) const {
    // Unconditional (an empty table prefetches null, which is harmless): GCC
    // 12 dropped the prefetch when it sat under an emptiness test.
    __builtin_prefetch(dedup_.data() + 8 * (name_hash & dedup_mask_));
  }
  std::uint64_t count() const { return count_; }
  std::uint64_t data_bytes() const { return data_bytes_; }
  // Feature bits the entries need (FORMAT.md §3.2): kFeatureCoo once a COO
  // entry was added.
  std::uint64_t features() const { return features_; }

  // Writes the index to `out`, whose position (a multiple of 8) is where it
  // starts: root, entries, hash table, metadata and zero padding, followed
  // by the trailer. *ptr receives the pointer that a header slot or trailer
  // holds.
  Status WriteTo(DataWriter& out, std::string_view metadata_json, IndexPointer* ptr) const;

 private:
  std::string_view EntryName(std::uint64_t entry_off) const;
  // Places every entry, in file order, into a zeroed table of mask + 1
  // slots: the file's hash table (FORMAT.md §6.3).
  void PlaceAll(std::byte* table, std::uint64_t mask) const;

  PageBuffer entries_;
  // (name hash, entry offset) as two u64 a tensor, in file order: what a
  // growing dedup_ re-places.
  PageBuffer slots_;
  std::uint64_t count_ = 0;
  // The names added so far, as the file's own hash table (FORMAT.md §6.3):
  // a 24-bit tag over 40 bits of entry offset / 8 (+1; 0 = empty), placed
  // in file order. 8 bytes a name; a probe reads an entry only on a tag
  // match (a string set cost 2x the time of a whole Add), and Finish writes
  // the table as it is.
  PageBuffer dedup_;              // u64 slots
  std::uint64_t dedup_mask_ = 0;  // slots - 1
  std::uint64_t data_bytes_ = 0;
  std::uint64_t features_ = 0;
};

}  // namespace tensorsafe::internal
