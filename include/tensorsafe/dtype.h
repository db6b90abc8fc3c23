// Element types of tensors, their persisted codes and their byte geometry.
//
// Every dtype is described by a block: `block_elems` elements stored in
// `block_bytes` bytes. Whole-byte types have blocks of one element; packed
// sub-byte types pack several elements per block (f4/i4/u4: 2 per byte,
// f6: 4 per 3 bytes). A tensor of N elements occupies N / block_elems *
// block_bytes bytes and N must be a multiple of block_elems (FORMAT.md §5).
//
// Thread safety: all functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tensorsafe {

// Persisted in .tsafe index entries (FORMAT.md §5): never renumber.
enum class DType : std::uint8_t {
  kBool = 1,
  kU8 = 2,
  kU16 = 3,
  kU32 = 4,
  kU64 = 5,
  kI8 = 6,
  kI16 = 7,
  kI32 = 8,
  kI64 = 9,
  kF16 = 10,
  kBF16 = 11,
  kF32 = 12,
  kF64 = 13,
  kC64 = 14,   // complex: two f32 (real, imaginary)
  kC128 = 15,  // complex: two f64
  kF8E4M3FN = 16,
  kF8E5M2 = 17,
  kF8E4M3FNUZ = 18,
  kF8E5M2FNUZ = 19,
  kF8E8M0 = 20,  // scale type of the OCP MX formats
  kF6E2M3 = 21,  // packed: 4 elements in 3 bytes
  kF6E3M2 = 22,
  kF4E2M1 = 23,  // packed: 2 elements per byte
  kI4 = 24,
  kU4 = 25,
};

inline constexpr int kNumDTypes = 25;  // codes 1..25 are defined in spec 1.0

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // canonical lower-case name: "f32", "bf16", "f8_e4m3fn"
  std::uint32_t block_elems;
  std::uint32_t block_bytes;
  // Bits per element (for display): 4, 6, 8, ... Sub-byte types have bits < 8.
  std::uint32_t bits;
  bool is_float;   // floating point incl. f8/f6/f4 and complex
  bool is_signed;  // signed integer or floating point
};

// The description of a defined dtype, or nullopt for an undefined code.
std::optional<DTypeInfo> LookupDType(std::uint8_t code);
// Always valid for an enumerator of DType.
const DTypeInfo& GetDTypeInfo(DType dtype);
// Parses a canonical name ("f32") or a common alias ("float32", "F32",
// "bfloat16", "float8_e4m3fn", "int4"); nullopt when unknown.
std::optional<DType> ParseDType(std::string_view name);
inline std::string_view DTypeName(DType dtype) { return GetDTypeInfo(dtype).name; }
// Bytes per element for whole-byte types; 0 for packed sub-byte types.
inline std::uint32_t ElementSize(DType dtype) {
  const DTypeInfo& i = GetDTypeInfo(dtype);
  return i.block_elems == 1 ? i.block_bytes : 0;
}

}  // namespace tensorsafe
