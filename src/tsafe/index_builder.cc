#include "tsafe/index_builder.h"

#include <algorithm>

#include "util/endian.h"
#include "util/hash.h"

namespace tensorsafe::internal {

namespace {
constexpr std::uint64_t kPosMask = (std::uint64_t{1} << kSlotPosBits) - 1;

// FORMAT.md §6.3: linear probing from the hash's home slot of a table of
// mask + 1 u64 slots; a slot holds the hash's tag over entry offset / 8 + 1.
void PlaceIn(std::byte* table, std::uint64_t mask, std::uint64_t h, std::uint64_t entry_off) {
  std::uint64_t i = h & mask;
  while (Load64(table + 8 * i) != 0) i = (i + 1) & mask;
  Store64(table + 8 * i, ((h >> kSlotPosBits) << kSlotPosBits) | (entry_off / 8 + 1));
}
}  // namespace

Status IndexBuilder::Add(const EntryFields& t, std::optional<std::uint64_t> name_hash) {
  const std::uint64_t off = entries_.size();
  if (off / 8 + 1 >= (std::uint64_t{1} << kSlotPosBits)) return LimitExceeded("index entries exceed 8 TiB");
  EncodeEntry(t, entries_.Grow(EntryLength(t)));
  if (t.layout == Layout::kCoo) features_ |= kFeatureCoo;
  const std::uint64_t h = name_hash ? *name_hash : NameHash(t.name);
  std::byte* slot = slots_.Grow(16);
  Store64(slot, h);
  Store64(slot + 8, off);
  ++count_;
  data_bytes_ += t.data_length;
  if (8 * count_ > 64 * filter_.size()) {
    GrowFilter();
  } else {
    filter_[FilterWord(h)] |= FilterBits(h);
  }
  // Load factor <= 1/2 keeps probes short. Every entry is placed again in
  // file order, so the table stays the file's own.
  const std::uint64_t capacity = table_.size() / 8;
  if (2 * count_ > capacity) {
    const std::uint64_t grown = std::max<std::uint64_t>(64, 2 * capacity);
    table_ = PageBuffer();
    table_.Grow(grown * 8);  // zero: every slot empty
    table_mask_ = grown - 1;
    placed_ = 0;
  }
  // The entry before this one, whose home slot the previous Add started to
  // load, is placed now; this one's slot starts loading for the next.
  Place(table_.data(), table_mask_, placed_, count_ - 1);
  placed_ = count_ - 1;
  __builtin_prefetch(table_.data() + 8 * (h & table_mask_), 1);
  return Status::OK();
}

void IndexBuilder::GrowFilter() {
  filter_ = std::vector<std::uint64_t>(2 * filter_.size());
  filter_mask_ = filter_.size() - 1;
  for (std::uint64_t k = 0; k < count_; ++k) {
    const std::uint64_t h = Load64(slots_.data() + 16 * k);
    filter_[FilterWord(h)] |= FilterBits(h);
  }
}

void IndexBuilder::Place(std::byte* table, std::uint64_t mask, std::uint64_t from, std::uint64_t to) const {
  // Each home slot is a cache miss in a table past the caches: a table
  // placed again after growing loads them kAhead entries before use.
  constexpr std::uint64_t kAhead = 8;
  const std::byte* hashes = slots_.data();
  for (std::uint64_t k = from; k < to; ++k) {
    if (k + kAhead < to) __builtin_prefetch(table + 8 * (Load64(hashes + 16 * (k + kAhead)) & mask), 1);
    PlaceIn(table, mask, Load64(hashes + 16 * k), Load64(hashes + 16 * k + 8));
  }
}

void IndexBuilder::PlaceAll() {
  Place(table_.data(), table_mask_, placed_, count_);
  placed_ = count_;
}

std::string_view IndexBuilder::EntryName(std::uint64_t entry_off) const {
  const std::byte* p = entries_.data() + entry_off;
  const std::uint8_t rank = Load8(p + 10);
  return {reinterpret_cast<const char*>(p + kEntryFixedSize + 8 * rank), Load32(p + 12)};
}

bool IndexBuilder::Contains(std::string_view name, std::uint64_t h) {
  const std::uint64_t bits = FilterBits(h);
  if ((filter_[FilterWord(h)] & bits) != bits) return false;
  PlaceAll();
  const std::uint64_t tag = h >> kSlotPosBits;
  for (std::uint64_t i = h & table_mask_;; i = (i + 1) & table_mask_) {
    const std::uint64_t v = Load64(table_.data() + 8 * i);
    if (v == 0) return false;
    if ((v >> kSlotPosBits) == tag && EntryName(((v & kPosMask) - 1) * 8) == name) return true;
  }
}

Status IndexBuilder::WriteTo(DataWriter& out, std::string_view metadata, IndexPointer* ptr) {
  const std::uint64_t index_offset = out.position();
  IndexRoot root;
  root.tensor_count = count_;
  root.entries_length = entries_.size();
  root.hash_capacity = HashCapacity(count_);
  root.hash_offset = kRootSize + entries_.size();
  root.metadata_offset = root.hash_offset + root.hash_capacity * 8;
  root.metadata_length = metadata.size();
  root.data_bytes = data_bytes_;
  const std::uint64_t length = IndexLength(entries_.size(), root.hash_capacity, metadata.size());

  // FORMAT.md §6.3: open addressing, linear probing, entries in file order:
  // table_ once it has the file's capacity (32 entries and more). Written as
  // host words: endian.h allows only little-endian hosts.
  PlaceAll();
  std::vector<std::uint64_t> small;
  std::span<const std::byte> table(table_.data(), table_.size());
  if (table_.size() != root.hash_capacity * 8) {  // below table_'s minimum of 64 slots
    small.assign(root.hash_capacity, 0);
    table = std::as_bytes(std::span<const std::uint64_t>(small));
    Place(reinterpret_cast<std::byte*>(small.data()), root.hash_capacity - 1, 0, count_);
  }
  const std::span<const std::byte> entries(entries_.data(), entries_.size());
  root.entries_checksum = Hash64(entries);
  root.hash_checksum = Hash64(table);
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
  TS_RETURN_IF_ERROR(out.Put(entries));
  TS_RETURN_IF_ERROR(out.Put(table));
  TS_RETURN_IF_ERROR(out.Put(std::as_bytes(std::span<const char>(metadata.data(), metadata.size()))));
  TS_RETURN_IF_ERROR(out.PutZeros(length - (kRootSize + entries.size() + table.size() + metadata.size())));
  return out.Put(trailer);
}

}  // namespace tensorsafe::internal
