#include "tensorsafe/formats/tenbin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "formats/codec_test_util.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

using testing::Bytes;
using testing::MakeTensor;
using testing::Raw;
using testing::Set64;
using testing::SharedFixture;
using testing::Str;

const std::string kWds = "tenbin/vec_wds_2x3f4_x.ten";

TensorSet TenbinVec2x3() {
  TensorSet set;
  set.tensors.push_back(MakeTensor("x", DType::kF32, {2, 3}, Raw<float>({1, 2, 3, 4, 5, 6})));
  return set;
}

Result<TensorSet> DecodeTenbin(const std::string& s, const tenbin::ReadOptions& opt = {}) {
  return tenbin::Decode(Bytes(s), nullptr, "t.ten", opt);
}

// ---- Fixtures made by the reference code ----

TEST(TenbinFixtures, WebdatasetTestDataDecodesAndReencodesExactly) {
  for (int i = 0; i < 10; ++i) {
    const std::string rel = "tenbin/00000" + std::to_string(i) + ".ten";
    const std::string bytes = SharedFixture(rel);
    ASSERT_EQ(bytes.size(), 12736u) << rel;
    auto set = DecodeTenbin(bytes);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->tensors.size(), 2u);
    const char* names[] = {"xs", "ys"};
    const std::uint64_t offsets[] = {96, 6464};
    for (int k = 0; k < 2; ++k) {
      const TensorInfo& info = set->tensors[k].info;
      EXPECT_EQ(info.name, names[k]);
      EXPECT_EQ(info.dtype, DType::kF64);
      EXPECT_EQ(info.shape, (Shape{28, 28}));
      EXPECT_EQ(info.metadata_json, "");
      EXPECT_EQ(info.data_offset, offsets[k]);
      // Zero-copy: the tensor views the caller's buffer.
      EXPECT_EQ(set->tensors[k].data.data(), Bytes(bytes).data() + offsets[k]);
      EXPECT_EQ(set->tensors[k].data.size(), 28u * 28u * 8u);
    }
    auto again = tenbin::Encode(*set);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, bytes) << rel;
  }
}

TEST(TenbinFixtures, ReadFileMapsAndKeepsTheMappingAlive) {
  auto set = tenbin::ReadFile(std::string(TS_SHARED_DIR) + "/fixtures/tenbin/000003.ten");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 2u);
  Tensor ys = set->tensors[1];
  set = Status(StatusCode::kInternal, "drop the set");  // the tensor alone keeps the mapping
  EXPECT_EQ(ys.info.name, "ys");
  double sum = 0;
  for (std::size_t i = 0; i < 784; ++i) sum += internal::LoadLE<double>(ys.data.data() + 8 * i);
  EXPECT_TRUE(std::isfinite(sum));
}

TEST(TenbinGolden, DecodesBothReferenceVectors) {
  for (const char* rel : {"tenbin/vec_wds_2x3f4_x.ten", "tenbin/vec_tcom_2x3f4_x.ten"}) {
    const std::string bytes = SharedFixture(rel);
    auto set = DecodeTenbin(bytes);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->tensors.size(), 1u);
    EXPECT_EQ(set->tensors[0].info.name, "x");
    EXPECT_EQ(set->tensors[0].info.dtype, DType::kF32);
    EXPECT_EQ(set->tensors[0].info.shape, (Shape{2, 3}));
    EXPECT_EQ(Str(set->tensors[0].data), (Raw<float>({1, 2, 3, 4, 5, 6})));
  }
}

TEST(TenbinGolden, EncodesByteIdenticalToWebdatasetAndTensorcom) {
  auto bytes = tenbin::Encode(TenbinVec2x3());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, SharedFixture("tenbin/vec_wds_2x3f4_x.ten"));
  EXPECT_EQ(*bytes, SharedFixture("tenbin/vec_tcom_2x3f4_x.ten"));
}

TEST(TenbinGolden, WriteFileThenReadFile) {
  testing::TempDir dir;
  const std::string path = dir.File("a.ten");
  ASSERT_TRUE(tenbin::WriteFile(path, TenbinVec2x3()).ok());
  EXPECT_EQ(testing::ReadFileBytes(path), SharedFixture(kWds));
  auto set = tenbin::ReadFile(path);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->tensors[0].info.name, "x");
}

TEST(TenbinGolden, FailedWriteLeavesNothingBehind) {
  testing::TempDir dir;
  TensorSet set;
  set.tensors.push_back(MakeTensor("b", DType::kBF16, {1}, "ab"));
  const std::string path = dir.File("b.ten");
  EXPECT_STATUS(tenbin::WriteFile(path, set), StatusCode::kUnsupported, "b.ten: tensor 0 \"b\"");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---- Chunk-level API (tensorcom multipart frames, formats.md §3.3) ----

TEST(TenbinChunks, PayloadsAreTheTensorcomFrames) {
  auto frames = tenbin::EncodePayloads(TenbinVec2x3());
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_EQ((*frames)[0], std::string("f4\0\0\0\0\0\0x\0\0\0\0\0\0\0", 16) + Raw<std::int64_t>({2, 2, 3}));
  EXPECT_EQ((*frames)[1], (Raw<float>({1, 2, 3, 4, 5, 6})));
  EXPECT_EQ(tenbin::JoinChunks(*frames), SharedFixture(kWds));

  const std::string file = SharedFixture(kWds);
  auto split = tenbin::SplitChunks(Bytes(file), "f");
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->size(), 2u);
  EXPECT_EQ(Str((*split)[0]), (*frames)[0]);
  EXPECT_EQ(Str((*split)[1]), (*frames)[1]);

  std::vector<std::span<const std::byte>> views = {Bytes((*frames)[0]), Bytes((*frames)[1])};
  auto set = tenbin::DecodePayloads(views, nullptr, "frames");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->tensors[0].info.name, "x");
  EXPECT_EQ(Str(set->tensors[0].data), (*frames)[1]);
}

TEST(TenbinChunks, OddPayloadCountIsADanglingHeader) {
  auto frames = tenbin::EncodePayloads(TenbinVec2x3());
  ASSERT_TRUE(frames.ok());
  std::vector<std::span<const std::byte>> views = {Bytes((*frames)[0])};
  EXPECT_STATUS(tenbin::DecodePayloads(views, nullptr, "frames"), StatusCode::kCorruption,
                "frames: chunk 0: header chunk without a data chunk");
}

TEST(TenbinChunks, MisalignedPayloadIsCopiedAlignedPayloadIsViewed) {
  auto header = tenbin::EncodeHeaderPayload({DType::kF64, "", {2}});
  ASSERT_TRUE(header.ok());
  alignas(16) char buf[24] = {};
  std::memcpy(buf + 1, Raw<double>({1.5, 2.5}).data(), 16);
  std::vector<std::span<const std::byte>> views = {Bytes(*header), std::as_bytes(std::span<const char>(buf + 1, 16))};
  auto set = tenbin::DecodePayloads(views, nullptr, "frames");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_NE(set->tensors[0].data.data(), views[1].data());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(set->tensors[0].data.data()) % 8, 0u);
  EXPECT_EQ(Str(set->tensors[0].data), (Raw<double>({1.5, 2.5})));
  views[1] = std::as_bytes(std::span<const char>(buf, 16));
  set = tenbin::DecodePayloads(views, nullptr, "frames");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->tensors[0].data.data(), views[1].data());
}

// ---- webdataset's bugs, avoided (formats.md §3.4) ----

TEST(TenbinBugs, Uint32IsWrittenAsU4AndReadBack) {
  TensorSet set;
  set.tensors.push_back(MakeTensor("u", DType::kU32, {2}, Raw<std::uint32_t>({7, 0xffffffff})));
  auto bytes = tenbin::Encode(set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->substr(16, 8), std::string("u4\0\0\0\0\0\0", 8));
  auto back = DecodeTenbin(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tensors[0].info.dtype, DType::kU32);
}

TEST(TenbinBugs, ZeroDimensionalArraysRoundTrip) {
  TensorSet set;
  set.tensors.push_back(MakeTensor("s", DType::kI64, {}, Raw<std::int64_t>({-42})));
  auto bytes = tenbin::Encode(set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->size(), 2u * (16 + 64));  // header payload is 24 bytes: ndim 0
  auto back = DecodeTenbin(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tensors[0].info.shape, Shape{});
  EXPECT_EQ(Str(back->tensors[0].data), Raw<std::int64_t>({-42}));
}

TEST(TenbinBugs, InfoLongerThanEightBytesOrNonAsciiIsRejected) {
  TensorSet set = TenbinVec2x3();
  set.tensors[0].info.name = "abcdefghi";
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kInvalidArgument,
                "tensor 0 \"abcdefghi\": info \"abcdefghi\" is 9 bytes; tenbin holds at most 8");
  set.tensors[0].info.name = "caf\xc3\xa9";
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kInvalidArgument, "info \"caf\xc3\xa9\" must be ASCII");
  set.tensors[0].info.name = "abcdefgh";  // exactly 8: no terminator, still fine
  auto bytes = tenbin::Encode(set);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->substr(24, 8), "abcdefgh");
  EXPECT_EQ(DecodeTenbin(*bytes)->tensors[0].info.name, "abcdefgh");
  tenbin::WriteOptions no_names;
  no_names.names_as_infos = false;
  set.tensors[0].info.name = "a long name that does not fit";
  bytes = tenbin::Encode(set, no_names);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->substr(24, 8), std::string(8, '\0'));
}

TEST(TenbinBugs, BigEndianInputIsConvertedNotMislabelled) {
  const std::string be("\x3f\x80\x00\x00\x40\x00\x00\x00", 8);  // 1.0f, 2.0f big-endian
  tenbin::ArrayRef a{{DType::kF32, "be", {2}}, Bytes(be), /*big_endian=*/true};
  auto frames = tenbin::EncodePayloads(std::span(&a, 1));
  ASSERT_TRUE(frames.ok());
  EXPECT_EQ((*frames)[1], (Raw<float>({1.0f, 2.0f})));
}

TEST(TenbinBugs, RankTenAndAboveIsReadThoughNotWrittenByDefault) {
  TensorSet set;
  set.tensors.push_back(MakeTensor("r", DType::kU8, Shape(12, 1), "\x05"));
  tenbin::WriteOptions wide;
  wide.max_rank = 12;
  auto bytes = tenbin::Encode(set, wide);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = DecodeTenbin(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tensors[0].info.shape, Shape(12, 1));
}

// ---- Naming rule (docs/formats/tenbin.md §3) ----

TEST(TenbinNames, EmptyDuplicateAndPositionalInfosGetPositionalNames) {
  std::vector<tenbin::ArrayRef> arrays;
  const std::string one = "\x01";
  for (const char* info : {"a", "", "a", "b", "1"}) arrays.push_back({{DType::kU8, info, {1}}, Bytes(one)});
  auto frames = tenbin::EncodePayloads(arrays);
  ASSERT_TRUE(frames.ok());
  const std::string file = tenbin::JoinChunks(*frames);
  auto got = DecodeTenbin(file);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<std::string> names;
  for (const auto& t : got->tensors) names.push_back(t.info.name);
  // "a" twice: positional; "" positional; "1" is tensor 1's positional name.
  EXPECT_EQ(names, (std::vector<std::string>{"0", "1", "2", "b", "4"}));
  EXPECT_EQ(got->tensors[0].info.metadata_json, R"({"tenbin_info":"a"})");
  EXPECT_EQ(got->tensors[1].info.metadata_json, "");
  EXPECT_EQ(got->tensors[3].info.metadata_json, "");
  EXPECT_EQ(got->tensors[4].info.metadata_json, R"({"tenbin_info":"1"})");
  // The kept infos make the file re-encode exactly.
  auto again = tenbin::Encode(*got);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, file);
}

// webdataset's str64 packs any ASCII info of up to 8 characters, NULs
// included, and decode_buffer gives it back with the NULs at both ends
// stripped. These 320 bytes are what webdataset 1.0.2 writes for
// encode_buffer([int32 [7,8,9], uint8 [1,2]], infos=["\0x", "a\0b"])
// (sha256 91b6c900...), spelled out here from the layout of tenbin.md §2.
std::string Chunk(const std::string& payload) {
  std::string c = "~TenBin~";
  c += std::string(1, static_cast<char>(payload.size())) + std::string(7, '\0');
  c += payload;
  c.append((64 - payload.size() % 64) % 64, '\0');
  return c;
}

TEST(TenbinNames, InfosHoldingNulBytesAreReadAndRewrittenAsWebdatasetWritesThem) {
  const std::string ndim1 = std::string("\x01", 1) + std::string(7, '\0');
  const std::string file = Chunk(std::string("i4\0\0\0\0\0\0"
                                             "\0x\0\0\0\0\0\0",
                                             16) +
                                 ndim1 + std::string("\x03", 1) + std::string(7, '\0')) +
                           Chunk(Raw<std::int32_t>({7, 8, 9})) +
                           Chunk(std::string("u1\0\0\0\0\0\0"
                                             "a\0b\0\0\0\0\0",
                                             16) +
                                 ndim1 + std::string("\x02", 1) + std::string(7, '\0')) +
                           Chunk(std::string("\x01\x02", 2));
  ASSERT_EQ(file.size(), 320u);
  auto got = DecodeTenbin(file);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->tensors.size(), 2u);
  // "\0x" is webdataset's "x"; "a\0b" cannot be a name, so it is positional.
  EXPECT_EQ(got->tensors[0].info.name, "x");
  EXPECT_EQ(got->tensors[1].info.name, "1");
  EXPECT_EQ(got->tensors[0].info.metadata_json, R"({"tenbin_info":"\u0000x"})");
  EXPECT_EQ(got->tensors[1].info.metadata_json, R"({"tenbin_info":"a\u0000b"})");
  EXPECT_EQ(Str(got->tensors[0].data), Raw<std::int32_t>({7, 8, 9}));
  // The kept infos re-encode to the same bytes.
  auto again = tenbin::Encode(*got);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, file);
  // A header with such an info encodes as str64 packs it.
  auto header = tenbin::EncodeHeaderPayload({DType::kU8, std::string("a\0b", 3), {2}});
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->substr(8, 8), std::string("a\0b\0\0\0\0\0", 8));
}

// ---- Named invalid inputs: code and message ----

struct TenbinDefect {
  const char* name;
  std::function<void(std::string&)> mutate;
  StatusCode code;
  const char* message;
  tenbin::ReadOptions options = {};
};

TEST(TenbinInvalid, NamedDefects) {
  tenbin::ReadOptions strict;
  strict.require_zero_padding = true;
  tenbin::ReadOptions rank1;
  rank1.limits.max_rank = 1;
  tenbin::ReadOptions no_tensors;
  no_tensors.limits.max_tensor_count = 0;
  const std::vector<TenbinDefect> defects = {
      {"bad magic", [](std::string& s) { s[0] = 'X'; }, StatusCode::kCorruption,
       "t.ten: chunk 0 at offset 0: bad magic \"XTenBin~\""},
      {"bad magic in data chunk", [](std::string& s) { s[87] = '!'; }, StatusCode::kCorruption,
       "chunk 1 at offset 80: bad magic"},
      {"truncated chunk header", [](std::string& s) { s += "~TenB"; }, StatusCode::kCorruption,
       "chunk 2 at offset 160: 5 bytes remain, fewer than the 16-byte chunk header"},
      {"negative length", [](std::string& s) { Set64(s, 8, -1); }, StatusCode::kCorruption,
       "chunk 0 at offset 0: negative length -1"},
      {"length past the end", [](std::string& s) { Set64(s, 88, 4096); }, StatusCode::kCorruption,
       "chunk 1 at offset 80: length 4096 exceeds the 64 bytes that remain"},
      {"missing padding", [](std::string& s) { s.resize(130); }, StatusCode::kCorruption,
       "chunk 1 at offset 80: length 24 padded to 64 exceeds the 34 bytes that remain"},
      {"nonzero padding (strict)", [](std::string& s) { s[60] = 1; }, StatusCode::kCorruption,
       "chunk 0 at offset 0: padding byte at offset 60 is not zero", strict},
      {"dangling header", [](std::string& s) { s.resize(80); }, StatusCode::kCorruption,
       "chunk 0 at offset 0: header chunk without a data chunk"},
      {"unknown dtype",
       [](std::string& s) {
         s[16] = 'c';
         s[17] = '8';
       },
       StatusCode::kUnsupported, "chunk 0 at offset 0 (array 0): unknown dtype \"c8\""},
      {"webdataset's typo as dtype", [](std::string& s) { s.replace(16, 6, "unit32"); }, StatusCode::kUnsupported,
       "unknown dtype \"unit32\""},
      {"negative ndim", [](std::string& s) { Set64(s, 32, -1); }, StatusCode::kCorruption, "negative ndim -1"},
      {"rank too large", [](std::string& s) { Set64(s, 32, 65); }, StatusCode::kLimitExceeded,
       "ndim 65 exceeds the limit of 64"},
      {"rank above a lowered limit", [](std::string&) {}, StatusCode::kLimitExceeded, "ndim 2 exceeds the limit of 1",
       rank1},
      {"header size disagrees with ndim", [](std::string& s) { Set64(s, 32, 3); }, StatusCode::kCorruption,
       "header payload is 40 bytes, but ndim 3 needs 48"},
      {"short header payload", [](std::string& s) { Set64(s, 8, 8); }, StatusCode::kCorruption,
       "header payload is 8 bytes, shorter than the 24 bytes"},
      {"negative dimension", [](std::string& s) { Set64(s, 40, -2); }, StatusCode::kCorruption,
       "dimension 0 is negative (-2)"},
      {"data size disagrees with shape", [](std::string& s) { Set64(s, 48, 4); }, StatusCode::kCorruption,
       "chunk 1 at offset 80 (array 0): data chunk has 24 bytes, but shape [2, 4] of f4 needs 32"},
      {"shape product overflows",
       [](std::string& s) {
         Set64(s, 40, 1LL << 62);
         Set64(s, 48, 1LL << 62);
       },
       StatusCode::kCorruption, "overflows 64 bits"},
      {"non-ASCII info", [](std::string& s) { s[24] = '\xc3'; }, StatusCode::kCorruption,
       "chunk 0 at offset 0 (array 0): info \"\\xc3\" is not ASCII"},
      {"NUL inside dtype", [](std::string& s) { s[16] = 0; }, StatusCode::kCorruption,
       "dtype \"\\x004\" is not ASCII text followed by NUL padding"},
      {"too many arrays", [](std::string&) {}, StatusCode::kLimitExceeded, "chunk 0 at offset 0: more than 0 arrays",
       no_tensors},
  };
  for (const TenbinDefect& d : defects) {
    SCOPED_TRACE(d.name);
    std::string bytes = SharedFixture(kWds);
    d.mutate(bytes);
    EXPECT_STATUS(DecodeTenbin(bytes, d.options), d.code, d.message);
  }
}

TEST(TenbinInvalid, NonzeroPaddingIsIgnoredByDefault) {
  std::string bytes = SharedFixture(kWds);
  bytes[60] = 1;
  bytes[159] = 7;
  EXPECT_TRUE(DecodeTenbin(bytes).ok());
}

TEST(TenbinInvalid, EncodeErrors) {
  TensorSet set;
  set.tensors.push_back(MakeTensor("h", DType::kBF16, {1}, "ab"));
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kUnsupported, "tensor 0 \"h\": dtype bf16 has no tenbin code");
  set.tensors[0] = MakeTensor("b", DType::kBool, {1}, "\x01");
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kUnsupported, "dtype bool has no tenbin code");
  set.tensors[0] = MakeTensor("r", DType::kU8, Shape(10, 1), "\x01");
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kUnsupported, "rank 10 exceeds the tenbin limit of 9");
  set.tensors[0] = MakeTensor("n", DType::kF32, {2, 3}, Raw<float>({1, 2}));
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kInvalidArgument,
                "tensor 0 \"n\": 8 data bytes, but shape [2, 3] of f32 needs 24");
  set.tensors[0] = MakeTensor("c", DType::kU8, {1}, "\x01");
  set.tensors[0].info.layout = Layout::kCoo;
  EXPECT_STATUS(tenbin::Encode(set), StatusCode::kInvalidArgument, "dense tensors only");
}

TEST(TenbinInvalid, EveryTruncationIsAnErrorNeverACrash) {
  const std::string bytes = SharedFixture(kWds);
  EXPECT_TRUE(DecodeTenbin("").ok());  // no chunks: an empty list of arrays
  for (std::size_t n = 1; n < bytes.size(); ++n) {
    std::string prefix = bytes.substr(0, n);
    auto r = DecodeTenbin(prefix);
    EXPECT_FALSE(r.ok()) << "prefix " << n;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "prefix " << n;
  }
}

// ---- Random round trips, every dtype tenbin has ----

TEST(TenbinRandom, RoundTripsEveryDtype) {
  std::mt19937_64 rng(testing::TestSeed());
  const DType dtypes[] = {DType::kF16, DType::kF32, DType::kF64, DType::kI8,  DType::kI16, DType::kI32,
                          DType::kI64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
  const char* pool[] = {"", "a", "b", "xs", "12345678", "0", "3"};
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    for (int iter = 0; iter < 20; ++iter) {
      TensorSet set;
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        Shape shape = testing::RandomShape(rng, 4, 5);
        const std::uint64_t bytes = *DenseByteSize(dt, shape);
        set.tensors.push_back(MakeTensor(pool[rng() % 7], dt, shape, testing::RandomBytes(rng, bytes)));
      }
      auto enc = tenbin::Encode(set);
      ASSERT_TRUE(enc.ok()) << enc.status().ToString();
      auto dec = DecodeTenbin(*enc);
      ASSERT_TRUE(dec.ok()) << dec.status().ToString();
      ASSERT_EQ(dec->tensors.size(), set.tensors.size());
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(dec->tensors[i].info.dtype, dt);
        EXPECT_EQ(dec->tensors[i].info.shape, set.tensors[i].info.shape);
        EXPECT_EQ(Str(dec->tensors[i].data), Str(set.tensors[i].data));
      }
      auto again = tenbin::Encode(*dec);  // names and kept infos reproduce the bytes
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*again, *enc);
    }
  }
}

}  // namespace
}  // namespace tensorsafe
