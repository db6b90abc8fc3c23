// Builds an index (FORMAT.md §6) and its trailer from entries in file order.
// Shared by the Writer and the Updater so both produce the canonical bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorsafe/tensor.h"
#include "tsafe/data_writer.h"
#include "tsafe/layout.h"
#include "util/page_buffer.h"

namespace tensorsafe::internal {

class IndexBuilder {
 public:
  // Appends an entry; Status errors when the entries section would pass 8 TiB.
  // `name_hash` is NameHash(t.name) when the caller has it already.
  Status Add(const EntryFields& e, std::optional<std::uint64_t> name_hash = std::nullopt);
  Status Add(const TensorInfo& t, std::optional<std::uint64_t> name_hash = std::nullopt) {
    return Add(FieldsOf(t), name_hash);
  }
  // Whether an entry of that name was added. Not const: a name the filter
  // cannot rule out first brings the table up to date.
  bool Contains(std::string_view name, std::uint64_t name_hash);
  // Starts loading the filter word Contains(_, name_hash) reads first.
  void Prefetch(std::uint64_t name_hash) const {
    // Unconditional: GCC 12 dropped a prefetch that sat under a test.
    __builtin_prefetch(filter_.data() + FilterWord(name_hash));
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
  Status WriteTo(DataWriter& out, std::string_view metadata_json, IndexPointer* ptr);

 private:
  std::string_view EntryName(std::uint64_t entry_off) const;
  // The filter: a blocked Bloom filter of the names' hashes, one u64 word a
  // name with 4 bits set in it, at least 8 bits a name. The file's hash
  // table is 16 bytes a name (load factor <= 1/2), which past the caches
  // made its probe a miss in every Add (36% of the caller's time at 1M
  // names, perf); the filter, 1 MiB at 1M names, stays in L2 and lets about
  // 1.5% of new names through (measured at 100k and 1M;
  // docs/format-bench.md).
  std::size_t FilterWord(std::uint64_t h) const { return static_cast<std::size_t>((h >> 24) & filter_mask_); }
  static std::uint64_t FilterBits(std::uint64_t h) {
    return (std::uint64_t{1} << (h & 63)) | (std::uint64_t{1} << ((h >> 6) & 63)) |
           (std::uint64_t{1} << ((h >> 12) & 63)) | (std::uint64_t{1} << ((h >> 18) & 63));
  }
  // Grows the filter to keep at least 8 bits a name, re-adding every hash.
  void GrowFilter();
  // Places entries [from, to) of slots_, in file order, into `table` of
  // mask + 1 slots (table_, or the small table WriteTo builds).
  void Place(std::byte* table, std::uint64_t mask, std::uint64_t from, std::uint64_t to) const;
  // Places every entry not yet placed.
  void PlaceAll();

  PageBuffer entries_;
  // (name hash, entry offset) as two u64 a tensor, in file order: what the
  // table and the filter are built from.
  PageBuffer slots_;
  std::uint64_t count_ = 0;
  std::vector<std::uint64_t> filter_ = std::vector<std::uint64_t>(kMinFilterWords);
  std::uint64_t filter_mask_ = kMinFilterWords - 1;
  static constexpr std::size_t kMinFilterWords = 1024;  // 8 KiB
  // The file's own hash table (FORMAT.md §6.3), u64 slots of a 24-bit tag
  // over 40 bits of entry offset / 8 (+1; 0 = empty), placed in file order.
  // It holds the first placed_ entries: each Add places the entry before
  // it, whose home slot it prefetched, so no Add waits on a slot it needs
  // at once; Contains and WriteTo place the last one first.
  PageBuffer table_;
  std::uint64_t table_mask_ = 0;  // slots - 1
  std::uint64_t placed_ = 0;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t features_ = 0;
};

}  // namespace tensorsafe::internal
