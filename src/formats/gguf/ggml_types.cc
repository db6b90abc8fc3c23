// The ggml tensor type table (docs/formats/gguf.md §Tensor types). Codes and
// block geometry are ggml's; codes 4, 5, 31-33 and 36-38 were removed from
// ggml and are unknown here.
#include "tensorsafe/formats/gguf.h"

namespace tensorsafe::gguf {
namespace {

constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4, DType::kF32},
    {1, "F16", 1, 2, DType::kF16},
    {2, "Q4_0", 32, 18, std::nullopt},
    {3, "Q4_1", 32, 20, std::nullopt},
    {6, "Q5_0", 32, 22, std::nullopt},
    {7, "Q5_1", 32, 24, std::nullopt},
    {8, "Q8_0", 32, 34, std::nullopt},
    // Two f16 (d, s) + 32 int8. gguf-py 0.19 says 40 (an old f32 layout).
    {9, "Q8_1", 32, 36, std::nullopt},
    {10, "Q2_K", 256, 84, std::nullopt},
    {11, "Q3_K", 256, 110, std::nullopt},
    {12, "Q4_K", 256, 144, std::nullopt},
    {13, "Q5_K", 256, 176, std::nullopt},
    {14, "Q6_K", 256, 210, std::nullopt},
    {15, "Q8_K", 256, 292, std::nullopt},
    {16, "IQ2_XXS", 256, 66, std::nullopt},
    {17, "IQ2_XS", 256, 74, std::nullopt},
    {18, "IQ3_XXS", 256, 98, std::nullopt},
    {19, "IQ1_S", 256, 50, std::nullopt},
    {20, "IQ4_NL", 32, 18, std::nullopt},
    {21, "IQ3_S", 256, 110, std::nullopt},
    {22, "IQ2_S", 256, 82, std::nullopt},
    {23, "IQ4_XS", 256, 136, std::nullopt},
    {24, "I8", 1, 1, DType::kI8},
    {25, "I16", 1, 2, DType::kI16},
    {26, "I32", 1, 4, DType::kI32},
    {27, "I64", 1, 8, DType::kI64},
    {28, "F64", 1, 8, DType::kF64},
    {29, "IQ1_M", 256, 56, std::nullopt},
    {30, "BF16", 1, 2, DType::kBF16},
    {34, "TQ1_0", 256, 54, std::nullopt},
    {35, "TQ2_0", 256, 66, std::nullopt},
    {39, "MXFP4", 32, 17, std::nullopt},
    {40, "NVFP4", 64, 36, std::nullopt},
    {41, "Q1_0", 128, 18, std::nullopt},
    {42, "Q2_0", 64, 18, std::nullopt},
};

}  // namespace

std::optional<GgmlType> LookupGgmlType(std::uint32_t code) {
  for (const GgmlType& t : kTypes) {
    if (t.code == code) return t;
  }
  return std::nullopt;
}

std::optional<GgmlType> FindGgmlType(std::string_view name) {
  for (const GgmlType& t : kTypes) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

}  // namespace tensorsafe::gguf
