// Dequantisation of the plain ggml types and the small-block types, after
// gguf-py 0.19.0's gguf/quants.py (see quants_internal.h for the rule that
// every f32 operation is the one numpy performs, in its order).
#include <cmath>

#include "formats/gguf/quants_internal.h"

namespace tensorsafe::gguf::internal {
namespace {

using tensorsafe::internal::BF16ToFloat;
using tensorsafe::internal::F32FromBits;

void F32(const std::uint8_t* in, std::size_t n, float* out) { std::memcpy(out, in, 4 * n); }

// astype(float32) of float16: exact, NaN bits included.
void F16s(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = F16(in + 2 * i);
}

void BF16s(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = BF16ToFloat(U16(in + 2 * i));
}

// d * (nibble - 8); low nibbles are elements 0..15, high nibbles 16..31.
void Q4_0(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 18, out += 32) {
    const float d = F16(in);
    const std::uint8_t* qs = in + 2;
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      out[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

// (d * nibble) + m.
void Q4_1(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 20, out += 32) {
    const float d = F16(in);
    const float m = F16(in + 2);
    const std::uint8_t* qs = in + 4;
    for (int j = 0; j < 16; ++j) {
      out[j] = AddLikeNumpy(d * static_cast<float>(qs[j] & 0x0F), m);
      out[j + 16] = AddLikeNumpy(d * static_cast<float>(qs[j] >> 4), m);
    }
  }
}

// The 5-bit value of element j: its nibble and bit j of qh.
inline int Q5(const std::uint8_t* qs, std::uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void Q5_0(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 22, out += 32) {
    const float d = F16(in);
    const std::uint32_t qh = U32(in + 2);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(Q5(in + 6, qh, j) - 16);
  }
}

void Q5_1(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 24, out += 32) {
    const float d = F16(in);
    const float m = F16(in + 2);
    const std::uint32_t qh = U32(in + 4);
    for (int j = 0; j < 32; ++j) out[j] = AddLikeNumpy(d * static_cast<float>(Q5(in + 8, qh, j)), m);
  }
}

void Q8_0(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 34, out += 32) {
    const float d = F16(in);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(in[2 + j])) * d;
  }
}

// Base-3 digits: byte * 3^k (mod 256), then * 3 >> 8 gives digit k.
void TQ1_0(const std::uint8_t* in, std::size_t n, float* out) {
  static constexpr std::uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  for (std::size_t b = 0; b < n; ++b, in += 54, out += 256) {
    const std::uint8_t* qs = in;
    const std::uint8_t* qh = in + 48;
    const float d = F16(in + 52);
    auto digit = [](std::uint8_t byte, std::uint8_t pow) {
      const auto v = static_cast<std::uint8_t>(byte * pow);
      return static_cast<float>(((v * 3) >> 8) - 1);
    };
    for (int p = 0; p < 5; ++p) {
      for (int k = 0; k < 32; ++k) out[p * 32 + k] = d * digit(qs[k], kPow3[p]);
      for (int k = 0; k < 16; ++k) out[160 + p * 16 + k] = d * digit(qs[32 + k], kPow3[p]);
    }
    for (int p = 0; p < 4; ++p) {
      for (int k = 0; k < 4; ++k) out[240 + p * 4 + k] = d * digit(qh[k], kPow3[p]);
    }
  }
}

void TQ2_0(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 66, out += 256) {
    const float d = F16(in + 64);
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 4; ++s) {
        for (int k = 0; k < 32; ++k) {
          out[h * 128 + s * 32 + k] = d * static_cast<float>(((in[h * 32 + k] >> (2 * s)) & 3) - 1);
        }
      }
    }
  }
}

void MXFP4(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 17, out += 32) {
    const float d = E8M0Half(in[0]);
    for (int k = 0; k < 16; ++k) {
      out[k] = d * static_cast<float>(kFp4Values[in[1 + k] & 0x0F]);
      out[16 + k] = d * static_cast<float>(kFp4Values[in[1 + k] >> 4]);
    }
  }
}

// gguf-py's ue4m3_to_fp32: unsigned e4m3 (bias 7), halved; 0x00 and 0x7F
// are 0. Every value is exact in f32, so computing it another way is safe.
float UE4M3Half(std::uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0x0F;
  const int m = x & 7;
  const float raw = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return raw * 0.5f;
}

// 4 sub-blocks of 16: a scale byte each, then 8 bytes of nibbles each (low
// nibbles are elements 0..7, high ones 8..15).
void NVFP4(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 36, out += 64) {
    for (int j = 0; j < 4; ++j) {
      const float d = UE4M3Half(in[j]);
      const std::uint8_t* qs = in + 4 + 8 * j;
      for (int t = 0; t < 8; ++t) {
        out[16 * j + t] = d * static_cast<float>(kFp4Values[qs[t] & 0x0F]);
        out[16 * j + 8 + t] = d * static_cast<float>(kFp4Values[qs[t] >> 4]);
      }
    }
  }
}

}  // namespace

DequantKernel BasicDequantKernel(std::uint32_t code) {
  switch (code) {
    case kF32: return F32;
    case kF16: return F16s;
    case kBF16: return BF16s;
    case kQ4_0: return Q4_0;
    case kQ4_1: return Q4_1;
    case kQ5_0: return Q5_0;
    case kQ5_1: return Q5_1;
    case kQ8_0: return Q8_0;
    case kTQ1_0: return TQ1_0;
    case kTQ2_0: return TQ2_0;
    case kMXFP4: return MXFP4;
    case kNVFP4: return NVFP4;
    default: return nullptr;
  }
}

}  // namespace tensorsafe::gguf::internal
