#include "tsafe/layout.h"

#include <cstring>

#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"

namespace tensorsafe::internal {
namespace {

std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool AllZero(std::span<const std::byte> b) {
  for (std::byte x : b) {
    if (x != std::byte{0}) return false;
  }
  return true;
}

void EncodePointer(const IndexPointer& p, std::byte* out) {
  Store64(out + 0, p.features);
  Store64(out + 8, p.index_offset);
  Store64(out + 16, p.index_length);
  Store64(out + 24, p.index_checksum);
}
IndexPointer DecodePointer(const std::byte* in) {
  return {Load64(in + 0), Load64(in + 8), Load64(in + 16), Load64(in + 24)};
}

}  // namespace

// FORMAT.md §3.1: magic 8 | major 2 | minor 2 | header_size 4 | alignment 4 |
// reserved 4 | checksum 8 (XXH3-64 of bytes 0..23).
void EncodeIdentity(const Identity& id, std::byte* out) {
  std::memcpy(out, kMagic.data(), 8);
  Store16(out + 8, id.version_major);
  Store16(out + 10, id.version_minor);
  Store32(out + 12, id.header_size);
  Store32(out + 16, id.alignment);
  Store32(out + 20, 0);
  Store64(out + 24, Hash64(std::span<const std::byte>(out, 24)));
}

Status DecodeIdentity(std::span<const std::byte> in, Identity* id) {
  if (in.size() < kIdentitySize) return Corruption("header truncated");
  if (std::memcmp(in.data(), kMagic.data(), 8) != 0) {
    return Corruption("not a tensorsafe file: bad magic at offset 0");
  }
  const std::uint64_t stored = Load64(in.data() + 24);
  const std::uint64_t computed = Hash64(in.first(24));
  if (stored != computed) {
    return Corruption("header identity checksum mismatch: stored " + Hex(stored) + ", computed " + Hex(computed));
  }
  id->version_major = Load16(in.data() + 8);
  id->version_minor = Load16(in.data() + 10);
  id->header_size = Load32(in.data() + 12);
  id->alignment = Load32(in.data() + 16);
  if (id->version_major != kVersionMajor) {
    return Unsupported("format version " + std::to_string(id->version_major) + "." + std::to_string(id->version_minor) +
                       " is not supported (this reader reads " + std::to_string(kVersionMajor) + ".x)");
  }
  if (id->header_size != kHeaderSize) {
    return Corruption("header size " + std::to_string(id->header_size) + " is not " + std::to_string(kHeaderSize));
  }
  if (!IsPowerOfTwo(id->alignment) || id->alignment > kMaxAlignment) {
    return Corruption("alignment " + std::to_string(id->alignment) + " is not a power of two from 1 to 2^30");
  }
  if (Load32(in.data() + 20) != 0) return Corruption("reserved header bytes 20..23 are not zero");
  return Status::OK();
}

// FORMAT.md §3.2: sequence 8 | features 8 | index_offset 8 | index_length 8 |
// index_checksum 8 | slot checksum 8 (XXH3-64 of bytes 0..39).
void EncodeSlot(const Slot& s, std::byte* out) {
  Store64(out, s.sequence);
  EncodePointer(s.ptr, out + 8);
  Store64(out + 40, Hash64(std::span<const std::byte>(out, 40)));
}

SlotState DecodeSlot(std::span<const std::byte> in, Slot* s) {
  if (AllZero(in.first(kSlotSize))) return SlotState::kEmpty;
  if (Load64(in.data() + 40) != Hash64(in.first(40))) return SlotState::kTorn;
  s->sequence = Load64(in.data());
  s->ptr = DecodePointer(in.data() + 8);
  // A checksummed slot with sequence 0 was not written by a conforming writer.
  return s->sequence == 0 ? SlotState::kTorn : SlotState::kValid;
}

// FORMAT.md §7: features 8 | index_offset 8 | index_length 8 |
// index_checksum 8 | checksum 8 (of bytes 0..31) | magic 8.
void EncodeTrailer(const IndexPointer& p, std::byte* out) {
  EncodePointer(p, out);
  Store64(out + 32, Hash64(std::span<const std::byte>(out, 32)));
  std::memcpy(out + 40, kMagic.data(), 8);
}

Status DecodeTrailer(std::span<const std::byte> in, IndexPointer* p) {
  if (std::memcmp(in.data() + 40, kMagic.data(), 8) != 0) {
    return Corruption("trailer magic missing from the last 8 bytes");
  }
  const std::uint64_t stored = Load64(in.data() + 32);
  const std::uint64_t computed = Hash64(in.first(32));
  if (stored != computed) {
    return Corruption("trailer checksum mismatch: stored " + Hex(stored) + ", computed " + Hex(computed));
  }
  *p = DecodePointer(in.data());
  return Status::OK();
}

// FORMAT.md §6.1
void EncodeRoot(const IndexRoot& r, std::byte* out) {
  std::memset(out, 0, kRootSize);
  std::memcpy(out, kIndexMagic.data(), 8);
  Store64(out + 8, r.tensor_count);
  Store64(out + 16, r.entries_offset);
  Store64(out + 24, r.entries_length);
  Store64(out + 32, r.entries_checksum);
  Store64(out + 40, r.hash_offset);
  Store64(out + 48, r.hash_capacity);
  Store64(out + 56, r.hash_checksum);
  Store64(out + 64, r.metadata_offset);
  Store64(out + 72, r.metadata_length);
  Store64(out + 80, r.metadata_checksum);
  Store64(out + 88, r.data_bytes);
}

std::uint64_t HashCapacity(std::uint64_t count) {
  if (count == 0) return 0;
  std::uint64_t cap = 1;
  while (cap < 2 * count) cap <<= 1;
  return cap;
}

std::uint64_t IndexLength(std::uint64_t entries_length, std::uint64_t hash_capacity, std::uint64_t metadata_length) {
  return (kRootSize + entries_length + hash_capacity * 8 + metadata_length + 7) & ~std::uint64_t{7};
}

Status DecodeRoot(std::span<const std::byte> in, std::uint64_t index_length, IndexRoot* r) {
  if (std::memcmp(in.data(), kIndexMagic.data(), 8) != 0) return Corruption("index root magic is wrong");
  if (!AllZero(in.subspan(96, 32))) return Corruption("reserved index root bytes 96..127 are not zero");
  r->tensor_count = Load64(in.data() + 8);
  r->entries_offset = Load64(in.data() + 16);
  r->entries_length = Load64(in.data() + 24);
  r->entries_checksum = Load64(in.data() + 32);
  r->hash_offset = Load64(in.data() + 40);
  r->hash_capacity = Load64(in.data() + 48);
  r->hash_checksum = Load64(in.data() + 56);
  r->metadata_offset = Load64(in.data() + 64);
  r->metadata_length = Load64(in.data() + 72);
  r->metadata_checksum = Load64(in.data() + 80);
  r->data_bytes = Load64(in.data() + 88);
  const std::uint64_t n = r->tensor_count;
  // Each entry takes at least kEntryFixedSize bytes of the index.
  if (n > index_length / kEntryFixedSize) {
    return Corruption("index claims " + std::to_string(n) + " tensors but is only " + std::to_string(index_length) +
                      " bytes");
  }
  if (r->hash_capacity != HashCapacity(n)) {
    return Corruption("hash table capacity " + std::to_string(r->hash_capacity) + " is not " +
                      std::to_string(HashCapacity(n)) + " for " + std::to_string(n) + " tensors");
  }
  if (r->entries_offset != kRootSize) {
    return Corruption("entries offset " + std::to_string(r->entries_offset) + " is not " + std::to_string(kRootSize));
  }
  if (r->entries_length % 8 != 0 || r->entries_length < n * kEntryFixedSize || r->entries_length > index_length ||
      r->entries_length > kMaxEntriesBytes) {
    return Corruption("entries length " + std::to_string(r->entries_length) + " is impossible for " +
                      std::to_string(n) + " tensors in an index of " + std::to_string(index_length) + " bytes");
  }
  if (r->hash_offset != kRootSize + r->entries_length) {
    return Corruption("hash table offset " + std::to_string(r->hash_offset) + " is not " +
                      std::to_string(kRootSize + r->entries_length));
  }
  const std::uint64_t hash_end = r->hash_offset + r->hash_capacity * 8;  // bounded by n above
  if (r->metadata_offset != hash_end) {
    return Corruption("metadata offset " + std::to_string(r->metadata_offset) + " is not " + std::to_string(hash_end));
  }
  if (r->metadata_length > index_length ||
      IndexLength(r->entries_length, r->hash_capacity, r->metadata_length) != index_length) {
    return Corruption("index length " + std::to_string(index_length) + " does not match its sections (entries " +
                      std::to_string(r->entries_length) + ", hash slots " + std::to_string(r->hash_capacity) +
                      ", metadata " + std::to_string(r->metadata_length) + ")");
  }
  return Status::OK();
}

std::uint64_t EntryView::dim(std::size_t i) const { return Load64(dims.data() + 8 * i); }

// FORMAT.md §6.2: length 4 | check 4 | dtype 1 | layout 1 | rank 1 | flags 1 |
// name_length 4 | data_offset 8 | data_length 8 | data_checksum 8 |
// dims 8*rank | [COO: nnz 8 | values_offset 8 | coo_flags 8] | name |
// metadata_length 4 | metadata | zero padding to 8.
EntryFields FieldsOf(const TensorInfo& t) {
  return {t.name,        t.dtype,         t.layout,        t.shape, t.data_offset,
          t.data_length, t.data_checksum, t.metadata_json, t.nnz,   t.coo_values_offset,
          t.coalesced};
}

std::size_t EntryLength(const EntryFields& e) {
  const bool coo = e.layout == Layout::kCoo;
  const std::size_t content =
      kEntryFixedSize + 8 * e.shape.size() + (coo ? kCooParamsSize : 0) + e.name.size() + 4 + e.metadata_json.size();
  return (content + 7) & ~std::size_t{7};
}

void EncodeEntry(const EntryFields& e, std::byte* p) {
  // Filled in place: appending field by field cost more than the rest of a
  // small tensor's Add.
  const bool coo = e.layout == Layout::kCoo;
  const std::size_t len = EntryLength(e);
  Store32(p, static_cast<std::uint32_t>(len));
  Store8(p + 8, static_cast<std::uint8_t>(e.dtype));
  Store8(p + 9, static_cast<std::uint8_t>(e.layout));
  Store8(p + 10, static_cast<std::uint8_t>(e.shape.size()));
  Store8(p + 11, 0);
  Store32(p + 12, static_cast<std::uint32_t>(e.name.size()));
  Store64(p + 16, e.data_offset);
  Store64(p + 24, e.data_length);
  Store64(p + 32, e.data_checksum);
  std::byte* q = p + kEntryFixedSize;
  for (std::uint64_t d : e.shape) {
    Store64(q, d);
    q += 8;
  }
  if (coo) {
    Store64(q, e.nnz);
    Store64(q + 8, e.coo_values_offset);
    Store64(q + 16, e.coalesced ? kCooCoalesced : 0);
    q += kCooParamsSize;
  }
  if (!e.name.empty()) std::memcpy(q, e.name.data(), e.name.size());
  q += e.name.size();
  Store32(q, static_cast<std::uint32_t>(e.metadata_json.size()));
  if (!e.metadata_json.empty()) std::memcpy(q + 4, e.metadata_json.data(), e.metadata_json.size());
  Store32(p + 4, static_cast<std::uint32_t>(Hash64(std::span<const std::byte>(p + 8, len - 8))));
}

std::uint32_t PeekEntryLength(const std::byte* p) { return Load32(p); }

Status DecodeEntry(std::span<const std::byte> in, std::uint32_t max_rank, std::uint32_t max_name_bytes, EntryView* e) {
  const std::byte* p = in.data();
  const std::uint64_t len = in.size();
  // `in` is exactly the claimed length, which may be under 4 bytes.
  if (len < kEntryFixedSize || len % 8 != 0 || Load32(p) != len) {
    return Corruption("entry length " + std::to_string(len) + " is not a multiple of 8 of at least 40");
  }
  const std::uint32_t stored = Load32(p + 4);
  const std::uint32_t computed = static_cast<std::uint32_t>(Hash64(in.subspan(8)));
  if (stored != computed) {
    return Corruption("entry checksum mismatch: stored " + Hex(stored) + ", computed " + Hex(computed));
  }
  e->length = static_cast<std::uint32_t>(len);
  const std::uint8_t dtype = Load8(p + 8);
  const std::uint8_t layout = Load8(p + 9);
  e->rank = Load8(p + 10);
  const std::uint8_t flags = Load8(p + 11);
  const std::uint32_t name_len = Load32(p + 12);
  e->data_offset = Load64(p + 16);
  e->data_length = Load64(p + 24);
  e->data_checksum = Load64(p + 32);
  if (flags != 0) return Corruption("entry flags " + std::to_string(flags) + " are not zero");
  if (e->rank > max_rank) {
    return LimitExceeded("rank " + std::to_string(e->rank) + " exceeds the limit of " + std::to_string(max_rank));
  }
  if (name_len > max_name_bytes) {
    return LimitExceeded("name of " + std::to_string(name_len) + " bytes exceeds the limit of " +
                         std::to_string(max_name_bytes));
  }
  const bool coo = layout == static_cast<std::uint8_t>(Layout::kCoo);
  // All sizes below are < 2^32 + 2^12, so the sums cannot overflow 64 bits.
  const std::uint64_t params_end = kEntryFixedSize + 8ull * e->rank;
  const std::uint64_t dims_end = params_end + (coo ? kCooParamsSize : 0);
  const std::uint64_t name_end = dims_end + name_len;
  if (name_end + 4 > len) {
    return Corruption("entry of " + std::to_string(len) + " bytes cannot hold " + (coo ? "COO " : "") + "rank " +
                      std::to_string(e->rank) + " and a name of " + std::to_string(name_len) + " bytes");
  }
  const std::uint32_t meta_len = Load32(p + name_end);
  const std::uint64_t meta_end = name_end + 4 + meta_len;
  if (meta_end > len) {
    return Corruption("entry of " + std::to_string(len) + " bytes cannot hold metadata of " + std::to_string(meta_len) +
                      " bytes");
  }
  if (((meta_end + 7) & ~std::uint64_t{7}) != len) {
    return Corruption("entry length " + std::to_string(len) + " is not its content (" + std::to_string(meta_end) +
                      " bytes) padded to 8");
  }
  if (!AllZero(in.subspan(meta_end))) return Corruption("entry padding is not zero");
  e->dims = in.subspan(kEntryFixedSize, 8ull * e->rank);
  if (coo) {
    e->nnz = Load64(p + params_end);
    e->values_offset = Load64(p + params_end + 8);
    e->coo_flags = Load64(p + params_end + 16);
  }
  e->name = std::string_view(reinterpret_cast<const char*>(p + dims_end), name_len);
  e->metadata = std::string_view(reinterpret_cast<const char*>(p + name_end + 4), meta_len);
  auto info = LookupDType(dtype);
  if (!info) return Unsupported("unknown dtype code " + std::to_string(dtype));
  e->dtype = info->dtype;
  if (!coo && layout != static_cast<std::uint8_t>(Layout::kDense)) {
    return Unsupported("unknown layout code " + std::to_string(layout));
  }
  e->layout = coo ? Layout::kCoo : Layout::kDense;
  if ((e->coo_flags & ~kCooCoalesced) != 0) {
    return Corruption("COO flags " + std::to_string(e->coo_flags) + " have reserved bits set");
  }
  return Status::OK();
}

}  // namespace tensorsafe::internal
