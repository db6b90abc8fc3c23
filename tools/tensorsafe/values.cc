#include "values.h"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace tensorsafe::cli {
namespace {

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // data is little-endian; so are our hosts
  return v;
}

constexpr std::uint64_t kSummaryThreshold = 1000;  // numpy's default
constexpr std::uint64_t kEdgeItems = 3;

// Generic sign/exponent/mantissa decoding without special values.
double Decode(std::uint32_t bits, int ebits, int mbits, int bias) {
  const bool neg = (bits >> (ebits + mbits)) & 1;
  const int e = static_cast<int>((bits >> mbits) & ((1u << ebits) - 1));
  const std::uint32_t m = bits & ((1u << mbits) - 1);
  const double v =
      e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp(static_cast<double>(m + (1u << mbits)), e - bias - mbits);
  return neg ? -v : v;
}

// Element `i` of a packed sub-byte type (FORMAT.md §5): f4/i4/u4 element 2k
// is the low nibble of byte k; each 3-byte f6 group is a 24-bit little-endian
// integer whose bits 6j..6j+5 hold element 4k+j.
std::uint32_t PackedBits(DType dtype, std::span<const std::byte> data, std::uint64_t i) {
  if (dtype == DType::kF6E2M3 || dtype == DType::kF6E3M2) {
    const std::byte* b = data.data() + (i / 4) * 3;
    const std::uint32_t group = static_cast<std::uint32_t>(b[0]) | static_cast<std::uint32_t>(b[1]) << 8 |
                                static_cast<std::uint32_t>(b[2]) << 16;
    return (group >> (6 * (i % 4))) & 0x3f;
  }
  const std::uint32_t byte = static_cast<std::uint8_t>(data[i / 2]);
  return (i % 2 == 0) ? (byte & 0xf) : (byte >> 4);
}

int SignedNibble(std::uint32_t nib) { return static_cast<int>(nib) - (nib & 8 ? 16 : 0); }

}  // namespace

float HalfToFloat(std::uint16_t h) {
  const std::uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const bool neg = h >> 15;
  float v;
  if (e == 31) {
    v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = static_cast<float>(Decode(h & 0x7fff, 5, 10, 15));
  }
  return neg ? -v : v;
}

float BFloat16ToFloat(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); }

double MiniFloatToDouble(DType dtype, std::uint32_t bits) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  switch (dtype) {
    case DType::kF8E4M3FN:  // no infinities; S.1111.111 is NaN
      return (bits & 0x7f) == 0x7f ? kNaN : Decode(bits, 4, 3, 7);
    case DType::kF8E5M2:  // IEEE-like: exponent 31 is inf/NaN
      if (((bits >> 2) & 0x1f) == 0x1f) {
        return (bits & 3) ? kNaN : ((bits & 0x80) ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
      }
      return Decode(bits, 5, 2, 15);
    case DType::kF8E4M3FNUZ:  // the negative-zero pattern is the only NaN
      return bits == 0x80 ? kNaN : Decode(bits, 4, 3, 8);
    case DType::kF8E5M2FNUZ: return bits == 0x80 ? kNaN : Decode(bits, 5, 2, 16);
    case DType::kF8E8M0:  // exponent only, unsigned; 0xff is NaN
      return bits == 0xff ? kNaN : std::ldexp(1.0, static_cast<int>(bits) - 127);
    case DType::kF6E2M3: return Decode(bits, 2, 3, 1);
    case DType::kF6E3M2: return Decode(bits, 3, 2, 3);
    case DType::kF4E2M1: return Decode(bits, 2, 1, 1);
    default: return kNaN;
  }
}

std::string FormatElement(DType dtype, std::span<const std::byte> data, std::uint64_t i) {
  const std::uint32_t size = ElementSize(dtype);
  const std::byte* p = data.data() + i * size;
  switch (dtype) {
    case DType::kBool: return *p != std::byte{0} ? "True" : "False";
    case DType::kU8: return fmt::format("{}", Load<std::uint8_t>(p));
    case DType::kU16: return fmt::format("{}", Load<std::uint16_t>(p));
    case DType::kU32: return fmt::format("{}", Load<std::uint32_t>(p));
    case DType::kU64: return fmt::format("{}", Load<std::uint64_t>(p));
    case DType::kI8: return fmt::format("{}", Load<std::int8_t>(p));
    case DType::kI16: return fmt::format("{}", Load<std::int16_t>(p));
    case DType::kI32: return fmt::format("{}", Load<std::int32_t>(p));
    case DType::kI64: return fmt::format("{}", Load<std::int64_t>(p));
    case DType::kF16: return fmt::format("{}", HalfToFloat(Load<std::uint16_t>(p)));
    case DType::kBF16: return fmt::format("{}", BFloat16ToFloat(Load<std::uint16_t>(p)));
    case DType::kF32: return fmt::format("{}", Load<float>(p));
    case DType::kF64: return fmt::format("{}", Load<double>(p));
    case DType::kC64: return fmt::format("({}{:+}j)", Load<float>(p), Load<float>(p + 4));
    case DType::kC128: return fmt::format("({}{:+}j)", Load<double>(p), Load<double>(p + 8));
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0: return fmt::format("{}", MiniFloatToDouble(dtype, static_cast<std::uint8_t>(*p)));
    case DType::kU4: return fmt::format("{}", PackedBits(dtype, data, i));
    case DType::kI4: return fmt::format("{}", SignedNibble(PackedBits(dtype, data, i)));
    case DType::kF4E2M1:
    case DType::kF6E2M3:
    case DType::kF6E3M2: return fmt::format("{}", MiniFloatToDouble(dtype, PackedBits(dtype, data, i)));
  }
  return "?";
}

namespace {

struct Printer {
  DType dtype;
  const Shape& shape;
  std::span<const std::byte> data;
  bool summarize;
  std::vector<std::uint64_t> stride;  // in elements
  std::size_t width = 0;

  // The indices shown along an axis; UINT64_MAX marks the "..." gap.
  std::vector<std::uint64_t> Shown(std::uint64_t n) const {
    std::vector<std::uint64_t> v;
    if (summarize && n > 2 * kEdgeItems) {
      for (std::uint64_t i = 0; i < kEdgeItems; ++i) v.push_back(i);
      v.push_back(UINT64_MAX);
      for (std::uint64_t i = n - kEdgeItems; i < n; ++i) v.push_back(i);
    } else {
      for (std::uint64_t i = 0; i < n; ++i) v.push_back(i);
    }
    return v;
  }

  void Widths(std::size_t dim, std::uint64_t base) {
    if (dim == shape.size()) {
      width = std::max(width, FormatElement(dtype, data, base).size());
      return;
    }
    for (std::uint64_t i : Shown(shape[dim])) {
      if (i != UINT64_MAX) Widths(dim + 1, base + i * stride[dim]);
    }
  }

  void Print(std::size_t dim, std::uint64_t base, std::string& out) {
    if (dim == shape.size()) {
      out += fmt::format("{:>{}}", FormatElement(dtype, data, base), width);
      return;
    }
    out += '[';
    const auto shown = Shown(shape[dim]);
    const std::string indent(dim + 1, ' ');
    const std::string between =
        dim + 1 == shape.size() ? ", " : ",\n" + std::string(shape.size() - dim - 2, '\n') + indent;
    for (std::size_t k = 0; k < shown.size(); ++k) {
      if (k) out += between;
      if (shown[k] == UINT64_MAX) {
        out += "...";
      } else {
        Print(dim + 1, base + shown[k] * stride[dim], out);
      }
    }
    out += ']';
  }
};

}  // namespace

std::string FormatTensor(DType dtype, const Shape& shape, std::span<const std::byte> data, bool all) {
  std::uint64_t count = 1;
  for (auto d : shape) count *= d;
  Printer p{dtype, shape, data, !all && count > kSummaryThreshold, std::vector<std::uint64_t>(shape.size())};
  std::uint64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    p.stride[i] = s;
    s *= shape[i];
  }
  if (count == 0) return "[]";
  p.Widths(0, 0);
  std::string out;
  p.Print(0, 0, out);
  return out;
}

namespace {
nlohmann::json Real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::json Nested(DType dtype, const Shape& shape, std::span<const std::byte> data, std::size_t dim,
                      std::uint64_t base, std::uint64_t stride) {
  if (dim == shape.size()) return ElementJson(dtype, data, base);
  nlohmann::json a = nlohmann::json::array();
  const std::uint64_t inner = stride / std::max<std::uint64_t>(shape[dim], 1);
  for (std::uint64_t i = 0; i < shape[dim]; ++i)
    a.push_back(Nested(dtype, shape, data, dim + 1, base + i * inner, inner));
  return a;
}
}  // namespace

nlohmann::json ElementJson(DType dtype, std::span<const std::byte> data, std::uint64_t i) {
  const std::byte* p = data.data() + i * ElementSize(dtype);
  switch (dtype) {
    case DType::kBool: return *p != std::byte{0};
    case DType::kU8: return Load<std::uint8_t>(p);
    case DType::kU16: return Load<std::uint16_t>(p);
    case DType::kU32: return Load<std::uint32_t>(p);
    case DType::kU64: return Load<std::uint64_t>(p);
    case DType::kI8: return Load<std::int8_t>(p);
    case DType::kI16: return Load<std::int16_t>(p);
    case DType::kI32: return Load<std::int32_t>(p);
    case DType::kI64: return Load<std::int64_t>(p);
    case DType::kF16: return Real(HalfToFloat(Load<std::uint16_t>(p)));
    case DType::kBF16: return Real(BFloat16ToFloat(Load<std::uint16_t>(p)));
    case DType::kF32: return Real(Load<float>(p));
    case DType::kF64: return Real(Load<double>(p));
    case DType::kC64: return nlohmann::json::array({Real(Load<float>(p)), Real(Load<float>(p + 4))});
    case DType::kC128: return nlohmann::json::array({Real(Load<double>(p)), Real(Load<double>(p + 8))});
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0: return Real(MiniFloatToDouble(dtype, static_cast<std::uint8_t>(*p)));
    case DType::kU4: return PackedBits(dtype, data, i);
    case DType::kI4: return SignedNibble(PackedBits(dtype, data, i));
    case DType::kF4E2M1:
    case DType::kF6E2M3:
    case DType::kF6E3M2: return Real(MiniFloatToDouble(dtype, PackedBits(dtype, data, i)));
  }
  return nullptr;
}

nlohmann::json TensorJson(DType dtype, const Shape& shape, std::span<const std::byte> data) {
  std::uint64_t count = 1;
  for (auto d : shape) count *= d;
  return Nested(dtype, shape, data, 0, 0, count);
}

}  // namespace tensorsafe::cli
