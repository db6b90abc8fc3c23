// The persisted structures of the .tsafe format and their encode/decode pairs
// (docs/FORMAT.md). Decoders check only what a structure can check on its own;
// cross-checks against the file live in the reader.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::internal {

// FORMAT.md §3: "\x89TSF\r\n\x1a\n". 0x89 is not ASCII and cannot start a
// UTF-8 sequence; CR LF and LF catch newline translation; 0x1a stops `type`.
inline constexpr std::array<std::byte, 8> kMagic = {std::byte{0x89}, std::byte{'T'},  std::byte{'S'},  std::byte{'F'},
                                                    std::byte{0x0d}, std::byte{0x0a}, std::byte{0x1a}, std::byte{0x0a}};
inline constexpr std::uint16_t kVersionMajor = 1;
inline constexpr std::uint16_t kVersionMinor = 1;

inline constexpr std::size_t kIdentitySize = 32;
inline constexpr std::size_t kSlotSize = 48;
inline constexpr std::size_t kHeaderSize = kIdentitySize + 2 * kSlotSize;  // 128
inline constexpr std::size_t kTrailerSize = 48;
inline constexpr std::size_t kRootSize = 128;
inline constexpr std::size_t kEntryFixedSize = 40;
inline constexpr std::uint32_t kMaxAlignment = 1u << 30;
inline constexpr std::uint32_t kSpecMaxRank = 255;
inline constexpr std::uint32_t kSpecMaxNameBytes = 65535;
// FORMAT.md §6.3: 40 bits of entry position, 24 bits of hash tag.
inline constexpr std::uint64_t kSlotPosBits = 40;
inline constexpr std::uint64_t kMaxEntriesBytes = (std::uint64_t{1} << kSlotPosBits) * 8 - 8;
// "TSFINDEX"
inline constexpr std::array<std::byte, 8> kIndexMagic = {std::byte{'T'}, std::byte{'S'}, std::byte{'F'},
                                                         std::byte{'I'}, std::byte{'N'}, std::byte{'D'},
                                                         std::byte{'E'}, std::byte{'X'}};
// FORMAT.md §3.2 feature bits. Bit 0 (spec 1.1): the index has sparse COO
// entries, so a 1.0 reader, which would reject them, refuses the file at once.
inline constexpr std::uint64_t kFeatureCoo = 1;
inline constexpr std::uint64_t kKnownFeatures = kFeatureCoo;
// FORMAT.md §6.2: the COO parameters after the dims (nnz, values offset, flags).
inline constexpr std::size_t kCooParamsSize = 24;
inline constexpr std::uint64_t kCooCoalesced = 1;

inline std::uint64_t SlotOffset(int i) { return kIdentitySize + static_cast<std::uint64_t>(i) * kSlotSize; }

// FORMAT.md §3.1
struct Identity {
  std::uint16_t version_major = kVersionMajor;
  std::uint16_t version_minor = kVersionMinor;
  std::uint32_t header_size = kHeaderSize;
  std::uint32_t alignment = 64;
};
void EncodeIdentity(const Identity& id, std::byte* out);  // kIdentitySize bytes
// Checks magic, checksum, version, header size, alignment, reserved.
Status DecodeIdentity(std::span<const std::byte> in, Identity* id);

// A pointer to a live index: in a header slot (FORMAT.md §3.2) and in the
// trailer (§7).
struct IndexPointer {
  std::uint64_t features = 0;
  std::uint64_t index_offset = 0;
  std::uint64_t index_length = 0;
  std::uint64_t index_checksum = 0;  // XXH3-64 of the index root
  bool operator==(const IndexPointer&) const = default;
};

struct Slot {
  std::uint64_t sequence = 0;  // 0: the slot is empty (all 48 bytes zero)
  IndexPointer ptr;
};
void EncodeSlot(const Slot& s, std::byte* out);  // kSlotSize bytes
enum class SlotState { kEmpty, kValid, kTorn };
SlotState DecodeSlot(std::span<const std::byte> in, Slot* s);

void EncodeTrailer(const IndexPointer& p, std::byte* out);  // kTrailerSize
Status DecodeTrailer(std::span<const std::byte> in, IndexPointer* p);

// FORMAT.md §6.1: the fixed root at the start of the index. Section offsets
// are relative to the index start and follow a fixed order.
struct IndexRoot {
  std::uint64_t tensor_count = 0;
  std::uint64_t entries_offset = kRootSize;
  std::uint64_t entries_length = 0;
  std::uint64_t entries_checksum = 0;
  std::uint64_t hash_offset = kRootSize;
  std::uint64_t hash_capacity = 0;
  std::uint64_t hash_checksum = 0;
  std::uint64_t metadata_offset = kRootSize;
  std::uint64_t metadata_length = 0;
  std::uint64_t metadata_checksum = 0;
  std::uint64_t data_bytes = 0;  // sum of the tensors' data lengths
};
void EncodeRoot(const IndexRoot& r, std::byte* out);  // kRootSize
// Checks magic, reserved bytes and the canonical section layout against
// `index_length`; the message says which field is wrong.
Status DecodeRoot(std::span<const std::byte> in, std::uint64_t index_length, IndexRoot* r);

// Capacity of the hash table for `count` tensors: the smallest power of two
// >= 2 * count, 0 for an empty file (FORMAT.md §6.3).
std::uint64_t HashCapacity(std::uint64_t count);
std::uint64_t IndexLength(std::uint64_t entries_length, std::uint64_t hash_capacity, std::uint64_t metadata_length);

// FORMAT.md §6.2: one index entry.
struct EntryView {
  std::uint32_t length = 0;
  DType dtype = DType::kU8;
  Layout layout = Layout::kDense;
  std::uint8_t rank = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t data_length = 0;
  std::uint64_t data_checksum = 0;
  std::span<const std::byte> dims;  // rank little-endian u64
  std::uint64_t nnz = 0;            // COO only
  std::uint64_t values_offset = 0;  // COO only, relative to data_offset
  std::uint64_t coo_flags = 0;      // COO only
  std::string_view name;
  std::string_view metadata;
  std::uint64_t dim(std::size_t i) const;
};
// The fields an entry is encoded from, by reference: a writer adding a small
// tensor encodes from its arguments without copying them into a TensorInfo.
struct EntryFields {
  std::string_view name;
  DType dtype = DType::kU8;
  Layout layout = Layout::kDense;
  std::span<const std::uint64_t> shape;
  std::uint64_t data_offset = 0;
  std::uint64_t data_length = 0;
  std::uint64_t data_checksum = 0;
  std::string_view metadata_json;
  std::uint64_t nnz = 0;                // COO only
  std::uint64_t coo_values_offset = 0;  // COO only
  bool coalesced = false;               // COO only
};
EntryFields FieldsOf(const TensorInfo& t);
// The encoded length of an entry (a multiple of 8).
std::size_t EntryLength(const EntryFields& e);
// Encodes an entry into `out`, EntryLength(e) bytes that are zero (the
// padding is not written).
void EncodeEntry(const EntryFields& e, std::byte* out);
// The length an entry claims, from its first 4 bytes.
std::uint32_t PeekEntryLength(const std::byte* p);
// Decodes one entry of exactly `in.size()` bytes (its claimed length): checks
// the entry checksum, structure, dtype and layout codes and padding. Limits
// come from the options; semantic checks (data range, size) are the reader's.

Status DecodeEntry(std::span<const std::byte> in, std::uint32_t max_rank, std::uint32_t max_name_bytes, EntryView* e);

}  // namespace tensorsafe::internal
