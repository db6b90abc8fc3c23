// Quantisation to the types gguf-py 0.19.0 can quantise, reproducing its
// numpy code (gguf/quants.py) step by step in f32: the same reductions
// (first index of a maximum, NaN winning), the same products and sums in
// the same order, numpy's float -> uint8/int8 casts (C casts through int32
// on x86-64, so NaN and out-of-range values give 0 or the low byte) and its
// float -> f16 rounding of the scales (NaN payloads as NumPy keeps them).
#include <cmath>
#include <cstring>
#include <limits>

#include "formats/gguf/quants_internal.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace tensorsafe::gguf::internal {
namespace {

using tensorsafe::internal::FloatToBF16;
using tensorsafe::internal::FloatToHalf;

// numpy's astype(int8/uint8) of a float32 on x86-64: cvttss2si to int32
// (NaN and values outside int32 give INT32_MIN), then the low byte.
inline std::uint8_t LowByteOfInt32(float x) {
#if defined(__x86_64__) || defined(_M_X64)
  return static_cast<std::uint8_t>(_mm_cvtt_ss2si(_mm_set_ss(x)));
#else
  if (!(x > -2147483649.0f && x < 2147483648.0f)) return 0;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(x));
#endif
}

// astype(uint8) then .clip(0, hi).
inline std::uint8_t ClipU8(float x, std::uint8_t hi) {
  const std::uint8_t v = LowByteOfInt32(x);
  return v > hi ? hi : v;
}

// gguf-py's np_roundf: round half away from zero, in f32.
inline float NpRoundf(float n) {
  const float a = std::fabs(n);
  const float floored = std::floor(a);
  const float b = floored + std::floor(2.0f * (a - floored));
  const float sign = std::isnan(n) ? n : n > 0 ? 1.0f : n < 0 ? -1.0f : 0.0f;
  return sign * b;
}

// argmax of |x| (the first one; the first NaN wins).
inline int ArgMaxAbs(const float* x, int n) {
  int best = 0;
  float m = std::fabs(x[0]);
  if (std::isnan(m)) return 0;
  for (int j = 1; j < n; ++j) {
    const float a = std::fabs(x[j]);
    if (std::isnan(a)) return j;
    if (a > m) {
      m = a;
      best = j;
    }
  }
  return best;
}

// np.max / np.min / np.max(abs(.)): NaN propagates.
inline float Max(const float* x, int n) {
  float m = x[0];
  for (int j = 1; j < n && !std::isnan(m); ++j) {
    if (std::isnan(x[j]) || x[j] > m) m = x[j];
  }
  return m;
}
inline float Min(const float* x, int n) {
  float m = x[0];
  for (int j = 1; j < n && !std::isnan(m); ++j) {
    if (std::isnan(x[j]) || x[j] < m) m = x[j];
  }
  return m;
}
inline float MaxAbs(const float* x, int n) {
  float m = std::fabs(x[0]);
  for (int j = 1; j < n && !std::isnan(m); ++j) {
    const float a = std::fabs(x[j]);
    if (std::isnan(a) || a > m) m = a;
  }
  return m;
}

// np.where(d == 0, 0, 1 / d).
inline float Inverse(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

inline void PutF16(std::uint8_t* p, float v) {
  const std::uint16_t h = FloatToHalf(v, /*numpy_nan=*/true);
  std::memcpy(p, &h, 2);
}

void F32(const float* in, std::size_t n, std::uint8_t* out) { std::memcpy(out, in, 4 * n); }

void F16s(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t i = 0; i < n; ++i) PutF16(out + 2 * i, in[i]);
}

void BF16s(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t h = FloatToBF16(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

// Q4_0 and Q5_0: d = (the value of largest magnitude) / -2^(bits-1).
template <int Bits>
void SymmetricBlock(const float* x, std::uint8_t* out) {
  constexpr float kDiv = -static_cast<float>(1 << (Bits - 1));
  constexpr float kOffset = static_cast<float>(1 << (Bits - 1)) + 0.5f;
  constexpr std::uint8_t kMax = (1 << Bits) - 1;
  const float d = x[ArgMaxAbs(x, 32)] / kDiv;
  const float id = Inverse(d);
  std::uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = ClipU8(std::trunc(x[j] * id + kOffset), kMax);
  PutF16(out, d);
  std::uint8_t* qs = out + (Bits == 5 ? 6 : 2);
  if constexpr (Bits == 5) {
    std::uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<std::uint32_t>((q[j] >> 4) != 0) << j;
    std::memcpy(out + 2, &qh, 4);
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | (q[j + 16] << 4));
}

// Q4_1 and Q5_1: d = (max - min) / (2^bits - 1), m = min.
template <int Bits>
void AffineBlock(const float* x, std::uint8_t* out) {
  constexpr std::uint8_t kMax = (1 << Bits) - 1;
  const float max = Max(x, 32);
  const float min = Min(x, 32);
  const float d = (max - min) / static_cast<float>(kMax);
  const float id = Inverse(d);
  std::uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = ClipU8(std::trunc((x[j] - min) * id + 0.5f), kMax);
  PutF16(out, d);
  PutF16(out + 2, min);
  std::uint8_t* qs = out + (Bits == 5 ? 8 : 4);
  if constexpr (Bits == 5) {
    std::uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<std::uint32_t>((q[j] >> 4) != 0) << j;
    std::memcpy(out + 4, &qh, 4);
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | (q[j + 16] << 4));
}

template <int Bits, int BlockBytes>
void Symmetric(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < n; ++b) SymmetricBlock<Bits>(in + 32 * b, out + BlockBytes * b);
}
template <int Bits, int BlockBytes>
void Affine(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < n; ++b) AffineBlock<Bits>(in + 32 * b, out + BlockBytes * b);
}

void Q8_0(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < n; ++b, in += 32, out += 34) {
    const float d = MaxAbs(in, 32) / 127.0f;
    const float id = Inverse(d);
    PutF16(out, d);
    for (int j = 0; j < 32; ++j) out[2 + j] = LowByteOfInt32(NpRoundf(in[j] * id));
  }
}

// The ternary digit + 1 of each element, as uint8: round(x / max|x|) + 1.
void Ternary(const float* x, std::uint8_t q[256], float* d) {
  *d = MaxAbs(x, 256);
  const float id = Inverse(*d);
  for (int j = 0; j < 256; ++j) q[j] = static_cast<std::uint8_t>(LowByteOfInt32(NpRoundf(x[j] * id)) + 1);
}

// Five (or four) base-3 digits per byte, scaled so that * 3 >> 8 reads
// them back: (sum * 256 + 242) // 243, in numpy's uint16 arithmetic.
inline std::uint8_t PackBase3(std::uint64_t sum) {
  auto v = static_cast<std::uint16_t>(static_cast<std::uint16_t>(sum) * 256u);
  v = static_cast<std::uint16_t>(v + 242u);
  return static_cast<std::uint8_t>(v / 243u);
}

void TQ1_0(const float* in, std::size_t n, std::uint8_t* out) {
  static constexpr std::uint8_t kPow[5] = {81, 27, 9, 3, 1};
  for (std::size_t b = 0; b < n; ++b, in += 256, out += 54) {
    std::uint8_t q[256];
    float d;
    Ternary(in, q, &d);
    for (int k = 0; k < 32; ++k) {
      std::uint64_t s = 0;
      for (int p = 0; p < 5; ++p) s += static_cast<std::uint8_t>(q[p * 32 + k] * kPow[p]);
      out[k] = PackBase3(s);
    }
    for (int k = 0; k < 16; ++k) {
      std::uint64_t s = 0;
      for (int p = 0; p < 5; ++p) s += static_cast<std::uint8_t>(q[160 + p * 16 + k] * kPow[p]);
      out[32 + k] = PackBase3(s);
    }
    for (int k = 0; k < 4; ++k) {
      std::uint64_t s = 0;
      for (int p = 0; p < 4; ++p) s += static_cast<std::uint8_t>(q[240 + p * 4 + k] * kPow[p]);
      out[48 + k] = PackBase3(s);
    }
    PutF16(out + 52, d);
  }
}

void TQ2_0(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < n; ++b, in += 256, out += 66) {
    std::uint8_t q[256];
    float d;
    Ternary(in, q, &d);
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 32; ++k) {
        std::uint8_t v = 0;
        for (int s = 0; s < 4; ++s) v |= static_cast<std::uint8_t>(q[h * 128 + s * 32 + k] << (2 * s));
        out[h * 32 + k] = v;
      }
    }
    PutF16(out + 64, d);
  }
}

// e = floor(log2(max|x|)) - 2 + 127 as numpy computes it: float32 log2
// (numpy's equals log2 in double rounded to float32 for every positive
// float32, checked exhaustively), then astype(uint8); 0 when max|x| is
// not > 0.
inline std::uint8_t Mxfp4Exponent(float d) {
  if (!(d > 0.0f)) return 0;
  const float l = std::floor(static_cast<float>(std::log2(static_cast<double>(d))));
  return LowByteOfInt32(l - 2.0f + 127.0f);
}

void MXFP4(const float* in, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < n; ++b, in += 32, out += 17) {
    const std::uint8_t e = Mxfp4Exponent(MaxAbs(in, 32));
    const float d = E8M0Half(e);
    std::uint8_t best[32];
    for (int j = 0; j < 32; ++j) {
      // argmin over |d * kvalue - x| (the first minimum; the first NaN wins).
      int arg = 0;
      float m = std::numeric_limits<float>::infinity();
      for (int k = 0; k < 16; ++k) {
        const float err = std::fabs(d * static_cast<float>(kFp4Values[k]) - in[j]);
        if (std::isnan(err)) {
          arg = k;
          break;
        }
        if (k == 0 || err < m) {
          m = err;
          arg = k;
        }
      }
      best[j] = static_cast<std::uint8_t>(arg);
    }
    out[0] = e;
    for (int k = 0; k < 16; ++k) out[1 + k] = static_cast<std::uint8_t>(best[k] | (best[k + 16] << 4));
  }
}

}  // namespace

QuantKernel QuantKernelFor(std::uint32_t code) {
  switch (code) {
    case kF32: return F32;
    case kF16: return F16s;
    case kBF16: return BF16s;
    case kQ4_0: return Symmetric<4, 18>;
    case kQ4_1: return Affine<4, 20>;
    case kQ5_0: return Symmetric<5, 22>;
    case kQ5_1: return Affine<5, 24>;
    case kQ8_0: return Q8_0;
    case kTQ1_0: return TQ1_0;
    case kTQ2_0: return TQ2_0;
    case kMXFP4: return MXFP4;
    default: return nullptr;
  }
}

}  // namespace tensorsafe::gguf::internal
