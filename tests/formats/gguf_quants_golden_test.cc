// The GGUF block codecs against vectors made by gguf-py 0.19.0 and torch
// (tests/golden/gguf/quants/, README.md there): dequantisation of random
// and extreme blocks of every type to f32 (bit for bit, NaN payloads
// included), f16 and bf16 (torch's rounding of those values), and
// quantisation of normal, wide-range, special and constant values.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/codec_test_util.h"
#include "support/hex.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::testing {
namespace {

nlohmann::json Vectors() {
  std::ifstream f(std::string(TS_SOURCE_DIR) + "/tests/golden/gguf/quants/vectors.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// NaNs as one pattern, as make_vectors.py writes torch's (whose NaN bits
// depend on its code path).
void CanonicalNaNs(std::vector<std::byte>& out, DType dtype) {
  for (std::size_t i = 0; i + 1 < out.size(); i += 2) {
    std::uint16_t h;
    std::memcpy(&h, out.data() + i, 2);
    const bool nan =
        dtype == DType::kF16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    if (nan) h = dtype == DType::kF16 ? 0x7E00 : 0x7FC0;
    std::memcpy(out.data() + i, &h, 2);
  }
}

TEST(GgufQuantsGolden, DequantizeEveryTypeAsGgufPy) {
  const auto v = Vectors();
  ASSERT_EQ(v["dequantize"].size(), 26u);
  for (const auto& c : v["dequantize"]) {
    const std::string name = c["type"];
    SCOPED_TRACE(name);
    auto type = gguf::FindGgmlType(name);
    ASSERT_TRUE(type);
    EXPECT_TRUE(gguf::CanDequantize(*type));
    const std::string blocks = Unhex(c["blocks"]);
    const std::size_t n = c["elements"];
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string(DTypeName(dt)));
      for (unsigned threads : {1u, 3u}) {
        std::vector<std::byte> out(n * ElementSize(dt));
        ASSERT_TRUE(gguf::Dequantize(*type, Bytes(blocks), dt, out, {.threads = threads}).ok());
        if (dt == DType::kF32) {
          for (std::size_t i = 0; i < 8; ++i) {
            std::uint32_t bits;
            std::memcpy(&bits, out.data() + 4 * i, 4);
            char got[9];
            std::snprintf(got, sizeof got, "%08x", bits);
            EXPECT_EQ(got, c["first_f32_bits"][i].get<std::string>()) << "element " << i;
          }
          EXPECT_EQ(Fnv1a64(out), c["f32_fnv1a64"].get<std::string>());
        } else {
          CanonicalNaNs(out, dt);
          EXPECT_EQ(Fnv1a64(out), c[std::string(DTypeName(dt)) + "_fnv1a64"].get<std::string>());
        }
      }
    }
  }
}

TEST(GgufQuantsGolden, QuantizeAsGgufPy) {
  const auto v = Vectors();
  std::set<std::string> types;
  for (const auto& c : v["quantize"]) {
    const std::string name = c["type"];
    SCOPED_TRACE(name + " " + c["case"].get<std::string>());
    types.insert(name);
    auto type = gguf::FindGgmlType(name);
    ASSERT_TRUE(type);
    ASSERT_TRUE(gguf::CanQuantize(*type));
    const std::string raw = Unhex(c["values"]);
    std::vector<float> values(raw.size() / 4);
    std::memcpy(values.data(), raw.data(), raw.size());
    const std::string want = Unhex(c["bytes"]);
    std::vector<std::byte> out(want.size());
    ASSERT_TRUE(gguf::Quantize(*type, values, out).ok());
    EXPECT_EQ(Hex(out), c["bytes"].get<std::string>());
  }
  EXPECT_EQ(types,
            (std::set<std::string>{"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"}));
}

// Quantise then dequantise: the values gguf-py's pair gives, checked on
// their invariants (the golden vectors check the bytes).
TEST(GgufQuantsGolden, QuantizedValuesDequantizeCloseToTheInput) {
  std::mt19937_64 rng(TestSeed());
  std::normal_distribution<float> normal;
  for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}) {
    SCOPED_TRACE(name);
    auto type = *gguf::FindGgmlType(name);
    std::vector<float> x(32 * 64);
    for (float& f : x) f = normal(rng);
    std::vector<std::byte> q(64 * type.block_bytes);
    ASSERT_TRUE(gguf::Quantize(type, x, q).ok());
    std::vector<std::byte> back(x.size() * 4);
    ASSERT_TRUE(gguf::Dequantize(type, q, DType::kF32, back).ok());
    const float* y = reinterpret_cast<const float*>(back.data());
    double err = 0;
    for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(x[i] - y[i])));
    EXPECT_LT(err, std::string(name) == "Q8_0" ? 0.05 : 1.0);
  }
}

}  // namespace
}  // namespace tensorsafe::testing
