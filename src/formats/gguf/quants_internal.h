// Block kernels of the GGUF codecs (include/tensorsafe/formats/gguf_quants.h).
// Each dequantiser reproduces gguf-py 0.19.0's numpy code for its type
// operation by operation in f32 (same products, same order, no fused
// multiply-add), so results are bit-identical to gguf.quants.dequantize;
// each quantiser likewise reproduces gguf.quants.quantize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"
#include "util/float16.h"

// numpy never fuses a multiply and an add; neither may the kernels (GCC's
// ISO mode does not contract by default, clang's does where FMA exists).
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
// The kernels are loops over bytes and floats that GCC vectorises at -O2
// only with the dynamic cost model: Q4_K decodes at 5.6 GB/s instead of
// 1.9 on one x86-64 core (SSE2). Vectorised multiplies and subtractions
// give the same IEEE results (no reassociation without -ffast-math).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

namespace tensorsafe::gguf::internal {

// Decodes `n` consecutive blocks at `in` into n * block_elems floats.
using DequantKernel = void (*)(const std::uint8_t* in, std::size_t n, float* out);
// Encodes n * block_elems floats into `n` blocks.
using QuantKernel = void (*)(const float* in, std::size_t n, std::uint8_t* out);

// The kernels of the type with ggml code `code`; nullptr when gguf-py has
// none for it.
DequantKernel FindDequantKernel(std::uint32_t code);
QuantKernel FindQuantKernel(std::uint32_t code);

// quants_basic.cc: plain types, the 32-element types, TQ, MXFP4, NVFP4.
DequantKernel BasicDequantKernel(std::uint32_t code);
// quants_k.cc: Q2_K..Q6_K.
DequantKernel KDequantKernel(std::uint32_t code);
// quants_iq.cc: the IQ types.
DequantKernel IqDequantKernel(std::uint32_t code);
// quantize.cc.
QuantKernel QuantKernelFor(std::uint32_t code);

// How DequantizeSet (and convert's --dtype) treats a tensor: ggml blocks
// marked "gguf.type"; f64/f32/f16/bf16; other floating dtypes (refused);
// everything else (kept as it is).
enum class TensorClass { kBlocks, kFloat, kOtherFloat, kKeep };
TensorClass Classify(const TensorInfo& info);

// `metadata_json` with a "general.file_type" key set to the llama_ftype of
// `dtype` (f32, f16 or bf16); unchanged without that key.
Result<std::string> WithFileType(const std::string& metadata_json, DType dtype);

// Little-endian loads from block bytes.
inline std::uint16_t U16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline std::uint32_t U32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// An f16 field as numpy's astype(float32) gives it (exact).
inline float F16(const std::uint8_t* p) { return tensorsafe::internal::HalfToFloat(U16(p)); }

// ggml's codes, for the kernels' tables.
enum Code : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
};

// numpy's a + b when b is a broadcast scale (Q4_1, Q5_1): its compiled add
// hands back b's NaN when both are NaN (x86 returns the first operand's,
// and the operands are swapped there), so the choice is made explicitly.
inline float AddLikeNumpy(float a, float b) {
  if (b != b) return tensorsafe::internal::F32FromBits(tensorsafe::internal::F32Bits(b) | 0x400000u);
  return a + b;
}

// v * (negative ? -1 : 1) as numpy computes it: a NaN keeps its sign (x86
// returns the NaN operand). Written as a negation so that the compiler
// cannot make it one that flips NaN signs.
inline float TimesSign(float v, bool negative) { return negative && v == v ? -v : v; }

// IQ4_NL's and IQ4_XS's 16 values.
inline constexpr std::int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4's and NVFP4's e2m1 values, doubled.
inline constexpr std::int8_t kFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// gguf-py's e8m0_to_fp32_half (ggml_e8m0_to_fp32_half): 2^(e-128) as bits.
inline float E8M0Half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? std::uint32_t{0x00200000} << e : static_cast<std::uint32_t>(e - 1) << 23;
  return tensorsafe::internal::F32FromBits(bits);
}

}  // namespace tensorsafe::gguf::internal
