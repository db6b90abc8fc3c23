// Dequantisation of the IQ types, after gguf-py 0.19.0's gguf/quants.py;
// see quants_internal.h. The lookup grids come from iq_tables.inc
// (scripts/make_gguf_iq_tables.py) and are expanded to floats on first use.
#include <array>
#include <bit>
#include <vector>

#include "formats/gguf/quants_internal.h"

namespace tensorsafe::gguf::internal {
namespace {

#include "formats/gguf/iq_tables.inc"

// A grid of `Rows` rows of `Cols` floats, expanded from its packed indices.
template <std::size_t Rows, std::size_t Cols>
struct Grid {
  std::vector<float> v;
  Grid(const std::uint16_t (&packed)[Rows], const float* map, int bits) : v(Rows * Cols) {
    for (std::size_t r = 0; r < Rows; ++r) {
      for (std::size_t c = 0; c < Cols; ++c) {
        v[r * Cols + c] = map[(packed[r] >> (bits * c)) & ((1u << bits) - 1)];
      }
    }
  }
  const float* Row(std::size_t r) const { return v.data() + r * Cols; }
};

const auto& Iq2XxsGrid() {
  static const Grid<256, 8> g(kIq2XxsGrid, kIq2XxsMap, 2);
  return g;
}
const auto& Iq2XsGrid() {
  static const Grid<512, 8> g(kIq2XsGrid, kIq2XsMap, 2);
  return g;
}
const auto& Iq2SGrid() {
  static const Grid<1024, 8> g(kIq2SGrid, kIq2SMap, 2);
  return g;
}
const auto& Iq3XxsGrid() {
  static const Grid<256, 4> g(kIq3XxsGrid, kIq3XxsMap, 3);
  return g;
}
const auto& Iq3SGrid() {
  static const Grid<512, 4> g(kIq3SGrid, kIq3SMap, 3);
  return g;
}
const auto& Iq1SGrid() {
  static const Grid<2048, 8> g(kIq1SGrid, kIq1SMap, 2);
  return g;
}

// ggml's ksigns_iq2xs: 7 sign bits and an eighth that makes their parity even.
inline std::uint8_t KSigns(std::uint32_t i) { return static_cast<std::uint8_t>(i | ((std::popcount(i) & 1u) << 7)); }

// Bit j of a sign byte: numpy multiplies by np.where(bit == 0, 1, -1).
inline bool Neg(std::uint32_t bits, int j) { return ((bits >> j) & 1u) != 0; }

// (d * (0.5 + s)) * k, the sub-block scale of the IQ2 and IQ3_XXS types.
inline float HalfStepScale(float d, std::uint32_t s, float k) { return d * (0.5f + static_cast<float>(s)) * k; }

// Nibble `i` of a byte string (low nibbles first within each byte pair).
inline std::uint32_t Nibble4(const std::uint8_t* s, int i) { return (s[i / 2] >> (4 * (i % 2))) & 0x0Fu; }

void IQ2_XXS(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq2XxsGrid();
  for (std::size_t b = 0; b < n; ++b, in += 66, out += 256) {
    const float d = F16(in);
    for (int ib = 0; ib < 8; ++ib) {
      const std::uint32_t aux0 = U32(in + 2 + 8 * ib);
      const std::uint32_t aux1 = U32(in + 6 + 8 * ib);
      const float db = HalfStepScale(d, aux1 >> 28, 0.25f);
      for (int l = 0; l < 4; ++l) {
        const float* g = grid.Row((aux0 >> (8 * l)) & 0xFFu);
        const std::uint32_t signs = KSigns((aux1 >> (7 * l)) & 0x7Fu);
        for (int j = 0; j < 8; ++j) out[ib * 32 + l * 8 + j] = TimesSign(db * g[j], Neg(signs, j));
      }
    }
  }
}

void IQ2_XS(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq2XsGrid();
  for (std::size_t b = 0; b < n; ++b, in += 74, out += 256) {
    const float d = F16(in);
    for (int i = 0; i < 16; ++i) {
      const float db = HalfStepScale(d, Nibble4(in + 66, i), 0.25f);
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t q = U16(in + 2 + 2 * (2 * i + h));
        const float* g = grid.Row(q & 511u);
        const std::uint32_t signs = KSigns(q >> 9);
        for (int j = 0; j < 8; ++j) out[i * 16 + h * 8 + j] = TimesSign(db * g[j], Neg(signs, j));
      }
    }
  }
}

void IQ2_S(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq2SGrid();
  for (std::size_t b = 0; b < n; ++b, in += 82, out += 256) {
    const float d = F16(in);
    const std::uint8_t* qs = in + 2;
    const std::uint8_t* signs = in + 34;
    const std::uint8_t* qh = in + 66;
    for (int i = 0; i < 16; ++i) {
      const float db = HalfStepScale(d, Nibble4(in + 74, i), 0.25f);
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * i + h;
        const std::uint32_t idx = qs[k] | (((qh[k / 4] >> (2 * (k % 4))) & 3u) << 8);
        const float* g = grid.Row(idx);
        for (int j = 0; j < 8; ++j) out[i * 16 + h * 8 + j] = TimesSign(db * g[j], Neg(signs[k], j));
      }
    }
  }
}

void IQ3_XXS(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq3XxsGrid();
  for (std::size_t b = 0; b < n; ++b, in += 98, out += 256) {
    const float d = F16(in);
    const std::uint8_t* qs = in + 2;
    for (int ib = 0; ib < 8; ++ib) {
      const std::uint32_t aux = U32(in + 66 + 4 * ib);
      const float db = HalfStepScale(d, aux >> 28, 0.5f);
      for (int l = 0; l < 4; ++l) {
        const std::uint32_t signs = KSigns((aux >> (7 * l)) & 0x7Fu);
        for (int j = 0; j < 8; ++j) {
          const float* g = grid.Row(qs[ib * 8 + l * 2 + j / 4]);
          out[ib * 32 + l * 8 + j] = TimesSign(db * g[j % 4], Neg(signs, j));
        }
      }
    }
  }
}

void IQ3_S(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq3SGrid();
  for (std::size_t b = 0; b < n; ++b, in += 110, out += 256) {
    const float d = F16(in);
    const std::uint8_t* qs = in + 2;
    const std::uint8_t* qh = in + 66;
    const std::uint8_t* signs = in + 74;
    for (int i = 0; i < 8; ++i) {
      const float db = d * static_cast<float>(1 + 2 * Nibble4(in + 106, i));
      for (int l = 0; l < 4; ++l) {
        for (int j = 0; j < 8; ++j) {
          const int k = i * 8 + l * 2 + j / 4;
          const std::uint32_t idx = qs[k] | (((qh[k / 8] >> (k % 8)) & 1u) << 8);
          out[i * 32 + l * 8 + j] = TimesSign(db * grid.Row(idx)[j % 4], Neg(signs[i * 4 + l], j));
        }
      }
    }
  }
}

void IQ1_S(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq1SGrid();
  for (std::size_t b = 0; b < n; ++b, in += 50, out += 256) {
    const float d = F16(in);
    const std::uint8_t* qs = in + 2;
    for (int ib = 0; ib < 8; ++ib) {
      const std::uint32_t q = U16(in + 34 + 2 * ib);
      const float dl = d * static_cast<float>(2 * ((q >> 12) & 7u) + 1);
      const float delta = (q & 0x8000u) == 0 ? 0.125f : -0.125f;
      for (int l = 0; l < 4; ++l) {
        const float* g = grid.Row(qs[ib * 4 + l] | (((q >> (3 * l)) & 7u) << 8));
        for (int j = 0; j < 8; ++j) out[ib * 32 + l * 8 + j] = dl * (g[j] + delta);
      }
    }
  }
}

// The f16 scale is spread over the top nibbles of the four scale words.
void IQ1_M(const std::uint8_t* in, std::size_t n, float* out) {
  const auto& grid = Iq1SGrid();
  for (std::size_t b = 0; b < n; ++b, in += 56, out += 256) {
    const std::uint8_t* qs = in;
    const std::uint8_t* qh = in + 32;
    std::uint32_t sc[4];
    for (int a = 0; a < 4; ++a) sc[a] = U16(in + 48 + 2 * a);
    const auto dbits = static_cast<std::uint16_t>(((sc[0] & 0xF000u) >> 12) | ((sc[1] & 0xF000u) >> 8) |
                                                  ((sc[2] & 0xF000u) >> 4) | (sc[3] & 0xF000u));
    const float d = tensorsafe::internal::HalfToFloat(dbits);
    float dl[16];
    for (int i = 0; i < 16; ++i) dl[i] = d * static_cast<float>(2 * ((sc[i / 4] >> (3 * (i % 4))) & 7u) + 1);
    for (int k = 0; k < 32; ++k) {
      const std::uint32_t qv = qh[k / 2] >> (4 * (k % 2));
      const float* g = grid.Row(qs[k] | ((qv & 7u) << 8));
      const float delta = (qv & 8u) == 0 ? 0.125f : -0.125f;
      for (int j = 0; j < 8; ++j) out[k * 8 + j] = dl[k / 2] * (g[j] + delta);
    }
  }
}

void IQ4_NL(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 18, out += 32) {
    const float d = F16(in);
    for (int k = 0; k < 16; ++k) {
      out[k] = d * static_cast<float>(kIq4Values[in[2 + k] & 0x0F]);
      out[16 + k] = d * static_cast<float>(kIq4Values[in[2 + k] >> 4]);
    }
  }
}

void IQ4_XS(const std::uint8_t* in, std::size_t n, float* out) {
  for (std::size_t b = 0; b < n; ++b, in += 136, out += 256) {
    const float d = F16(in);
    const std::uint32_t sh = U16(in + 2);
    const std::uint8_t* qs = in + 8;
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t lo = Nibble4(in + 4, i);
      const std::uint32_t hi = (sh >> (2 * i)) & 3u;
      const float dl = d * static_cast<float>(static_cast<std::int8_t>(lo | (hi << 4)) - 32);
      for (int k = 0; k < 16; ++k) {
        out[i * 32 + k] = dl * static_cast<float>(kIq4Values[qs[i * 16 + k] & 0x0F]);
        out[i * 32 + 16 + k] = dl * static_cast<float>(kIq4Values[qs[i * 16 + k] >> 4]);
      }
    }
  }
}

}  // namespace

DequantKernel IqDequantKernel(std::uint32_t code) {
  switch (code) {
    case kIQ2_XXS: return IQ2_XXS;
    case kIQ2_XS: return IQ2_XS;
    case kIQ2_S: return IQ2_S;
    case kIQ3_XXS: return IQ3_XXS;
    case kIQ3_S: return IQ3_S;
    case kIQ1_S: return IQ1_S;
    case kIQ1_M: return IQ1_M;
    case kIQ4_NL: return IQ4_NL;
    case kIQ4_XS: return IQ4_XS;
    default: return nullptr;
  }
}

}  // namespace tensorsafe::gguf::internal
