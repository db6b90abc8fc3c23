// IEEE binary16 (f16) and bfloat16 (bf16) <-> binary32 conversions on bits,
// exact and portable (no F16C needed), shared by the dtype cast
// (src/util/cast.cc) and the GGUF block codecs (src/formats/gguf/).
//
// Rounding is to nearest, ties to even, as torch's Tensor.to() and NumPy's
// astype round; overflow gives infinity. NaNs: widening keeps the bits
// (NumPy's astype does; gguf-py's dequantisation relies on it); narrowing
// keeps the sign and the top payload bits and sets the quiet bit, as x86's
// F16C instructions and gguf-py's bf16 conversion do. torch's own NaN bits
// depend on the code path (0x7FC0, 0xFFFF, 0x7FFFFFFF, ...; docs/CAST.md),
// so only "NaN stays NaN" is comparable with it.
#pragma once

#include <bit>
#include <cstdint>

namespace tensorsafe::internal {

inline float F32FromBits(std::uint32_t b) { return std::bit_cast<float>(b); }
inline std::uint32_t F32Bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// f16 -> f32, exact for every input.
inline float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return F32FromBits(sign | 0x7f800000u | (m << 13));
  if (e != 0) return F32FromBits(sign | ((e + 112) << 23) | (m << 13));
  // Zero or subnormal: m x 2^-24, exact in f32.
  return F32FromBits(sign | F32Bits(static_cast<float>(m) * 0x1p-24f));
}

// f32 -> f16, round to nearest even. `numpy_nan` selects NumPy's NaN rule
// (npy_floatbits_to_halfbits: payload >> 13 without the quiet bit, made
// non-zero), which gguf-py's quantisers inherit through astype(float16).
// The three ranges are computed without branches, so that loops over this
// vectorise (f16 output of a 1 GiB Q4_K dequantisation: 0.92 -> 0.50 s);
// checked equal to a branchy reference for all 2^32 inputs.
inline std::uint16_t FloatToHalf(float f, bool numpy_nan = false) {
  const std::uint32_t x = F32Bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (numpy_nan && ax > 0x7f800000u) {
    std::uint32_t h = 0x7c00u + ((ax & 0x7fffffu) >> 13);
    if (h == 0x7c00u) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  // Normal results: rebias (-112 << 23, mod 2^32), round to nearest even
  // by adding 0xfff plus the lowest kept bit; a carry into the exponent is
  // the right result, up to infinity.
  const std::uint32_t normal = ((ax + 0xC8000FFFu + ((ax >> 13) & 1u)) >> 13) & 0xffffu;
  // Below 2^-14, a subnormal f16 or zero: adding 0.5 puts the f16 mantissa
  // in the float's low bits, rounded to nearest even by the FPU (the sum is
  // never subnormal, so flush-to-zero modes cannot touch it).
  const std::uint32_t sub = F32Bits(F32FromBits(ax) + 0.5f) - 0x3f000000u;
  // From 65520 (65504 + half an ulp) on: infinity; NaN: quiet, top payload.
  const std::uint32_t nan = 0u - static_cast<std::uint32_t>(ax > 0x7f800000u);
  const std::uint32_t big = 0x7c00u | (nan & (0x200u | ((ax >> 13) & 0x3ffu)));
  // Masks rather than ?: so that no branch is left (GCC will not if-convert
  // around the float add under the default -ftrapping-math).
  const std::uint32_t small = 0u - static_cast<std::uint32_t>(ax < 0x38800000u);
  const std::uint32_t huge = 0u - static_cast<std::uint32_t>(ax >= 0x477ff000u);
  std::uint32_t h = (sub & small) | (normal & ~small);
  h = (big & huge) | (h & ~huge);
  return static_cast<std::uint16_t>(sign | h);
}

inline float BF16ToFloat(std::uint16_t b) { return F32FromBits(static_cast<std::uint32_t>(b) << 16); }

// f32 -> bf16, round to nearest even; identical to gguf-py's BF16
// quantize_blocks (ggml_compute_fp32_to_bf16) for every input.
inline std::uint16_t FloatToBF16(float f) {
  const std::uint32_t x = F32Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace tensorsafe::internal
