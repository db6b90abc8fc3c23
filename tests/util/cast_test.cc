// The dtype cast kernel (include/tensorsafe/cast.h) against torch 2.13.0's
// Tensor.to() (tests/golden/cast/, README.md there): every f16 and bf16
// value, f32 and f64 specials, ties, double-rounding cases and random bits.
// NaN bits are compared through one canonical pattern (torch's vary with
// its code path); this kernel's own NaN rule is checked separately.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/codec_test_util.h"
#include "support/hex.h"
#include "tensorsafe/cast.h"

namespace tensorsafe::testing {
namespace {

nlohmann::json Vectors() {
  std::ifstream f(std::string(TS_SOURCE_DIR) + "/tests/golden/cast/vectors.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

bool IsNaN(DType d, std::uint32_t bits) {
  switch (d) {
    case DType::kF32: return (bits & 0x7fffffffu) > 0x7f800000u;
    case DType::kF16: return (bits & 0x7fffu) > 0x7c00u;
    default: return (bits & 0x7fffu) > 0x7f80u;
  }
}

void CanonicalNaNs(std::vector<std::byte>& out, DType d) {
  const std::size_t w = ElementSize(d);
  for (std::size_t i = 0; i < out.size(); i += w) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, out.data() + i, w);
    if (!IsNaN(d, bits)) continue;
    bits = d == DType::kF32 ? 0x7FC00000u : d == DType::kF16 ? 0x7E00u : 0x7FC0u;
    std::memcpy(out.data() + i, &bits, w);
  }
}

std::vector<std::byte> CastAll(DType from, std::span<const std::byte> in, DType to, unsigned threads = 1) {
  std::vector<std::byte> out(in.size() / ElementSize(from) * ElementSize(to));
  Status s = Cast(from, in, to, out, threads);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(Cast, EveryHalfAndBFloat16ValueAsTorch) {
  const auto v = Vectors();
  std::vector<std::byte> all(65536 * 2);
  for (std::uint32_t i = 0; i < 65536; ++i) std::memcpy(all.data() + 2 * i, &i, 2);
  for (auto [from, key] : {std::pair{DType::kF16, "all_f16"}, std::pair{DType::kBF16, "all_bf16"}}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      if (to == from) continue;
      SCOPED_TRACE(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)));
      auto out = CastAll(from, all, to, 2);
      CanonicalNaNs(out, to);
      EXPECT_EQ(Fnv1a64(out), v[key][std::string(DTypeName(to)) + "_fnv1a64"].get<std::string>());
    }
  }
}

TEST(Cast, F32AndF64ValuesAsTorch) {
  const auto v = Vectors();
  for (auto [from, key] : {std::pair{DType::kF32, "f32"}, std::pair{DType::kF64, "f64"}}) {
    const auto in = UnhexBytes(v[key]["values"]);
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string name(DTypeName(to));
      if (!v[key].contains(name)) continue;
      SCOPED_TRACE(std::string(key) + " -> " + name);
      auto out = CastAll(from, in, to);
      CanonicalNaNs(out, to);
      const auto want = UnhexBytes(v[key][name]);
      ASSERT_EQ(out.size(), want.size());
      const std::size_t w = ElementSize(to), iw = ElementSize(from);
      int shown = 0;
      for (std::size_t i = 0; i < out.size() / w && shown < 5; ++i) {
        if (std::memcmp(out.data() + i * w, want.data() + i * w, w) != 0) {
          ADD_FAILURE() << "element " << i << " input " << Hex(std::span(in).subspan(i * iw, iw)) << ": got "
                        << Hex(std::span(out).subspan(i * w, w)) << ", torch "
                        << Hex(std::span(want).subspan(i * w, w));
          ++shown;
        }
      }
    }
  }
}

// This kernel's NaN rule (cast.h): the sign and top payload bits kept, the
// quiet bit set; widening keeps every bit.
TEST(Cast, NaNsKeepTheirSignAndTopPayload) {
  auto one = [](DType from, std::uint64_t bits, DType to) {
    std::vector<std::byte> in(ElementSize(from));
    std::memcpy(in.data(), &bits, in.size());
    auto out = CastAll(from, in, to);
    std::uint64_t r = 0;
    std::memcpy(&r, out.data(), out.size());
    return r;
  };
  EXPECT_EQ(one(DType::kF32, 0x7f800001u, DType::kF16), 0x7e00u);
  EXPECT_EQ(one(DType::kF32, 0xff812345u, DType::kF16), 0xfe09u);
  EXPECT_EQ(one(DType::kF32, 0x7f800001u, DType::kBF16), 0x7fc0u);
  EXPECT_EQ(one(DType::kF32, 0xffa12345u, DType::kBF16), 0xffe1u);
  EXPECT_EQ(one(DType::kF16, 0x7c01u, DType::kF32), 0x7f802000u);  // signalling, kept exactly
  EXPECT_EQ(one(DType::kBF16, 0xff81u, DType::kF32), 0xff810000u);
  EXPECT_EQ(one(DType::kF16, 0xfc01u, DType::kBF16), 0xffc0u);
  EXPECT_EQ(one(DType::kF64, 0x7ff0000000000001ull, DType::kF32), 0x7fc00000u);
}

TEST(Cast, ChecksDTypesAndSizes) {
  std::vector<std::byte> in(12), out(6);
  EXPECT_TRUE(Cast(DType::kF32, in, DType::kF16, out).ok());
  EXPECT_STATUS(Cast(DType::kF32, std::span(in).first(10), DType::kF16, out), StatusCode::kInvalidArgument,
                "10 bytes are not a whole number of f32 elements");
  EXPECT_STATUS(Cast(DType::kF32, in, DType::kF16, std::span(out).first(4)), StatusCode::kInvalidArgument,
                "casting 3 f32 elements needs 6 output bytes, not 4");
  EXPECT_STATUS(Cast(DType::kI32, in, DType::kF16, out), StatusCode::kUnsupported, "cannot cast i32 to f16");
  EXPECT_STATUS(Cast(DType::kF32, in, DType::kF64, out), StatusCode::kUnsupported, "cannot cast f32 to f64");
  EXPECT_FALSE(CanCast(DType::kF8E4M3FN, DType::kF32));
  EXPECT_TRUE(CanCast(DType::kF64, DType::kBF16));
}

TEST(Cast, CastTensorKeepsNameShapeAndMetadata) {
  Tensor t = MakeTensor("w", DType::kF32, {2}, Raw<float>({1.0f, -2.5f}), R"({"a":1})");
  auto c = CastTensor(t, DType::kBF16);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->info.name, "w");
  EXPECT_EQ(c->info.shape, Shape{2});
  EXPECT_EQ(c->info.metadata_json, R"({"a":1})");
  EXPECT_EQ(c->info.data_length, 4u);
  EXPECT_EQ(Str(c->data), Raw<std::uint16_t>({0x3f80, 0xc020}));
  auto same = CastTensor(t, DType::kF32);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->data.data(), t.data.data());
  EXPECT_STATUS(CastTensor(MakeTensor("w", DType::kF32, {3}, Raw<float>({1.0f})), DType::kF16),
                StatusCode::kInvalidArgument, "tensor \"w\"");
  EXPECT_STATUS(CastTensor(MakeTensor("i", DType::kI8, {1}, "x"), DType::kF16), StatusCode::kUnsupported,
                "tensor \"i\": cannot cast i8 to f16");
}

// Large inputs are split across threads: the same bytes as one thread.
TEST(Cast, ThreadsGiveTheSameBytes) {
  std::mt19937_64 rng(TestSeed());
  const std::string in = RandomBytes(rng, (std::size_t{3} << 20) * 4 + 12);
  const auto a = CastAll(DType::kF32, Bytes(in), DType::kBF16, 1);
  const auto b = CastAll(DType::kF32, Bytes(in), DType::kBF16, 4);
  EXPECT_TRUE(a == b);
}

}  // namespace
}  // namespace tensorsafe::testing
