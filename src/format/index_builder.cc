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

std::string IndexBuilder::Finish(std::uint64_t index_offset, std::string_view metadata,
                                 IndexPointer* ptr) const {
  IndexRoot root;
  root.tensor_count = slots_.size();
  root.entries_length = entries_.size();
  root.hash_capacity = HashCapacity(slots_.size());
  root.hash_offset = kRootSize + entries_.size();
  root.metadata_offset = root.hash_offset + root.hash_capacity * 8;
  root.metadata_length = metadata.size();
  root.data_bytes = data_bytes_;
  const std::uint64_t length = IndexLength(entries_.size(), root.hash_capacity, metadata.size());

  std::string out;
  out.reserve(length + kTrailerSize);
  out.resize(kRootSize);  // root, filled in last
  out += entries_;
  // FORMAT.md §6.3: open addressing, linear probing, entries in file order.
  const std::size_t hash_at = out.size();
  out.resize(hash_at + root.hash_capacity * 8, '\0');
  auto* table = reinterpret_cast<std::byte*>(out.data() + hash_at);
  const std::uint64_t mask = root.hash_capacity - 1;
  for (const auto& [h, off] : slots_) {
    std::uint64_t i = h & mask;
    while (Load64(table + 8 * i) != 0) i = (i + 1) & mask;
    Store64(table + 8 * i, ((h >> kSlotPosBits) << kSlotPosBits) | (off / 8 + 1));
  }
  out += metadata;
  out.resize(length, '\0');
  root.entries_checksum = Hash64(std::string_view(entries_));
  root.hash_checksum = Hash64(std::string_view(out).substr(hash_at, root.hash_capacity * 8));
  root.metadata_checksum = Hash64(metadata);
  auto* r = reinterpret_cast<std::byte*>(out.data());
  EncodeRoot(root, r);
  ptr->features = features_;
  ptr->index_offset = index_offset;
  ptr->index_length = length;
  ptr->index_checksum = Hash64(std::span<const std::byte>(r, kRootSize));
  out.resize(length + kTrailerSize);
  EncodeTrailer(*ptr, reinterpret_cast<std::byte*>(out.data() + length));
  return out;
}

}  // namespace tensorsafe::internal
