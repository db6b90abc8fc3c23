// Model-based random round trips: a random model (key/values of every type
// incl. nested arrays, NaN payloads and non-UTF-8 strings; plain tensors of
// rank 0-4; a random alignment) is written to GGUF bytes by the test's own
// builder and to the expected JSON by the test's own mapping. Decode must
// match the model and Encode must give back the very same bytes.
// The seed is printed; rerun one with TS_SEED=<seed>.
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>

#include "formats/gguf_builder.h"
#include "formats/gguf_test_util.h"
#include "tensorsafe/formats/gguf.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using testing::GgufBuilder;
using testing::Json;

constexpr const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                  "bool",  "string", "array",  "uint64", "int64",  "float64"};
constexpr int kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

std::string Hex(std::uint64_t v, int digits) {
  std::string s;
  for (int i = digits - 1; i >= 0; --i) s += "0123456789abcdef"[(v >> (4 * i)) & 15];
  return s;
}

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t U(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }
  std::uint64_t Bits() { return rng_(); }

  // Writes a value of type t (payload only) to b; returns its JSON and sets
  // *desc to its type descriptor.
  Json Value(int t, int depth, GgufBuilder& b, Json* desc) {
    if (t == 9) return Array(depth, b, desc);
    *desc = kNames[t];
    if (t == 8) {
      std::string s;
      const char* alphabet[] = {"a",    "Z",    " ",    "\"", "\\", "\n", "\x01", "\xc3\xa9", "\xe2\x98\x83",
                                "\xff", "\xc3", "\x7f", "."};
      for (std::uint64_t i = U(6); i > 0; --i) s += alphabet[U(std::size(alphabet))];
      b.Str(s);
      if (internal::IsValidUtf8(s)) return s;
      std::string h;
      for (unsigned char c : s) h += Hex(c, 2);
      return Json{{"hex", h}};
    }
    if (t == 7) {
      const bool v = U(2);
      b.U8(v);
      return v;
    }
    std::uint64_t bits = Special(t);
    switch (kSizes[t]) {
      case 1: b.U8(static_cast<std::uint8_t>(bits)); break;
      case 2: b.U16(static_cast<std::uint16_t>(bits)); break;
      case 4: b.U32(static_cast<std::uint32_t>(bits)); break;
      default: b.U64(bits); break;
    }
    switch (t) {
      case 0: return static_cast<std::uint8_t>(bits);
      case 1: return static_cast<std::int8_t>(bits);
      case 2: return static_cast<std::uint16_t>(bits);
      case 3: return static_cast<std::int16_t>(bits);
      case 4: return static_cast<std::uint32_t>(bits);
      case 5: return static_cast<std::int32_t>(bits);
      case 10: return bits;
      case 11: return static_cast<std::int64_t>(bits);
      case 6: {
        const auto u = static_cast<std::uint32_t>(bits);
        const float f = std::bit_cast<float>(u);
        if (std::isnan(f)) return u == 0x7fc00000u ? Json("nan") : Json("nan:0x" + Hex(u, 8));
        if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
        return static_cast<double>(f);
      }
      default: {  // 12
        const double d = std::bit_cast<double>(bits);
        if (std::isnan(d)) return bits == 0x7ff8000000000000ull ? Json("nan") : Json("nan:0x" + Hex(bits, 16));
        if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
        return d;
      }
    }
  }

 private:
  // Mostly random bits, often an edge value.
  std::uint64_t Special(int t) {
    const std::uint64_t edges4[] = {0,           0x80000000u, 0x7fc00000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00001u, 1,           0x7f7fffffu, 0xffffffffu};
    const std::uint64_t edges8[] = {0, 1ull << 63, 0x7ff8000000000000ull, 0x7ff0000000000000ull, 0xfff8000000000001ull,
                                    1, ~0ull,      0x7fffffffffffffffull};
    if (U(3) != 0) return Bits();
    return kSizes[t] == 8 ? edges8[U(std::size(edges8))] : edges4[U(std::size(edges4))];
  }

  Json Array(int depth, GgufBuilder& b, Json* desc) {
    int et = static_cast<int>(U(13));
    if (et == 9 && depth >= 3) et = 8;
    const std::uint64_t n = U(5);
    b.U32(et);
    b.U64(n);
    Json v = Json::array();
    Json descs = Json::array();
    for (std::uint64_t i = 0; i < n; ++i) {
      Json d;
      v.push_back(Value(et, depth + 1, b, &d));
      descs.push_back(d);
    }
    if (et != 9) {
      *desc = std::string("array<") + kNames[et] + ">";
    } else if (n == 0) {
      *desc = "array<array>";
    } else {
      bool same = descs[0].is_string();
      for (const Json& d : descs) same = same && d == descs[0];
      if (same) {
        *desc = "array<" + descs[0].get<std::string>() + ">";
      } else {
        *desc = Json::array({"array"});
        for (const Json& d : descs) desc->push_back(d);
      }
    }
    return v;
  }

  std::mt19937_64 rng_;
};

struct Model {
  std::string bytes;
  Json metadata;  // "" or the expected object
  struct T {
    std::string name;
    DType dtype;
    Shape shape;
    std::string data;
  };
  std::vector<T> tensors;
};

Model MakeModel(Gen& g) {
  Model m;
  GgufBuilder kv;
  Json values = Json::object();
  Json types = Json::object();
  const std::uint64_t n_kv = g.U(8);
  const std::uint32_t aligns[] = {0, 0, 1, 2, 8, 16, 64, 256};  // 0: no key, default 32
  const std::uint32_t align_choice = aligns[g.U(std::size(aligns))];
  const std::uint64_t align_at = align_choice ? g.U(n_kv + 1) : UINT64_MAX;
  std::uint64_t count = 0;
  for (std::uint64_t i = 0; i <= n_kv; ++i) {
    if (i == align_at) {
      kv.Key("general.alignment", 4).U32(align_choice);
      values["general.alignment"] = align_choice;
      types["general.alignment"] = "uint32";
      ++count;
    }
    if (i == n_kv) break;
    const std::string key = "k" + std::to_string(i) + (g.U(2) ? ".\xc3\xa9" : "");
    const int t = static_cast<int>(g.U(13));
    kv.Key(key, t);
    Json d;
    values[key] = g.Value(t, 0, kv, &d);
    types[key] = d;
    ++count;
  }
  if (count > 0) {
    m.metadata = values;
    m.metadata["tensorsafe.gguf_types"] = types;
  } else {
    m.metadata = "";
  }
  const std::uint64_t align = align_choice ? align_choice : 32;
  const std::pair<DType, std::uint32_t> plain[] = {{DType::kF32, 0},  {DType::kF16, 1},  {DType::kI8, 24},
                                                   {DType::kI16, 25}, {DType::kI32, 26}, {DType::kI64, 27},
                                                   {DType::kF64, 28}, {DType::kBF16, 30}};
  GgufBuilder head;
  const std::uint64_t n_t = g.U(6);
  head.Header(n_t, count).Bytes(kv.str());
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < n_t; ++i) {
    Model::T t;
    t.name = "t" + std::to_string(i) + std::string(g.U(40), 'x');
    const auto [dtype, code] = plain[g.U(std::size(plain))];
    t.dtype = dtype;
    for (std::uint64_t r = g.U(5); r > 0; --r) t.shape.push_back(g.U(4));
    std::uint64_t n = ElementSize(dtype);
    for (auto d : t.shape) n *= d;
    for (std::uint64_t k = 0; k < n; ++k) t.data.push_back(static_cast<char>(g.Bits()));
    head.Info(t.name, std::vector<std::uint64_t>(t.shape.rbegin(), t.shape.rend()), code, offset);
    offset += (t.data.size() + align - 1) / align * align;
    m.tensors.push_back(std::move(t));
  }
  head.PadTo(align);
  for (const auto& t : m.tensors) head.Bytes(t.data).PadTo(align);
  m.bytes = head.str();
  return m;
}

TEST(GgufRandom, RoundTripsMatchTheModel) {
  std::uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("TS_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::cout << "GgufRandom seed: " << seed << " (rerun with TS_SEED=" << seed << ")\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  Gen g(seed);
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " iteration " + std::to_string(iter));
    const Model m = MakeModel(g);
    auto set = gguf::Decode(std::as_bytes(std::span(m.bytes)), nullptr, "random.gguf");
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_TRUE(testing::SameMetadata(m.metadata, set->metadata_json));
    ASSERT_EQ(set->tensors.size(), m.tensors.size());
    for (std::size_t i = 0; i < m.tensors.size(); ++i) {
      const Tensor& t = set->tensors[i];
      EXPECT_EQ(t.info.name, m.tensors[i].name);
      EXPECT_EQ(t.info.dtype, m.tensors[i].dtype);
      EXPECT_EQ(t.info.shape, m.tensors[i].shape);
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size()), m.tensors[i].data);
    }
    auto bytes = gguf::Encode(*set);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    ASSERT_EQ(*bytes, m.bytes);
  }
}

// 0x15ae43fd is the one positive float whose shortest text (7.038531e-26)
// read as a double and then rounded to float gives a different float; the
// reader must write a text that survives that path (found by a search over
// all floats).
TEST(GgufMetadata, Float32TextSurvivesDoubleRounding) {
  for (std::uint32_t bits : {0x15ae43fdu, 0x95ae43fdu}) {
    GgufBuilder b;
    b.Header(0, 1).Key("f", 6).U32(bits).PadTo(32);
    auto set = gguf::Decode(std::as_bytes(std::span(b.str())), nullptr, "f.gguf");
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    const double d = Json::parse(set->metadata_json)["f"].get<double>();
    EXPECT_EQ(std::bit_cast<std::uint32_t>(static_cast<float>(d)), bits) << set->metadata_json;
    auto again = gguf::Encode(*set);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, b.str());
  }
}

}  // namespace
}  // namespace tensorsafe
