#include "format/index_builder.h"

#include <algorithm>

#include "util/endian.h"
#include "util/hash.h"

namespace tensorsafe::internal {

namespace {
constexpr std::uint64_t kPosMask = (std::uint64_t{1} << kSlotPosBits) - 1;
}

Status IndexBuilder::Add(const TensorInfo& t, std::optional<std::uint64_t> name_hash) {
  const std::uint64_t off = entries_.size();
  if (off / 8 + 1 >= (std::uint64_t{1} << kSlotPosBits)) return LimitExceeded("index entries exceed 8 TiB");
  EncodeEntry(t, entries_);
  if (t.layout == Layout::kCoo) features_ |= kFeatureCoo;
  slots_.push_back({name_hash ? *name_hash : NameHash(t.name), off});
  data_bytes_ += t.data_length;
  // Load factor <= 1/2 keeps probes short.
  if (2 * slots_.size() > dedup_.size()) {
    std::vector<std::uint64_t> old(std::max<std::size_t>(64, 2 * dedup_.size()), 0);
    dedup_.swap(old);
    dedup_mask_ = dedup_.size() - 1;
    for (std::uint64_t v : old) {
      if (v != 0) Place((v & kPosMask) - 1);
    }
  }
  Place(slots_.size() - 1);
  return Status::OK();
}

std::string_view IndexBuilder::EntryName(std::uint64_t entry_off) const {
  const auto* p = reinterpret_cast<const std::byte*>(entries_.data()) + entry_off;
  const std::uint8_t rank = Load8(p + 10);
  return {entries_.data() + entry_off + kEntryFixedSize + 8 * rank, Load32(p + 12)};
}

void IndexBuilder::Place(std::uint64_t slot) {
  const std::uint64_t mask = dedup_.size() - 1;
  const std::uint64_t h = slots_[slot].first;
  std::uint64_t i = h & mask;
  while (dedup_[i] != 0) i = (i + 1) & mask;
  dedup_[i] = ((h >> kSlotPosBits) << kSlotPosBits) | (slot + 1);
}

bool IndexBuilder::Contains(std::string_view name, std::uint64_t h) const {
  if (dedup_.empty()) return false;
  const std::uint64_t mask = dedup_.size() - 1;
  const std::uint64_t tag = h >> kSlotPosBits;
  for (std::uint64_t i = h & mask;; i = (i + 1) & mask) {
    const std::uint64_t v = dedup_[i];
    if (v == 0) return false;
    if ((v >> kSlotPosBits) != tag) continue;
    const auto& [sh, off] = slots_[(v & kPosMask) - 1];
    if (sh == h && EntryName(off) == name) return true;
  }
}

std::vector<std::uint64_t> IndexBuilder::FileTable(std::uint64_t capacity) const {
  std::vector<std::uint64_t> table(capacity, 0);
  if (capacity == dedup_.size()) {
    // The same capacity, hashes, insertion order and probing as dedup_: the
    // same positions, so only each slot's value changes (a sequential pass
    // instead of a random write per entry).
    for (std::uint64_t i = 0; i < capacity; ++i) {
      const std::uint64_t v = dedup_[i];
      if (v == 0) continue;
      table[i] = ((v >> kSlotPosBits) << kSlotPosBits) | (slots_[(v & kPosMask) - 1].second / 8 + 1);
    }
    return table;
  }
  const std::uint64_t mask = capacity - 1;
  for (const auto& [h, off] : slots_) {
    std::uint64_t i = h & mask;
    while (table[i] != 0) i = (i + 1) & mask;
    table[i] = ((h >> kSlotPosBits) << kSlotPosBits) | (off / 8 + 1);
  }
  return table;
}

Status IndexBuilder::WriteTo(DataWriter& out, std::string_view metadata, IndexPointer* ptr) const {
  const std::uint64_t index_offset = out.position();
  IndexRoot root;
  root.tensor_count = slots_.size();
  root.entries_length = entries_.size();
  root.hash_capacity = HashCapacity(slots_.size());
  root.hash_offset = kRootSize + entries_.size();
  root.metadata_offset = root.hash_offset + root.hash_capacity * 8;
  root.metadata_length = metadata.size();
  root.data_bytes = data_bytes_;
  const std::uint64_t length = IndexLength(entries_.size(), root.hash_capacity, metadata.size());

  // FORMAT.md §6.3: open addressing, linear probing, entries in file order.
  // Written as host words: endian.h allows only little-endian hosts.
  const std::vector<std::uint64_t> table = FileTable(root.hash_capacity);
  const std::span<const std::byte> table_bytes = std::as_bytes(std::span<const std::uint64_t>(table));
  root.entries_checksum = Hash64(std::string_view(entries_));
  root.hash_checksum = Hash64(table_bytes);
  root.metadata_checksum = Hash64(metadata);
  std::byte r[kRootSize];
  EncodeRoot(root, r);
  ptr->features = features_;
  ptr->index_offset = index_offset;
  ptr->index_length = length;
  ptr->index_checksum = Hash64(std::span<const std::byte>(r, kRootSize));
  std::byte trailer[kTrailerSize];
  EncodeTrailer(*ptr, trailer);

  TS_RETURN_IF_ERROR(out.Put(r));
  TS_RETURN_IF_ERROR(out.Put(std::as_bytes(std::span<const char>(entries_.data(), entries_.size()))));
  TS_RETURN_IF_ERROR(out.Put(table_bytes));
  TS_RETURN_IF_ERROR(out.Put(std::as_bytes(std::span<const char>(metadata.data(), metadata.size()))));
  TS_RETURN_IF_ERROR(out.PutZeros(length - (kRootSize + entries_.size() + table_bytes.size() + metadata.size())));
  return out.Put(trailer);
}

}  // namespace tensorsafe::internal
