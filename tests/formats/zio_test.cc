#include "tensorsafe/formats/zio.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "formats/codec_test_util.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

using testing::Bytes;
using testing::MakeTensor;
using testing::Raw;
using testing::SharedFixture;
using testing::Str;

const char* kSingle = "zio/vec_zio_tens_2x3f4_single_part.bin";
const std::string kLabel1 = R"({"TENS":{"tensors":[{"dtype":"f","part":0,"shape":[2,3],"word":4}]}})";

// FRAMES.txt: "frame N (X bytes):" / "single-part encode() (X bytes):" then
// hex lines "  0000: 5a 49 ..."; also "m2 form=[FLOW] label=<json>".
struct Frames {
  std::map<std::string, std::string> blocks;  // "frame 0", "single-part encode()"
  std::string m2_form, m2_label;
};

Frames ParseFramesTxt() {
  Frames f;
  std::istringstream in(SharedFixture("zio/FRAMES.txt"));
  std::string cur;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  ", 0) == 0 && !cur.empty()) {
      std::istringstream hex(line.substr(line.find(':') + 1));
      for (std::string b; hex >> b;) f.blocks[cur] += static_cast<char>(std::stoi(b, nullptr, 16));
    } else if (auto p = line.find(" ("); p != std::string::npos && line.ends_with("bytes):")) {
      cur = line.substr(0, p);
    } else if (line.rfind("m2 ", 0) == 0) {
      f.m2_form = line.substr(line.find('[') + 1, 4);
      f.m2_label = line.substr(line.find("label=") + 6);
    }
  }
  return f;
}

TensorSet Vec2x3(std::string name = "0") {
  TensorSet set;
  set.tensors.push_back(MakeTensor(std::move(name), DType::kF32, {2, 3}, Raw<float>({1, 2, 3, 4, 5, 6})));
  return set;
}

zio::Message FixtureCoord(zio::Message m) {
  m.granule = 0x0123456789abcdefULL;
  m.seqno = 1;
  return m;
}

std::vector<std::span<const std::byte>> Spans(const std::vector<std::string>& v) {
  std::vector<std::span<const std::byte>> s;
  for (const auto& x : v) s.push_back(Bytes(x));
  return s;
}

Result<TensorSet> DecodeLabel(const std::string& label, std::vector<std::string> payload,
                              const zio::ReadOptions& opt = {}) {
  static std::vector<std::string> keep;  // payload bytes outlive the message
  keep = std::move(payload);
  zio::Message m;
  m.form = "TENS";
  m.label = label;
  m.payload = Spans(keep);
  return zio::ToTensorSet(m, "msg", opt);
}

// ---- Fixtures made by ZIO's C++ code ----

TEST(ZioFixtures, FramesTxtAgreesWithTheSinglePartFile) {
  const Frames f = ParseFramesTxt();
  ASSERT_EQ(f.blocks.size(), 4u);
  EXPECT_EQ(f.blocks.at("single-part encode()"), SharedFixture(kSingle));
  EXPECT_EQ(f.blocks.at("frame 0").size(), 76u);
  EXPECT_EQ(f.m2_form, "FLOW");
}

TEST(ZioFixtures, UnpacksTheSinglePartMessage) {
  const std::string bytes = SharedFixture(kSingle);
  auto m = zio::Unpack(Bytes(bytes), nullptr, "single");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->level, 0);
  EXPECT_EQ(m->form, "TENS");
  EXPECT_EQ(m->label, kLabel1);
  EXPECT_EQ(m->origin, 0u);
  EXPECT_EQ(m->granule, 0x0123456789abcdefULL);
  EXPECT_EQ(m->seqno, 1u);
  ASSERT_EQ(m->payload.size(), 1u);
  EXPECT_EQ(m->payload[0].data(), Bytes(bytes).data() + 103);  // views the input
  auto set = zio::ToTensorSet(*m, "single");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 1u);
  EXPECT_EQ(set->tensors[0].info.name, "0");
  EXPECT_EQ(set->tensors[0].info.dtype, DType::kF32);
  EXPECT_EQ(set->tensors[0].info.shape, (Shape{2, 3}));
  EXPECT_EQ(Str(set->tensors[0].data), (Raw<float>({1, 2, 3, 4, 5, 6})));
  // Offset 103 is not 4-aligned here, so the tensor owns an aligned copy.
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(set->tensors[0].data.data()) % 4, 0u);
}

TEST(ZioFixtures, EncodesTheMultipartFramesAndThePackingByteForByte) {
  const Frames f = ParseFramesTxt();
  auto m = zio::FromTensorSet(Vec2x3());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const zio::Message msg = FixtureCoord(*m);
  auto frames = zio::EncodeFrames(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*frames)[i], f.blocks.at("frame " + std::to_string(i))) << i;
  auto packed = zio::Pack(msg);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(*packed, SharedFixture(kSingle));
  // And the frames decode back to the same message.
  auto back = zio::DecodeFrames(Spans(*frames), nullptr, "frames");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->label, kLabel1);
  EXPECT_EQ(back->granule, 0x0123456789abcdefULL);
}

TEST(ZioFixtures, FlowMessageWithTwoTensorsAndMetadataMatchesZiosLabel) {
  const Frames f = ParseFramesTxt();
  zio::Message base;
  base.form = "FLOW";
  base.label = R"({"flow":"DAT"})";
  TensorSet set = Vec2x3("x");  // a non-positional name becomes metadata {"name":"x"}
  set.tensors.push_back(MakeTensor("1", DType::kI32, {3}, Raw<std::int32_t>({7, 8, 9})));
  auto m = zio::AppendTensors(base, set);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->form, f.m2_form);
  EXPECT_EQ(m->label, f.m2_label);
  ASSERT_EQ(m->payload.size(), 2u);
  auto packed = zio::Pack(*m);
  ASSERT_TRUE(packed.ok());
  auto back = zio::Decode(Bytes(*packed), nullptr, "flow");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].info.name, "x");
  EXPECT_EQ(back->tensors[0].info.metadata_json, R"({"name":"x"})");
  EXPECT_EQ(back->tensors[1].info.name, "1");
  EXPECT_EQ(back->tensors[1].info.dtype, DType::kI32);
  EXPECT_EQ(Str(back->tensors[1].data), (Raw<std::int32_t>({7, 8, 9})));
  // Decoded tensors re-append to the same label.
  auto again = zio::AppendTensors(base, *back);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->label, f.m2_label);
}

TEST(ZioFixtures, WriteFileThenReadFile) {
  testing::TempDir dir;
  ASSERT_TRUE(zio::WriteFile(dir.File("m.zio"), Vec2x3()).ok());
  auto set = zio::ReadFile(dir.File("m.zio"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(Str(set->tensors[0].data), (Raw<float>({1, 2, 3, 4, 5, 6})));
  TensorSet bad;
  bad.tensors.push_back(MakeTensor("h", DType::kBF16, {1}, "ab"));
  EXPECT_STATUS(zio::WriteFile(dir.File("bad.zio"), bad), StatusCode::kUnsupported,
                "bad.zio: tensor 0 \"h\": dtype bf16 has no ZIO TENS type");
  EXPECT_FALSE(std::filesystem::exists(dir.File("bad.zio")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

// ---- TENS details ----

TEST(ZioTens, SetMetadataAndPartDefaultAndSharedParts) {
  TensorSet set = Vec2x3();
  set.metadata_json = R"({"run":7})";
  auto m = zio::FromTensorSet(set);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->label, R"({"TENS":{"metadata":{"run":7},"tensors":[{"dtype":"f","part":0,"shape":[2,3],"word":4}]}})");
  EXPECT_EQ(zio::ToTensorSet(*m, "m")->metadata_json, R"({"run":7})");
  // No "part": the entry's index; two entries may share one part.
  auto two = DecodeLabel(R"({"TENS":{"tensors":[{"dtype":"u","shape":[2],"word":1},)"
                         R"({"dtype":"i","shape":[1],"word":2,"part":0}]}})",
                         {"\x01\x02"});
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->tensors[0].info.dtype, DType::kU8);
  EXPECT_EQ(two->tensors[1].info.dtype, DType::kI16);
  EXPECT_EQ(Str(two->tensors[1].data), "\x01\x02");
}

TEST(ZioTens, OrderAndAscendAreHonoured) {
  const std::string c = Raw<float>({1, 2, 3, 4, 5, 6});  // [[1,2,3],[4,5,6]]
  struct Case {
    const char* extra;
    std::string stored;
  } cases[] = {
      {R"("order":[1,0])", c},                                       // C order, explicit
      {R"("order":[0,1])", Raw<float>({1, 4, 2, 5, 3, 6})},          // Fortran
      {R"("ascend":[false,true])", Raw<float>({4, 5, 6, 1, 2, 3})},  // rows reversed
      {R"("ascend":[true,false])", Raw<float>({3, 2, 1, 6, 5, 4})},  // columns reversed
      {R"("order":[0,1],"ascend":[false,false])", Raw<float>({6, 3, 5, 2, 4, 1})},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.extra);
    auto set = DecodeLabel(
        std::string(R"({"TENS":{"tensors":[{"dtype":"f","word":4,"shape":[2,3],)") + k.extra + "}]}}", {k.stored});
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_EQ(Str(set->tensors[0].data), c);
  }
  // 3-D Fortran order: element (i,j,k) stored at i + 2j + 4k.
  std::string stored(8, '\0'), want(8, '\0');
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) {
        stored[i + 2 * j + 4 * k] = static_cast<char>(100 * i + 10 * j + k);
        want[4 * i + 2 * j + k] = static_cast<char>(100 * i + 10 * j + k);
      }
  auto set = DecodeLabel(R"({"TENS":{"tensors":[{"dtype":"i","word":1,"shape":[2,2,2],"order":[0,1,2]}]}})", {stored});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(Str(set->tensors[0].data), want);
}

TEST(ZioTens, PackUsesLongLengthsFrom255AndAcceptsAnEmptyLastPart) {
  std::string big(255, 'a'), small(254, 'b');
  zio::Message m;
  m.payload = {Bytes(small), Bytes(big), {}};
  auto packed = zio::Pack(m);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->substr(9 + 25, 1), "\xfe");                                        // 254: one byte
  EXPECT_EQ(packed->substr(9 + 25 + 255, 5), std::string("\xff\x00\x00\x00\xff", 5));  // 255: long form
  EXPECT_EQ(packed->back(), '\0');  // the empty last part (ZIO's Python rejects it)
  auto back = zio::Unpack(Bytes(*packed), nullptr, "p");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->payload.size(), 3u);
  EXPECT_EQ(Str(back->payload[1]), big);
  EXPECT_TRUE(back->payload[2].empty());
}

TEST(ZioTens, LongLengthMarkerForAShortPartIsAccepted) {
  auto packed = zio::Pack(zio::Message{});
  ASSERT_TRUE(packed.ok());
  // Re-spell the 8-byte header part's length as 0xFF + big-endian u32 8.
  const std::string long_form = std::string("\xff\x00\x00\x00\x08", 5) + packed->substr(1);
  auto m = zio::Unpack(Bytes(long_form), nullptr, "p");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->form, "    ");
  EXPECT_TRUE(m->payload.empty());
}

// ---- Named invalid inputs ----

TEST(ZioInvalid, FrameDefects) {
  auto frames = [](std::vector<std::string> f) { return f; };
  const std::string coord(24, '\0');
  zio::ReadOptions small;
  small.limits.max_metadata_bytes = 10;
  struct D {
    const char* name;
    std::vector<std::string> frames;
    StatusCode code;
    const char* message;
    zio::ReadOptions opt = {};
  } defects[] = {
      {"one frame", frames({"ZIO0TENS{}"}), StatusCode::kCorruption,
       "f: message has 1 frames; ZIO needs a header frame and a coordinate frame"},
      {"short header", frames({"ZIO0TE", coord}), StatusCode::kCorruption,
       "header frame is 6 bytes, shorter than the 8"},
      {"bad magic", frames({"XIO0TENS", coord}), StatusCode::kCorruption,
       "header frame starts with \"XIO\", not \"ZIO\""},
      {"bad level", frames({"ZIO9TENS", coord}), StatusCode::kCorruption,
       "header frame: level \"9\" is not a digit 0..8"},
      {"short coord", frames({"ZIO0TENS", coord.substr(12)}), StatusCode::kCorruption,
       "coordinate frame is 12 bytes, not 24"},
      {"label too large", frames({"ZIO0TENS" + std::string(11, ' '), coord}), StatusCode::kLimitExceeded,
       "label of 11 bytes exceeds the limit of 10", small},
  };
  for (const D& d : defects) {
    SCOPED_TRACE(d.name);
    EXPECT_STATUS(zio::DecodeFrames(Spans(d.frames), nullptr, "f", d.opt), d.code, d.message);
  }
}

TEST(ZioInvalid, PackingDefects) {
  const std::pair<std::string, const char*> defects[] = {
      {std::string("\xff\x00", 2), "p: part 0 at offset 0: the 0xFF length marker needs 4 more bytes, 1 remain"},
      {"\x05"
       "ab",
       "p: part 0 at offset 0: length 5 exceeds the 2 bytes that remain"},
      {std::string("\x01Z\xff\x00\x00\x01\x00", 7), "part 1 at offset 2: length 256 exceeds the 0 bytes"},
  };
  for (const auto& [bytes, message] : defects) {
    EXPECT_STATUS(zio::Unpack(Bytes(bytes), nullptr, "p"), StatusCode::kCorruption, message);
  }
}

TEST(ZioInvalid, TensDefects) {
  const std::string f6 = Raw<float>({1, 2, 3, 4, 5, 6});
  auto one = [](const std::string& entry) { return R"({"TENS":{"tensors":[)" + entry + "]}}"; };
  zio::ReadOptions shallow;
  shallow.limits.max_json_depth = 3;
  zio::ReadOptions few;
  few.limits.max_tensor_count = 0;
  zio::ReadOptions rank1;
  rank1.limits.max_rank = 1;
  const std::string ok = R"({"dtype":"f","shape":[2,3],"word":4)";
  struct D {
    const char* name;
    std::string label;
    StatusCode code;
    const char* message;
    zio::ReadOptions opt = {};
  } defects[] = {
      {"label not JSON", "TENS!", StatusCode::kCorruption, "msg: label is not JSON"},
      {"no TENS", R"({"flow":"DAT"})", StatusCode::kInvalidArgument, "label has no \"TENS\" object"},
      {"tensors not an array", R"({"TENS":{"tensors":{}}})", StatusCode::kCorruption,
       "\"TENS\" must be an object with a \"tensors\" array"},
      {"entry not an object", one("7"), StatusCode::kCorruption, "TENS tensor 0: not a JSON object"},
      {"shape missing", one(R"({"dtype":"f","word":4})"), StatusCode::kCorruption,
       "TENS tensor 0: \"shape\" is missing"},
      {"negative dimension", one(R"({"dtype":"f","shape":[-2,3],"word":4})"), StatusCode::kCorruption,
       "TENS tensor 0: \"shape\" must be an array of non-negative integers"},
      {"rank too large", one(ok + "}"), StatusCode::kLimitExceeded, "rank 2 exceeds the limit of 1", rank1},
      {"word missing", one(R"({"dtype":"f","shape":[2,3]})"), StatusCode::kCorruption,
       "\"word\" must be a non-negative integer"},
      {"dtype not a character", one(R"({"dtype":"f4","shape":[2,3],"word":4})"), StatusCode::kCorruption,
       "\"dtype\" must be a one-character string"},
      {"unknown dtype", one(R"({"dtype":"z","shape":[2,3],"word":4})"), StatusCode::kUnsupported,
       "TENS tensor 0: dtype \"z\" with word 4 has no tensorsafe dtype"},
      {"long double", one(R"({"dtype":"f","shape":[2,3],"word":16})"), StatusCode::kUnsupported,
       "dtype \"f\" with word 16 has no tensorsafe dtype"},
      // ZIO's type_name gives "?" for int8_t (signed char), std::byte and
      // every type it does not list: no element type can be inferred.
      {"ZIO's unknown type", one(R"({"dtype":"?","shape":[2,3],"word":1})"), StatusCode::kUnsupported,
       "dtype \"?\" with word 1 has no tensorsafe dtype"},
      {"part out of range", one(ok + R"(,"part":3})"), StatusCode::kCorruption,
       "TENS tensor 0: part 3, but the message has 1 payload frames"},
      {"size disagrees", one(R"({"dtype":"f","shape":[2,4],"word":4})"), StatusCode::kCorruption,
       "TENS tensor 0: payload frame 0 has 24 bytes, but shape [2, 4] of word 4 needs 32"},
      {"order not a permutation", one(ok + R"(,"order":[0,0]})"), StatusCode::kCorruption,
       "\"order\" [0,0] is not a permutation of 0..1"},
      {"ascend of the wrong length", one(ok + R"(,"ascend":[true]})"), StatusCode::kCorruption,
       "\"ascend\" must be an array of 2 booleans"},
      {"sparse packing", one(ok + R"(,"packing":"coo"})"), StatusCode::kUnsupported,
       "packing \"coo\" (only \"dense\" is defined)"},
      {"pointer", one(ok + R"(,"pointer":4096})"), StatusCode::kUnsupported, "\"pointer\" tensors"},
      {"metadata not an object", one(ok + R"(,"metadata":[1]})"), StatusCode::kCorruption,
       "\"metadata\" must be a JSON object"},
      {"TENS metadata not an object", R"({"TENS":{"tensors":[],"metadata":3}})", StatusCode::kCorruption,
       "\"TENS.metadata\" must be a JSON object"},
      {"too deep", one(ok + R"(,"metadata":{"a":{"b":1}}})"), StatusCode::kLimitExceeded,
       "label is nested deeper than 3", shallow},
      {"too many tensors", one(ok + "}"), StatusCode::kLimitExceeded, "1 TENS tensors exceed the limit of 0", few},
  };
  for (const D& d : defects) {
    SCOPED_TRACE(d.name);
    EXPECT_STATUS(DecodeLabel(d.label, {f6}, d.opt), d.code, d.message);
  }
}

TEST(ZioInvalid, EncodeErrors) {
  for (DType dt : {DType::kBF16, DType::kF8E5M2, DType::kI4}) {
    TensorSet set;
    set.tensors.push_back(MakeTensor("w", dt, {2}, "ab"));
    EXPECT_STATUS(zio::FromTensorSet(set), StatusCode::kUnsupported, "has no ZIO TENS type");
  }
  zio::Message m;
  m.form = "FLOWS";
  EXPECT_STATUS(zio::EncodeFrames(m), StatusCode::kInvalidArgument, "form \"FLOWS\" is 5 bytes; ZIO forms are 4");
  m.form = "TENS";
  m.level = 9;
  EXPECT_STATUS(zio::Pack(m), StatusCode::kInvalidArgument, "level 9 is above 8");
  zio::Message base;
  base.label = "not json";
  EXPECT_STATUS(zio::AppendTensors(base, Vec2x3()), StatusCode::kInvalidArgument, "base label is not JSON");
  base.label = R"({"TENS":[]})";
  EXPECT_STATUS(zio::AppendTensors(base, Vec2x3()), StatusCode::kInvalidArgument, "\"TENS\" is not an object");
  TensorSet md = Vec2x3();
  md.tensors[0].info.metadata_json = "[1]";
  EXPECT_STATUS(zio::FromTensorSet(md), StatusCode::kInvalidArgument, "tensor 0 \"0\" metadata is not a JSON object");
  TensorSet size = Vec2x3();
  size.tensors[0].info.shape = {2, 4};
  EXPECT_STATUS(zio::FromTensorSet(size), StatusCode::kInvalidArgument,
                "tensor 0 \"0\": 24 data bytes, but shape [2, 4] of f32 needs 32");
  TensorSet utf = Vec2x3("bad\xff");
  EXPECT_STATUS(zio::FromTensorSet(utf), StatusCode::kInvalidArgument, "cannot build the TENS label");
}

TEST(ZioInvalid, EveryTruncationIsAnErrorNeverACrash) {
  const std::string bytes = SharedFixture(kSingle);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    auto r = zio::Decode(Bytes(prefix), nullptr, "t");
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "prefix " << n << ": " << r.status().ToString();
  }
}

// ---- Random round trips, every dtype ZIO can describe ----

TEST(ZioRandom, RoundTripsEveryDtypeBothEncodings) {
  std::mt19937_64 rng(testing::TestSeed());
  const DType dtypes[] = {DType::kF16, DType::kF32, DType::kF64, DType::kI8,  DType::kI16,  DType::kI32, DType::kI64,
                          DType::kU8,  DType::kU16, DType::kU32, DType::kU64, DType::kBool, DType::kC64, DType::kC128};
  const char* pool[] = {"", "a", "b", "0", "1", "weights"};
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    for (int iter = 0; iter < 20; ++iter) {
      TensorSet set;
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        Shape shape = testing::RandomShape(rng, 4, 5);
        set.tensors.push_back(
            MakeTensor(pool[rng() % 6], dt, shape, testing::RandomBytes(rng, *DenseByteSize(dt, shape))));
      }
      if (rng() % 2) set.metadata_json = R"({"seq":)" + std::to_string(iter) + "}";
      auto m = zio::FromTensorSet(set);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      auto packed = zio::Pack(*m);
      ASSERT_TRUE(packed.ok());
      auto frames = zio::EncodeFrames(*m);
      ASSERT_TRUE(frames.ok());
      auto via_frames = zio::DecodeFrames(Spans(*frames), nullptr, "f");
      ASSERT_TRUE(via_frames.ok()) << via_frames.status().ToString();
      for (auto decoded : {zio::Decode(Bytes(*packed), nullptr, "p"), zio::ToTensorSet(*via_frames, "f")}) {
        ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
        ASSERT_EQ(decoded->tensors.size(), set.tensors.size());
        EXPECT_EQ(decoded->metadata_json, set.metadata_json);
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(decoded->tensors[i].info.dtype, dt);
          EXPECT_EQ(decoded->tensors[i].info.shape, set.tensors[i].info.shape);
          EXPECT_EQ(Str(decoded->tensors[i].data), Str(set.tensors[i].data));
        }
        auto again = zio::FromTensorSet(*decoded);  // names and metadata give the same label
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->label, m->label);
      }
    }
  }
}

}  // namespace
}  // namespace tensorsafe
