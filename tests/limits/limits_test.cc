// One test per resource limit (docs/SECURITY.md, "Limits"): a file that
// exceeds the limit gets kLimitExceeded (or the documented code), and no
// single allocation larger than the input justifies happens first. Hostile
// claims (a 4 GiB header, 2^40 elements, 2^60 records) in inputs of a few
// hundred bytes must fail with nothing larger than kSmall allocated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/gguf_builder.h"
#include "limits/alloc_probe.h"
#include "support/temp_dir.h"
#include "support/tsafe_files.h"
#include "support/tsafe_image.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "util/endian.h"
#include "util/hash.h"

namespace tensorsafe::testing {
namespace {

// Nothing an input of under 4 KiB justifies is larger than this.
constexpr std::size_t kSmall = std::size_t{1} << 20;

std::span<const std::byte> B(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

void Put64(std::string& s, std::size_t off, std::uint64_t v) {
  internal::Store64(reinterpret_cast<std::byte*>(s.data() + off), v);
}
void Put32(std::string& s, std::size_t off, std::uint32_t v) {
  internal::Store32(reinterpret_cast<std::byte*>(s.data() + off), v);
}

// Runs `fn` (returning a Status) under an AllocProbe and checks the code, a
// message fragment and the largest allocation.
template <typename F>
void ExpectRefused(F fn, StatusCode code, std::string_view text, std::size_t bound = kSmall) {
  std::size_t peak = 0;
  Status s;
  {
    AllocProbe probe;
    s = fn();
    peak = probe.peak();
  }
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
  EXPECT_LE(peak, bound) << "largest single allocation: " << peak << " bytes";
}

// ---- the native format (Limits in options.h) ----

class NativeLimits : public ::testing::Test {
 protected:
  std::string Base() { return MakeBaseFile(dir_); }
  // Recomputes slot 0's checksum after editing it.
  static void ResealSlot0(TsafeImage& img) {
    img.Set64(32 + 40, internal::Hash64(std::string_view(img.bytes()).substr(32, 40)));
  }
  static Status Open(const std::string& bytes, const ReaderOptions& opt = {}) {
    auto owner = std::make_shared<std::string>(bytes);
    auto r = Reader::OpenBuffer(B(*owner), owner, "f.tsafe", opt);
    if (!r.ok()) return r.status();
    return (*r)->Verify();
  }
  TempDir dir_;
};

TEST_F(NativeLimits, IndexBytes) {
  // A slot claiming a 1 TiB index (default limit 4 GiB): refused before any read.
  TsafeImage img(Base());
  img.Set64(32 + 24, std::uint64_t{1} << 40);
  ResealSlot0(img);
  ExpectRefused([&] { return Open(img.bytes()); }, StatusCode::kLimitExceeded,
                "index of 1099511627776 bytes exceeds the limit of 4294967296");
  ReaderOptions opt;
  opt.limits.max_index_bytes = 256;
  ExpectRefused([&] { return Open(Base(), opt); }, StatusCode::kLimitExceeded, "exceeds the limit of 256");
}

TEST_F(NativeLimits, TensorCount) {
  ReaderOptions opt;
  opt.limits.max_tensor_count = 3;
  ExpectRefused([&] { return Open(Base(), opt); }, StatusCode::kLimitExceeded,
                "file has 4 tensors, more than the limit of 3");
  // A root claiming 2^40 tensors in a small index: corruption (R18), no
  // allocation for the claimed count.
  TsafeImage img(Base());
  img.Set64(img.root() + 8, std::uint64_t{1} << 40);
  img.Reseal(false, false, false);
  ExpectRefused([&] { return Open(img.bytes()); }, StatusCode::kCorruption, "");
}

TEST_F(NativeLimits, Rank) {
  ReaderOptions opt;
  opt.limits.max_rank = 1;  // tensor "a" is [2, 3]
  ExpectRefused([&] { return Open(Base(), opt); }, StatusCode::kLimitExceeded, "rank 2 exceeds the limit of 1");
  opt.eager_index_bytes = 0;  // lazy: refused when the entry is used
  auto owner = std::make_shared<std::string>(Base());
  auto r = Reader::OpenBuffer(B(*owner), owner, "f", opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectRefused([&] { return (*r)->Find("a").status(); }, StatusCode::kLimitExceeded, "rank 2 exceeds the limit of 1");
}

TEST_F(NativeLimits, NameBytes) {
  ReaderOptions opt;
  opt.limits.max_name_bytes = 0;
  ExpectRefused([&] { return Open(Base(), opt); }, StatusCode::kLimitExceeded,
                "name of 1 bytes exceeds the limit of 0");
}

TEST_F(NativeLimits, MetadataBytes) {
  ReaderOptions opt;
  opt.limits.max_metadata_bytes = 5;
  ExpectRefused([&] { return Open(Base(), opt); }, StatusCode::kLimitExceeded,
                "file metadata of 17 bytes exceeds the limit of 5");
  // Per-tensor metadata (R29), in a file without file metadata.
  const std::string path = dir_.File("tmeta.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  const std::uint8_t x = 1;
  ASSERT_TRUE((*w)->Add("x", TensorView{DType::kU8, {}, reinterpret_cast<const std::byte*>(&x), {}},
                        R"({"note":"thirty bytes of it!"})")
                  .ok());
  ASSERT_TRUE((*w)->Finish().ok());
  opt.limits.max_metadata_bytes = 20;
  ExpectRefused([&] { return Open(ReadFileBytes(path), opt); }, StatusCode::kLimitExceeded,
                "metadata of 30 bytes exceeds the limit of 20");
}

TEST_F(NativeLimits, JsonDepth) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "{\"a\":";
  deep += "1" + std::string(100, '}');
  WriterOptions wo;
  wo.limits.max_json_depth = 200;
  const std::string path = dir_.File("deep.tsafe");
  auto w = Writer::Create(path, wo);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->SetMetadata(deep).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  ExpectRefused([&] { return Open(ReadFileBytes(path)); }, StatusCode::kLimitExceeded, "nested deeper than 64");
}

TEST_F(NativeLimits, HostileEntryClaimsNothingLarge) {
  // An entry claiming 2^40 elements of f64 whose checks pass up to the size
  // rule: corruption, and no buffer of the claimed size.
  TsafeImage img(Base());
  const std::uint64_t e = img.entry(1);  // "b": i32 [6]
  img.Set64(e + 40, std::uint64_t{1} << 40);
  img.Set64(e + 24, std::uint64_t{4} << 40);
  img.Reseal(false, true, true);
  ExpectRefused([&] { return Open(img.bytes()); }, StatusCode::kCorruption, "outside the data region");
}

// ---- safetensors (ReadOptions: max_header_bytes, max_json_depth) ----

TEST(CodecLimits, SafetensorsHeaderBytes) {
  std::string f(16, ' ');
  Put64(f, 0, std::uint64_t{4} << 30);  // a 4 GiB header in a 16-byte file
  ExpectRefused([&] { return safetensors::Decode(B(f), nullptr, "f").status(); }, StatusCode::kLimitExceeded,
                "header length 4294967296 exceeds the limit of 100000000");
  Put64(f, 0, 99'999'999);  // within the limit, past the end
  ExpectRefused([&] { return safetensors::Decode(B(f), nullptr, "f").status(); }, StatusCode::kCorruption, "");
}

TEST(CodecLimits, SafetensorsJsonDepth) {
  std::string h = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":)" + std::string(1000, '[') +
                  std::string(1000, ']') + "}}";
  std::string f(8, '\0');
  Put64(f, 0, h.size());
  f += h;
  ExpectRefused([&] { return safetensors::Decode(B(f), nullptr, "f").status(); }, StatusCode::kLimitExceeded,
                "nested deeper than 127");
}

// ---- npy / npz ----

std::string NpyV2(const std::string& dict, std::uint32_t claimed_len) {
  std::string f = "\x93NUMPY\x02";
  f += '\0';
  f += std::string(4, '\0');
  Put32(f, 8, claimed_len);
  return f + dict;
}

TEST(CodecLimits, NpyHeaderBytes) {
  const std::string f = NpyV2("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", 0xffffffffu);
  ExpectRefused([&] { return npy::Decode(B(f), nullptr, "f.npy").status(); }, StatusCode::kLimitExceeded,
                "exceeds the limit of 65536");
}

TEST(CodecLimits, NpyRank) {
  std::string shape = "(";
  for (int i = 0; i < 65; ++i) shape += "1,";
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "), }\n";
  std::string f = NpyV2(dict, static_cast<std::uint32_t>(dict.size())) + std::string(4, '\0');
  ExpectRefused([&] { return npy::Decode(B(f), nullptr, "f.npy").status(); }, StatusCode::kLimitExceeded, "rank");
}

TEST(CodecLimits, NpyHugeShapeAllocatesNothing) {
  // 2^40 big-endian f8 elements (a byte swap would need a buffer) in a tiny file.
  for (const char* descr : {"<f8", ">f8"}) {
    std::string dict =
        std::string("{'descr': '") + descr + "', 'fortran_order': True, 'shape': (1048576, 1048576), }\n";
    std::string f = NpyV2(dict, static_cast<std::uint32_t>(dict.size())) + std::string(64, '\0');
    ExpectRefused([&] { return npy::Decode(B(f), nullptr, "f.npy").status(); }, StatusCode::kCorruption, "");
  }
}

TensorSet TwoTensors() {
  static const std::string data(64, '\x01');
  TensorSet s;
  for (const char* n : {"a", "b", "c"}) {
    Tensor t;
    t.info.name = n;
    t.info.dtype = DType::kU8;
    t.info.shape = {64};
    t.data = B(data);
    s.tensors.push_back(t);
  }
  return s;
}

TEST(CodecLimits, NpzMembers) {
  auto z = npz::Encode(TwoTensors());
  ASSERT_TRUE(z.ok());
  npz::ReadOptions opt;
  opt.max_members = 2;
  ExpectRefused([&] { return npz::Decode(B(*z), nullptr, "f.npz", opt).status(); }, StatusCode::kLimitExceeded,
                "more than the limit of 2");
}

TEST(CodecLimits, NpzInflatedBytes) {
  npz::WriteOptions wo;
  wo.compress = true;
  auto z = npz::Encode(TwoTensors(), wo);
  ASSERT_TRUE(z.ok());
  npz::ReadOptions opt;
  opt.max_inflated_bytes = 200;  // each member inflates to 128 + 64 bytes
  ExpectRefused([&] { return npz::Decode(B(*z), nullptr, "f.npz", opt).status(); }, StatusCode::kLimitExceeded,
                "exceeds the limit of 200 inflated bytes");
}

TEST(CodecLimits, NpzDeclaredSizeBeyondDeflateRatio) {
  // A deflated member whose directory claims 4 GiB - 2 inflated bytes from a
  // few dozen compressed ones: deflate cannot expand more than 1032:1, so the
  // claim is corruption, refused before a 4 GiB buffer is allocated.
  npz::WriteOptions wo;
  wo.compress = true;
  auto z = npz::Encode(TwoTensors(), wo);
  ASSERT_TRUE(z.ok());
  const std::size_t cd = z->find("PK\x01\x02");
  ASSERT_NE(cd, std::string::npos);
  Put32(*z, cd + 24, 0xfffffffeu);
  ExpectRefused([&] { return npz::Decode(B(*z), nullptr, "f.npz").status(); }, StatusCode::kCorruption,
                "more than deflate can produce");
}

// ---- gguf (ReadOptions) ----

TEST(CodecLimits, GgufCounts) {
  ExpectRefused(
      [&] { return gguf::Decode(B(GgufBuilder().Header(std::uint64_t{1} << 60, 0).str()), nullptr, "g").status(); },
      StatusCode::kLimitExceeded, "");
  ExpectRefused(
      [&] { return gguf::Decode(B(GgufBuilder().Header(0, std::uint64_t{1} << 60).str()), nullptr, "g").status(); },
      StatusCode::kLimitExceeded, "");
  gguf::ReadOptions opt;
  opt.max_tensor_count = 0;
  const std::string one = GgufBuilder().Header(1, 0).Info("t", {1}, 0, 0).PadTo(32).Zeros(32).str();
  ExpectRefused([&] { return gguf::Decode(B(one), nullptr, "g", opt).status(); }, StatusCode::kLimitExceeded, "");
  opt = {};
  opt.max_kv_count = 0;
  const std::string kv = GgufBuilder().Header(0, 1).Key("a", 4).U32(1).str();
  ExpectRefused([&] { return gguf::Decode(B(kv), nullptr, "g", opt).status(); }, StatusCode::kLimitExceeded, "");
}

TEST(CodecLimits, GgufStringsAndArrays) {
  // A string claiming 2^40 bytes, an array claiming 2^40 elements: refused
  // without allocating for the claim.
  // Lengths are checked against the bytes that remain first (corruption).
  std::string s = GgufBuilder().Header(0, 1).Key("a", 8).U64(std::uint64_t{1} << 40).str();
  ExpectRefused([&] { return gguf::Decode(B(s), nullptr, "g").status(); }, StatusCode::kCorruption,
                "length 1099511627776 at offset 37 exceeds the 0 bytes remaining");
  std::string a = GgufBuilder().Header(0, 1).Key("a", 9).U32(10).U64(std::uint64_t{1} << 40).str();
  ExpectRefused([&] { return gguf::Decode(B(a), nullptr, "g").status(); }, StatusCode::kCorruption,
                "cannot fit in the 0 bytes remaining");
  gguf::ReadOptions opt;
  opt.max_string_bytes = 3;
  ExpectRefused(
      [&] {
        return gguf::Decode(B(GgufBuilder().Header(0, 1).Key("a", 8).Str("abcd").str()), nullptr, "g", opt).status();
      },
      StatusCode::kLimitExceeded, "");
  opt = {};
  opt.max_array_elems = 2;
  const std::string arr = GgufBuilder().Header(0, 1).Key("a", 9).U32(4).U64(3).U32(1).U32(2).U32(3).str();
  ExpectRefused([&] { return gguf::Decode(B(arr), nullptr, "g", opt).status(); }, StatusCode::kLimitExceeded,
                "array of 3 elements exceeds the limit of 2");
  opt = {};
  opt.max_array_depth = 1;
  const std::string nested = GgufBuilder().Header(0, 1).Key("a", 9).U32(9).U64(1).U32(4).U64(1).U32(7).str();
  ExpectRefused([&] { return gguf::Decode(B(nested), nullptr, "g", opt).status(); }, StatusCode::kLimitExceeded,
                "nested deeper than the limit of 1");
  opt = {};
  opt.max_metadata_bytes = 16;
  const std::string big = GgufBuilder().Header(0, 1).Key("a", 8).Str(std::string(40, 'x')).str();
  ExpectRefused([&] { return gguf::Decode(B(big), nullptr, "g", opt).status(); }, StatusCode::kLimitExceeded,
                "grows past the limit of 16 bytes");
}

TEST(CodecLimits, GgufTensorNameBytes) {
  const std::string f = GgufBuilder().Header(1, 0).Info(std::string(64, 'n'), {1}, 0, 0).PadTo(32).Zeros(32).str();
  ExpectRefused([&] { return gguf::Decode(B(f), nullptr, "g").status(); }, StatusCode::kLimitExceeded,
                "name of 64 bytes exceeds the limit of 63");
}

// ---- tenbin, btf, zio (Limits in their ReadOptions) ----

std::string OneTenbin() {
  static const float x[6] = {1, 2, 3, 4, 5, 6};
  TensorSet s;
  Tensor t;
  t.info.name = "x";
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = std::as_bytes(std::span(x));
  s.tensors.push_back(t);
  s.tensors.push_back(t);
  s.tensors[1].info.name = "y";
  return *tenbin::Encode(s);
}

TEST(CodecLimits, TenbinRankAndCount) {
  std::string f = OneTenbin();
  std::string hostile = f;
  Put64(hostile, 16 + 16, std::uint64_t{1} << 40);  // ndim of the first header payload
  ExpectRefused([&] { return tenbin::Decode(B(hostile), nullptr, "t").status(); }, StatusCode::kLimitExceeded, "");
  tenbin::ReadOptions opt;
  opt.limits.max_rank = 1;
  ExpectRefused([&] { return tenbin::Decode(B(f), nullptr, "t", opt).status(); }, StatusCode::kLimitExceeded, "");
  opt = {};
  opt.limits.max_tensor_count = 1;
  ExpectRefused([&] { return tenbin::Decode(B(f), nullptr, "t", opt).status(); }, StatusCode::kLimitExceeded, "");
  std::string chunk = f;
  Put64(chunk, 8, std::uint64_t{1} << 62);  // a chunk claiming 4 EiB
  ExpectRefused([&] { return tenbin::Decode(B(chunk), nullptr, "t").status(); }, StatusCode::kCorruption, "");
}

TEST(CodecLimits, BtfCountAndRank) {
  static const float x[6] = {1, 2, 3, 4, 5, 6};
  TensorSet s;
  Tensor t;
  t.info.name = "0";
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = std::as_bytes(std::span(x));
  s.tensors.push_back(t);
  const std::string f = *btf::Encode(s);
  std::string hostile = f;
  Put64(hostile, 0, std::uint64_t{1} << 61);
  ExpectRefused([&] { return btf::Decode(B(hostile), nullptr, "b").status(); }, StatusCode::kLimitExceeded, "");
  btf::ReadOptions opt;
  opt.limits.max_rank = 1;
  ExpectRefused([&] { return btf::Decode(B(f), nullptr, "b", opt).status(); }, StatusCode::kLimitExceeded, "");
  opt = {};
  opt.limits.max_tensor_count = 0;
  ExpectRefused([&] { return btf::Decode(B(f), nullptr, "b", opt).status(); }, StatusCode::kLimitExceeded, "");
  // Dims claiming 2^40 elements: corruption, nothing allocated for them.
  std::string dims = f;
  Put64(dims, 16 + 16, std::uint64_t{1} << 40);
  ExpectRefused([&] { return btf::Decode(B(dims), nullptr, "b").status(); }, StatusCode::kCorruption, "");
}

TEST(CodecLimits, ZioLabelDepthCountRank) {
  static const float x[6] = {1, 2, 3, 4, 5, 6};
  TensorSet s;
  Tensor t;
  t.info.name = "0";
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = std::as_bytes(std::span(x));
  s.tensors.push_back(t);
  s.metadata_json = R"({"a":{"b":{"c":1}}})";
  const std::string f = *zio::Encode(s);
  zio::ReadOptions opt;
  opt.limits.max_metadata_bytes = 10;
  ExpectRefused([&] { return zio::Decode(B(f), nullptr, "z", opt).status(); }, StatusCode::kLimitExceeded,
                "exceeds the limit of 10");
  opt = {};
  opt.limits.max_json_depth = 3;
  ExpectRefused([&] { return zio::Decode(B(f), nullptr, "z", opt).status(); }, StatusCode::kLimitExceeded, "");
  opt = {};
  opt.limits.max_tensor_count = 0;
  ExpectRefused([&] { return zio::Decode(B(f), nullptr, "z", opt).status(); }, StatusCode::kLimitExceeded,
                "1 TENS tensors exceed the limit of 0");
  opt = {};
  opt.limits.max_rank = 1;
  ExpectRefused([&] { return zio::Decode(B(f), nullptr, "z", opt).status(); }, StatusCode::kLimitExceeded,
                "rank 2 exceeds the limit of 1");
}

// The probe itself: it sees large allocations, including the library's (an
// .npz member inflated into a 1 MiB buffer), so the bounds above mean something.
TEST(AllocProbeSelfTest, SeesLargeAllocations) {
  {
    AllocProbe probe;
    std::vector<char> v(3 << 20, 'x');
    asm volatile("" : : "r"(v.data()) : "memory");  // keep the allocation
    EXPECT_GE(probe.peak(), std::size_t{3} << 20);
  }
  const std::string zeros(1 << 20, '\0');
  TensorSet set;
  Tensor t;
  t.info.name = "z";
  t.info.dtype = DType::kU8;
  t.info.shape = {zeros.size()};
  t.data = B(zeros);
  set.tensors.push_back(t);
  npz::WriteOptions wo;
  wo.compress = true;
  const std::string z = *npz::Encode(set, wo);
  ASSERT_LT(z.size(), 4096u);
  AllocProbe probe;
  auto r = npz::Decode(B(z), nullptr, "z.npz");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(probe.peak(), std::size_t{1} << 20);
}

}  // namespace
}  // namespace tensorsafe::testing
