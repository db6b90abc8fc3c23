// Dequantisation of the K-quants (256-element super-blocks), after
// gguf-py 0.19.0's gguf/quants.py; see quants_internal.h.
#include "formats/gguf/quants_internal.h"

namespace tensorsafe::gguf::internal {
namespace {

// 16 groups of 16: d * (scale & 15) * q - dmin * (scale >> 4), q 2 bits.
void Q2_K(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 84, out += 256) {
    const std::uint8_t* scales = in;
    const std::uint8_t* qs = in + 16;
    const float d = F16(in + 80);
    const float dmin = F16(in + 82);
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 4; ++s) {
        for (int half = 0; half < 2; ++half) {
          const int g = h * 8 + s * 2 + half;  // group of 16 = index / 16
          const float dl = d * static_cast<float>(scales[g] & 0x0F);
          const float ml = dmin * static_cast<float>(scales[g] >> 4);
          float* o = out + g * 16;
          const std::uint8_t* q = qs + h * 32 + half * 16;
          for (int k = 0; k < 16; ++k) o[k] = dl * static_cast<float>((q[k] >> (2 * s)) & 3) - ml;
        }
      }
    }
  }
}

// 16 signed 6-bit scales: low nibbles in bytes 0..7, high pairs in 8..11.
void Q3_K(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 110, out += 256) {
    const std::uint8_t* hmask = in;
    const std::uint8_t* qs = in + 32;
    const std::uint8_t* sc = in + 96;
    const float d = F16(in + 108);
    float dl[16];
    for (int i = 0; i < 16; ++i) {
      const int low = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
      const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
      dl[i] = d * static_cast<float>(static_cast<std::int8_t>(low | (high << 4)) - 32);
    }
    for (int idx = 0; idx < 256; ++idx) {
      const int h = idx / 128, s = (idx / 32) % 4, k = idx % 32;
      const int low = (qs[h * 32 + k] >> (2 * s)) & 3;
      const int mask = (hmask[k] >> (idx / 32)) & 1;  // the offset is 4 when the bit is clear
      out[idx] = dl[idx / 16] * static_cast<float>(low - ((mask ^ 1) << 2));
    }
  }
}

// The 8 scales and 8 mins of Q4_K and Q5_K, 6 bits each in 12 bytes.
inline void ScaleMin(const std::uint8_t* s, int sc[8], int mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
  }
}

// 8 groups of 32: (d * scale) * q - (dmin * min), q a nibble; groups 2c and
// 2c+1 take the low and high nibbles of bytes 32c..32c+31.
void Q4_K(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 144, out += 256) {
    const float d = F16(in);
    const float dmin = F16(in + 2);
    int sc[8], mn[8];
    ScaleMin(in + 4, sc, mn);
    const std::uint8_t* qs = in + 16;
    for (int i = 0; i < 8; ++i) {
      const float dl = d * static_cast<float>(sc[i]);
      const float ml = dmin * static_cast<float>(mn[i]);
      const std::uint8_t* q = qs + (i / 2) * 32;
      const int shift = 4 * (i % 2);
      float* o = out + i * 32;
      for (int k = 0; k < 32; ++k) o[k] = dl * static_cast<float>((q[k] >> shift) & 0x0F) - ml;
    }
  }
}

// As Q4_K with a fifth bit per element: bit i of qh[k] for group i.
void Q5_K(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 176, out += 256) {
    const float d = F16(in);
    const float dmin = F16(in + 2);
    int sc[8], mn[8];
    ScaleMin(in + 4, sc, mn);
    const std::uint8_t* qh = in + 16;
    const std::uint8_t* qs = in + 48;
    for (int i = 0; i < 8; ++i) {
      const float dl = d * static_cast<float>(sc[i]);
      const float ml = dmin * static_cast<float>(mn[i]);
      const std::uint8_t* q = qs + (i / 2) * 32;
      const int shift = 4 * (i % 2);
      float* o = out + i * 32;
      for (int k = 0; k < 32; ++k) {
        const int v = ((q[k] >> shift) & 0x0F) | (((qh[k] >> i) & 1) << 4);
        o[k] = dl * static_cast<float>(v) - ml;
      }
    }
  }
}

// 16 groups of 16 with int8 scales; q = 4 low bits | 2 high bits, minus 32.
void Q6_K(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 210, out += 256) {
    const std::uint8_t* ql = in;
    const std::uint8_t* qh = in + 128;
    const std::uint8_t* sc = in + 192;
    const float d = F16(in + 208);
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 128; ++t) {
        const int low = (ql[h * 64 + t % 64] >> (4 * (t / 64))) & 0x0F;
        const int high = (qh[h * 32 + t % 32] >> (2 * (t / 32))) & 3;
        const int idx = h * 128 + t;
        const float dl = d * static_cast<float>(static_cast<std::int8_t>(sc[idx / 16]));
        out[idx] = dl * static_cast<float>(static_cast<std::int8_t>(low | (high << 4)) - 32);
      }
    }
  }
}

}  // namespace

DequantKernel KDequantKernel(std::uint32_t code) {
  switch (code) {
    case kQ2_K: return Q2_K;
    case kQ3_K: return Q3_K;
    case kQ4_K: return Q4_K;
    case kQ5_K: return Q5_K;
    case kQ6_K: return Q6_K;
    default: return nullptr;
  }
}

}  // namespace tensorsafe::gguf::internal
