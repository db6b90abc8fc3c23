// The safetensors dtype names and their tensorsafe equivalents
// (docs/formats/safetensors.md, "Dtypes").
#include <algorithm>
#include <array>
#include <cstdint>

#include "formats/safetensors/internal.h"

namespace tensorsafe::safetensors {
namespace internal {
namespace {

// In the crate's enum order: writers sort by it, so never reorder.
constexpr std::array<StDType, kNumStDTypes> kTable = {{
    {"BOOL", DType::kBool, 8},
    {"F4", DType::kF4E2M1, 4},
    {"F6_E2M3", DType::kF6E2M3, 6},
    {"F6_E3M2", DType::kF6E3M2, 6},
    {"U8", DType::kU8, 8},
    {"I8", DType::kI8, 8},
    {"F8_E5M2", DType::kF8E5M2, 8},
    {"F8_E4M3", DType::kF8E4M3FN, 8},
    {"F8_E8M0", DType::kF8E8M0, 8},
    {"F8_E4M3FNUZ", DType::kF8E4M3FNUZ, 8},
    {"F8_E5M2FNUZ", DType::kF8E5M2FNUZ, 8},
    {"I16", DType::kI16, 16},
    {"U16", DType::kU16, 16},
    {"F16", DType::kF16, 16},
    {"BF16", DType::kBF16, 16},
    {"I32", DType::kI32, 32},
    {"U32", DType::kU32, 32},
    {"F32", DType::kF32, 32},
    {"C64", DType::kC64, 64},
    {"F64", DType::kF64, 64},
    {"I64", DType::kI64, 64},
    {"U64", DType::kU64, 64},
}};

}  // namespace

const StDType& StDTypeAt(int rank) { return kTable[static_cast<std::size_t>(rank)]; }

namespace {

// A name of up to 16 bytes as two words (zero-padded) and its length: the
// lookup runs once per tensor of every header, and comparing through
// memcmp calls cost 3% of opening 100 shards of 1,000 tensors.
struct PackedName {
  std::uint64_t lo = 0, hi = 0;
  std::size_t size = 0;
  constexpr bool operator==(const PackedName&) const = default;
};

constexpr PackedName Pack(std::string_view s) {
  PackedName p;
  p.size = s.size();
  for (std::size_t i = 0; i < s.size() && i < 16; ++i) {
    (i < 8 ? p.lo : p.hi) |= std::uint64_t{static_cast<unsigned char>(s[i])} << (8 * (i % 8));
  }
  return p;
}

constexpr std::array<PackedName, kNumStDTypes> kPacked = [] {
  std::array<PackedName, kNumStDTypes> a{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = Pack(kTable[i].name);
  return a;
}();
static_assert(std::all_of(kTable.begin(), kTable.end(), [](const StDType& t) { return t.name.size() <= 16; }));

}  // namespace

int RankOfName(std::string_view name) {
  if (name.size() > 16) return -1;
  const PackedName p = Pack(name);
  for (int i = kNumStDTypes - 1; i >= 0; --i) {  // common types sit at the end
    if (kPacked[static_cast<std::size_t>(i)] == p) return i;
  }
  return -1;
}

int RankOfDType(DType dtype) {
  for (int i = 0; i < kNumStDTypes; ++i) {
    if (kTable[static_cast<std::size_t>(i)].dtype == dtype) return i;
  }
  return -1;
}

}  // namespace internal

std::optional<std::string_view> DTypeToName(DType dtype) {
  const int r = internal::RankOfDType(dtype);
  if (r < 0) return std::nullopt;
  return internal::StDTypeAt(r).name;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  const int r = internal::RankOfName(name);
  if (r < 0) return std::nullopt;
  return internal::StDTypeAt(r).dtype;
}

}  // namespace tensorsafe::safetensors
