// Convert (convert.h): random round trips native -> X -> native for every
// format and every dtype it holds, the dtype table against the codecs, file
// metadata kept, progress and the reference writers' files.
// convert_refusal_test.cc has the refusals of docs/CONVERT.md §3, selection
// and options.
#include "tensorsafe/convert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/convert_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/reader.h"

namespace tensorsafe {
namespace {

using json = nlohmann::json;
using testing::Ext;
using testing::Fast;

const Format kAllFormats[] = {Format::kTsafe, Format::kSafetensors, Format::kNpy, Format::kNpz,
                              Format::kGguf,  Format::kTenbin,      Format::kBtf, Format::kZio};

// What a format keeps of file metadata, and the metadata a test gives it.
std::string MetadataFor(Format f) {
  switch (f) {
    case Format::kTsafe:
    case Format::kZio: return R"({"cfg":{"dims":[8,4],"ok":true},"s":"x"})";
    case Format::kSafetensors: return R"({"framework":"np","s":"x"})";
    case Format::kGguf: return R"({"general.name":"m","n":3})";
    default: return "";
  }
}

// The file metadata after a trip through `f`, compared without GGUF's
// type map (which the trip adds so that gguf -> tsafe -> gguf is exact).
std::string ComparableMetadata(const std::string& text) {
  if (text.empty()) return "";
  json j = json::parse(text);
  j.erase("tensorsafe.gguf_types");
  return j.dump();
}

std::string NameFor(Format f, std::size_t i, DType d) {
  if (f == Format::kBtf) return std::to_string(i);
  if (f == Format::kTenbin) return "t" + std::to_string(i);
  return "layer." + std::to_string(i) + "/" + std::string(DTypeName(d));
}

TensorSet RandomSet(std::mt19937_64& rng, Format f, const std::vector<DType>& dtypes) {
  TensorSet set;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    Tensor t = testing::RandomTensor(rng, NameFor(f, i, dtypes[i]), dtypes[i]);
    if (f == Format::kTsafe || f == Format::kZio) t.info.metadata_json = json{{"k", i}, {"unit", "m"}}.dump();
    set.tensors.push_back(std::move(t));
  }
  set.metadata_json = MetadataFor(f);
  return set;
}

void ExpectSameTensors(const TensorSet& want, const TensorSet& got, bool by_position) {
  ASSERT_EQ(want.tensors.size(), got.tensors.size());
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    const Tensor& w = want.tensors[i];
    const Tensor* g = nullptr;
    for (const Tensor& c : got.tensors) {
      if (c.info.name == w.info.name) g = &c;
    }
    if (by_position) g = &got.tensors[i];
    ASSERT_NE(g, nullptr) << "missing " << w.info.name;
    SCOPED_TRACE(w.info.name + " " + std::string(DTypeName(w.info.dtype)));
    EXPECT_EQ(g->info.dtype, w.info.dtype);
    EXPECT_EQ(g->info.shape, w.info.shape);
    EXPECT_EQ(testing::BytesOf(*g), testing::BytesOf(w));
    EXPECT_EQ(g->info.metadata_json, w.info.metadata_json);
  }
}

// native -> X -> native gives back every tensor, and X -> native -> X gives
// back X's bytes, for every dtype X holds.
TEST(Convert, RandomRoundTripsThroughEveryFormat) {
  std::mt19937_64 rng(testing::TestSeed());
  for (Format f : kAllFormats) {
    SCOPED_TRACE(FormatName(f));
    std::vector<DType> dtypes;
    for (DType d : testing::AllDTypes()) {
      if (FormatHoldsDType(f, d)) dtypes.push_back(d);
    }
    ASSERT_FALSE(dtypes.empty());
    // .npy holds one tensor: one file per dtype.
    std::vector<std::vector<DType>> groups;
    if (f == Format::kNpy) {
      for (DType d : dtypes) groups.push_back({d});
    } else {
      groups.push_back(dtypes);
    }
    for (const auto& group : groups) {
      testing::TempDir dir;
      TensorSet set = RandomSet(rng, f, group);
      if (f == Format::kNpy) set.tensors[0].info.name = "x";  // the file's stem
      const std::string a = dir.File("a.tsafe"), x = dir.File("x." + Ext(f)), b = dir.File("b.tsafe"),
                        x2 = dir.File("x2." + Ext(f));
      testing::WriteTsafe(a, set);
      auto s1 = Convert(a, x, Fast());
      ASSERT_TRUE(s1.ok()) << s1.status().ToString();
      EXPECT_EQ(s1->from, Format::kTsafe);
      EXPECT_EQ(s1->to, f);
      EXPECT_EQ(s1->tensor_count, group.size());
      EXPECT_EQ(s1->file_size, std::filesystem::file_size(x));
      auto s2 = Convert(x, b, Fast());
      ASSERT_TRUE(s2.ok()) << s2.status().ToString();
      EXPECT_EQ(s2->from, f);
      auto back = ReadTensorSet(b);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      ExpectSameTensors(set, *back, /*by_position=*/f == Format::kNpy);
      EXPECT_EQ(ComparableMetadata(back->metadata_json), ComparableMetadata(set.metadata_json));
      auto s3 = Convert(b, x2, Fast());
      ASSERT_TRUE(s3.ok()) << s3.status().ToString();
      EXPECT_EQ(testing::ReadFileBytes(x2), testing::ReadFileBytes(x)) << "X -> tsafe -> X changed the bytes";
    }
  }
}

// Every ordered pair X -> Y converts directly, over random tensors of every
// dtype both hold, named by position (the names every format can hold; an
// .npy file named "0.npy" holds tensor "0").
TEST(Convert, EveryPairConvertsDirectly) {
  std::mt19937_64 rng(testing::TestSeed());
  for (Format from : kAllFormats) {
    for (Format to : kAllFormats) {
      SCOPED_TRACE(std::string(FormatName(from)) + " -> " + std::string(FormatName(to)));
      std::vector<DType> dtypes;
      for (DType d : testing::AllDTypes()) {
        if (FormatHoldsDType(from, d) && FormatHoldsDType(to, d)) dtypes.push_back(d);
      }
      ASSERT_FALSE(dtypes.empty());
      if (from == Format::kNpy || to == Format::kNpy) dtypes = {dtypes[rng() % dtypes.size()]};
      TensorSet set;
      for (std::size_t i = 0; i < dtypes.size(); ++i) {
        set.tensors.push_back(testing::RandomTensor(rng, std::to_string(i), dtypes[i]));
      }
      testing::TempDir dir;
      std::filesystem::create_directory(dir.path() / "x");
      std::filesystem::create_directory(dir.path() / "y");
      const std::string a = dir.File("a.tsafe"), x = dir.File("x/0." + Ext(from)), y = dir.File("y/0." + Ext(to));
      testing::WriteTsafe(a, set);
      auto sx = Convert(a, x, Fast());
      ASSERT_TRUE(sx.ok()) << sx.status().ToString();
      ConvertOptions opt = Fast();
      TensorSet want = set;
      if (from == Format::kSafetensors && to == Format::kBtf) {
        // safetensors sorted the tensors, so "0", "1", ... are no longer
        // their positions, which is all BTF keeps: that needs consent.
        auto refused = Convert(x, y, opt);
        if (set.tensors.size() > 1) EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
        opt.drop_names = true;
        want = *ReadTensorSet(x);
        for (std::size_t i = 0; i < want.tensors.size(); ++i) want.tensors[i].info.name = std::to_string(i);
      }
      auto sy = Convert(x, y, opt);
      ASSERT_TRUE(sy.ok()) << sy.status().ToString();
      auto back = ReadTensorSet(y);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      ExpectSameTensors(want, *back, /*by_position=*/false);  // by name: safetensors sorts
    }
  }
}

// The dtype table of convert.h agrees with the codecs: a dtype it says a
// format holds encodes and decodes as itself; any other fails to encode or
// comes back as another dtype.
TEST(Convert, DTypeTableMatchesTheCodecs) {
  for (Format f : kAllFormats) {
    if (f == Format::kTsafe) continue;  // holds every dtype by definition (FORMAT.md §5)
    for (DType d : testing::AllDTypes()) {
      SCOPED_TRACE(std::string(FormatName(f)) + " " + std::string(DTypeName(d)));
      std::mt19937_64 rng(1);
      TensorSet set;
      set.tensors.push_back(testing::RandomTensor(rng, f == Format::kBtf ? "0" : "x", d, 1));
      testing::TempDir dir;
      const std::string path = dir.File("x." + Ext(f));
      Status w;
      switch (f) {
        case Format::kSafetensors: w = safetensors::WriteFile(path, set); break;
        case Format::kNpy: w = npy::WriteFile(path, set); break;
        case Format::kNpz: w = npz::WriteFile(path, set); break;
        case Format::kGguf: w = gguf::WriteFile(path, set); break;
        case Format::kTenbin: w = tenbin::WriteFile(path, set); break;
        case Format::kBtf: w = btf::WriteFile(path, set); break;
        case Format::kZio: w = zio::WriteFile(path, set); break;
        default: FAIL();
      }
      bool same = false;
      if (w.ok()) {
        auto back = ReadTensorSet(path, f);
        same = back.ok() && back->tensors.size() == 1 && back->tensors[0].info.dtype == d;
      }
      EXPECT_EQ(FormatHoldsDType(f, d), same) << w.ToString();
    }
  }
}

// safetensors tells `"__metadata__":{}` ({} to its reader) from no key
// (None), and .tsafe an empty object from none: both survive every hop, and
// a target without file metadata drops {} without asking.
TEST(Convert, EmptyFileMetadataIsKeptWhereTheTargetTellsItApart) {
  testing::TempDir dir;
  std::mt19937_64 rng(11);
  for (const std::string md : {"{}", ""}) {
    SCOPED_TRACE("metadata '" + md + "'");
    TensorSet set;
    set.tensors.push_back(testing::RandomTensor(rng, "w", DType::kF32));
    set.metadata_json = md;
    const std::string st = dir.File("a.safetensors"), ts = dir.File("b.tsafe"), st2 = dir.File("c.safetensors"),
                      st3 = dir.File("d.safetensors"), npy = dir.File("w.npy");
    ASSERT_TRUE(safetensors::WriteFile(st, set).ok());
    const std::string original = testing::ReadFileBytes(st);
    EXPECT_EQ(original.find("\"__metadata__\":{}") != std::string::npos, md == "{}");
    ASSERT_TRUE(Convert(st, ts, Fast()).ok());
    auto r = Reader::Open(ts);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)->summary().metadata_bytes, md.size());
    ASSERT_TRUE(Convert(ts, st2, Fast()).ok());
    EXPECT_EQ(testing::ReadFileBytes(st2), original) << "st -> tsafe -> st";
    ASSERT_TRUE(Convert(st, st3, Fast()).ok());
    EXPECT_EQ(testing::ReadFileBytes(st3), original) << "st -> st";
    auto n = Convert(ts, npy, Fast());
    EXPECT_TRUE(n.ok()) << n.status().ToString();
  }
}

// GGUF's value types ride in the reserved key tensorsafe.gguf_types; through
// safetensors with --stringify-metadata it becomes JSON text, which the GGUF
// writer takes back: gguf -> safetensors -> gguf keeps the bytes.
TEST(Convert, GgufTypesSurviveStringifiedSafetensors) {
  testing::TempDir dir;
  std::mt19937_64 rng(5);
  TensorSet set;
  set.tensors.push_back(testing::RandomTensor(rng, "w", DType::kF32));
  set.metadata_json =
      R"({"general.name":"m","n":7,"v":[1,2],"tensorsafe.gguf_types":{"n":"uint8","v":"array<int16>"}})";
  const std::string g = dir.File("a.gguf"), st = dir.File("b.safetensors"), g2 = dir.File("c.gguf");
  Status w = gguf::WriteFile(g, set);
  ASSERT_TRUE(w.ok()) << w.ToString();
  ConvertOptions opt = Fast();
  opt.stringify_metadata = true;
  auto a = Convert(g, st, opt);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Convert(st, g2, Fast());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(testing::ReadFileBytes(g2), testing::ReadFileBytes(g));
}

TEST(Convert, ProgressIsMonotoneAndEndsDone) {
  testing::TempDir dir;
  std::mt19937_64 rng(9);
  TensorSet set;
  for (int i = 0; i < 3; ++i) {
    Tensor t = testing::RandomTensor(rng, "t" + std::to_string(i), DType::kI8, 0);  // every format has i8
    auto buf = std::make_shared<std::vector<std::byte>>(std::size_t{10} << 20, std::byte{1});
    t.info.shape = {buf->size()};
    t.data = std::span<const std::byte>(buf->data(), buf->size());
    t.owner = buf;
    set.tensors.push_back(t);
  }
  testing::WriteTsafe(dir.File("in.tsafe"), set);
  for (Format f : kAllFormats) {
    if (f == Format::kNpy) continue;
    SCOPED_TRACE(FormatName(f));
    std::vector<ConvertProgress> calls;
    ConvertOptions opt = Fast();
    opt.drop_names = f == Format::kBtf;
    opt.progress = [&](const ConvertProgress& p) { calls.push_back(p); };
    auto s = Convert(dir.File("in.tsafe"), dir.File("out." + Ext(f)), opt);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_GE(calls.size(), 3u);  // 30 MiB: a report every 4 MiB, then done
    for (std::size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].bytes_written, calls[i - 1].bytes_written);
    EXPECT_TRUE(calls.back().done);
    for (std::size_t i = 0; i + 1 < calls.size(); ++i) EXPECT_FALSE(calls[i].done);
    EXPECT_EQ(calls.back().bytes_total, std::uint64_t{30} << 20);
    EXPECT_EQ(calls.back().tensor_count, 3u);
    EXPECT_GE(calls.back().bytes_written, calls.back().bytes_total);
  }
}

// webdataset writes infos holding NUL bytes and reads "\0x" as "x"
// (tests/golden/tenbin/README.md). Converting such a file must not take
// the names the tenbin reader gives for ones that would not read back.
TEST(Convert, TenbinInfosHoldingNulBytesConvertBackToTheSameBytes) {
  const std::string golden = std::string(TS_SOURCE_DIR) + "/tests/golden/tenbin/nul_infos.ten";
  testing::TempDir dir;
  auto direct = Convert(golden, dir.File("copy.ten"), Fast());
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ(testing::ReadFileBytes(dir.File("copy.ten")), testing::ReadFileBytes(golden));
  ASSERT_TRUE(Convert(golden, dir.File("t.tsafe"), Fast()).ok());
  auto mid = ReadTensorSet(dir.File("t.tsafe"));
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(mid->tensors[0].info.name, "x");
  EXPECT_EQ(mid->tensors[1].info.name, "1");
  ConvertOptions opt = Fast();
  opt.to = Format::kTenbin;
  auto back = Convert(dir.File("t.tsafe"), dir.File("back"), opt);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(testing::ReadFileBytes(dir.File("back")), testing::ReadFileBytes(golden));
}

// The reference writers' files in ../shared/fixtures convert to tsafe and
// back to the same bytes where our writer matches theirs (formats.md §1.4,
// §3.3), and to the same tensors otherwise.
TEST(Convert, FixturesFromTheReferencesRoundTrip) {
  const std::string fx = std::string(TS_SHARED_DIR) + "/fixtures/";
  struct Case {
    std::string file;
    bool same_bytes;
  };
  const Case cases[] = {
      {"btf/vec_B1_rmd_f32_2x3.btf", true},
      {"btf/vec_B2_rmd_i32_u8_padding.btf", true},
      {"btf/vec_B3_coo_i64_2x4.btf", true},
      {"btf/test_tensor.btf", true},
      {"tenbin/vec_wds_2x3f4_x.ten", true},
      {"tenbin/000000.ten", true},
      {"zio/vec_zio_tens_2x3f4_single_part.bin", false},  // coordinates are not kept
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    testing::TempDir dir;
    auto in = ReadTensorSet(fx + c.file);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    const Format f = *DetectFormat(fx + c.file);
    ASSERT_TRUE(Convert(fx + c.file, dir.File("t.tsafe"), Fast()).ok());
    ConvertOptions opt = Fast();
    opt.to = f;
    auto s = Convert(dir.File("t.tsafe"), dir.File("back"), opt);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    if (c.same_bytes) EXPECT_EQ(testing::ReadFileBytes(dir.File("back")), testing::ReadFileBytes(fx + c.file));
    auto back = ReadTensorSet(dir.File("back"), f);
    ASSERT_TRUE(back.ok());
    ExpectSameTensors(*in, *back, true);
  }
}

TEST(Convert, ParseFormatNamesAndAliases) {
  EXPECT_EQ(ParseFormat("SafeTensors"), Format::kSafetensors);
  EXPECT_EQ(ParseFormat("st"), Format::kSafetensors);
  EXPECT_EQ(ParseFormat("ten"), Format::kTenbin);
  EXPECT_EQ(ParseFormat("zio"), Format::kZio);
  EXPECT_EQ(ParseFormat("unknown"), std::nullopt);
  EXPECT_EQ(ParseFormat(""), std::nullopt);
  for (Format f : kAllFormats) EXPECT_EQ(ParseFormat(FormatName(f)), f);
}

}  // namespace
}  // namespace tensorsafe
