#include "tensorsafe/dtype.h"

#include <array>
#include <cctype>
#include <string>

namespace tensorsafe {
namespace {

// FORMAT.md §5, table "dtype codes". Index = code - 1.
constexpr std::array<DTypeInfo, kNumDTypes> kTable = {{
    {DType::kBool, "bool", 1, 1, 8, false, false},
    {DType::kU8, "u8", 1, 1, 8, false, false},
    {DType::kU16, "u16", 1, 2, 16, false, false},
    {DType::kU32, "u32", 1, 4, 32, false, false},
    {DType::kU64, "u64", 1, 8, 64, false, false},
    {DType::kI8, "i8", 1, 1, 8, false, true},
    {DType::kI16, "i16", 1, 2, 16, false, true},
    {DType::kI32, "i32", 1, 4, 32, false, true},
    {DType::kI64, "i64", 1, 8, 64, false, true},
    {DType::kF16, "f16", 1, 2, 16, true, true},
    {DType::kBF16, "bf16", 1, 2, 16, true, true},
    {DType::kF32, "f32", 1, 4, 32, true, true},
    {DType::kF64, "f64", 1, 8, 64, true, true},
    {DType::kC64, "c64", 1, 8, 64, true, true},
    {DType::kC128, "c128", 1, 16, 128, true, true},
    {DType::kF8E4M3FN, "f8_e4m3fn", 1, 1, 8, true, true},
    {DType::kF8E5M2, "f8_e5m2", 1, 1, 8, true, true},
    {DType::kF8E4M3FNUZ, "f8_e4m3fnuz", 1, 1, 8, true, true},
    {DType::kF8E5M2FNUZ, "f8_e5m2fnuz", 1, 1, 8, true, true},
    {DType::kF8E8M0, "f8_e8m0", 1, 1, 8, true, false},
    {DType::kF6E2M3, "f6_e2m3", 4, 3, 6, true, true},
    {DType::kF6E3M2, "f6_e3m2", 4, 3, 6, true, true},
    {DType::kF4E2M1, "f4_e2m1", 2, 1, 4, true, true},
    {DType::kI4, "i4", 2, 1, 4, false, true},
    {DType::kU4, "u4", 2, 1, 4, false, false},
}};

struct Alias {
  std::string_view name;
  DType dtype;
};
// Lower-cased spellings used by NumPy, PyTorch, safetensors and ml_dtypes.
constexpr Alias kAliases[] = {
    {"uint8", DType::kU8},
    {"uint16", DType::kU16},
    {"uint32", DType::kU32},
    {"uint64", DType::kU64},
    {"int8", DType::kI8},
    {"int16", DType::kI16},
    {"int32", DType::kI32},
    {"int64", DType::kI64},
    {"float16", DType::kF16},
    {"half", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"float32", DType::kF32},
    {"float", DType::kF32},
    {"float64", DType::kF64},
    {"double", DType::kF64},
    {"complex64", DType::kC64},
    {"complex128", DType::kC128},
    {"bool_", DType::kBool},
    {"float8_e4m3fn", DType::kF8E4M3FN},
    {"f8_e4m3", DType::kF8E4M3FN},
    {"float8_e5m2", DType::kF8E5M2},
    {"float8_e4m3fnuz", DType::kF8E4M3FNUZ},
    {"float8_e5m2fnuz", DType::kF8E5M2FNUZ},
    {"float8_e8m0fnu", DType::kF8E8M0},
    {"float6_e2m3fn", DType::kF6E2M3},
    {"float6_e3m2fn", DType::kF6E3M2},
    {"float4_e2m1fn", DType::kF4E2M1},
    {"f4", DType::kF4E2M1},
    {"int4", DType::kI4},
    {"uint4", DType::kU4},
};

}  // namespace

std::optional<DTypeInfo> LookupDType(std::uint8_t code) {
  if (code < 1 || code > kNumDTypes) return std::nullopt;
  return kTable[code - 1];
}

const DTypeInfo& GetDTypeInfo(DType dtype) { return kTable[static_cast<int>(dtype) - 1]; }

std::optional<DType> ParseDType(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const DTypeInfo& i : kTable) {
    if (i.name == lower) return i.dtype;
  }
  for (const Alias& a : kAliases) {
    if (a.name == lower) return a.dtype;
  }
  return std::nullopt;
}

}  // namespace tensorsafe
