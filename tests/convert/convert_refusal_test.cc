// Convert's refusals (docs/CONVERT.md §3): what the target cannot hold,
// refused with nothing written until the caller consents; selection of
// tensors, options that do not apply, alignment, and damaged input data
// (convert_test.cc has the round trips).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "convert/convert_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/reader.h"

namespace tensorsafe {
namespace {

using json = nlohmann::json;
using testing::Ext;
using testing::Fast;

class ConvertRefusal : public ::testing::Test {
 protected:
  // Writes a .tsafe holding `set` and converts it with `opt` to out.<ext>.
  Result<ConvertStats> Run(const TensorSet& set, Format to, ConvertOptions opt = Fast()) {
    testing::WriteTsafe(dir_.File("in.tsafe"), set);
    out_ = dir_.File("out." + Ext(to));
    return Convert(dir_.File("in.tsafe"), out_, opt);
  }
  // After a refusal nothing is written: no output, no temporary file.
  void ExpectNothingWritten() {
    EXPECT_FALSE(std::filesystem::exists(out_));
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_.path())) ++files;
    EXPECT_EQ(files, 1u);  // in.tsafe
  }
  TensorSet One(DType d, std::string name = "w", std::string metadata = "") {
    std::mt19937_64 rng(7);
    TensorSet set;
    set.tensors.push_back(testing::RandomTensor(rng, std::move(name), d));
    set.tensors[0].info.metadata_json = std::move(metadata);
    return set;
  }
  testing::TempDir dir_;
  std::string out_;
};

TEST_F(ConvertRefusal, DTypeTheTargetLacksNamesTensorAndDType) {
  TensorSet set = One(DType::kF32, "0");
  std::mt19937_64 rng(3);
  set.tensors.push_back(testing::RandomTensor(rng, "1", DType::kBF16));
  auto r = Run(set, Format::kBtf);
  ASSERT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find("tensor 1 \"1\": dtype bf16 cannot be stored in btf"), std::string::npos)
      << r.status().message();
  ExpectNothingWritten();
}

TEST_F(ConvertRefusal, NpyLosesOneByteFloatsSoRefusesThem) {
  auto r = Run(One(DType::kF8E4M3FN), Format::kNpy);
  ASSERT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("<V1"), std::string::npos) << r.status().message();
  ExpectNothingWritten();
}

TEST_F(ConvertRefusal, NestedMetadataIntoSafetensorsNeedsStringify) {
  TensorSet set = One(DType::kF32);
  set.metadata_json = R"({"name":"m","cfg":{"layers":2},"n":3})";
  auto r = Run(set, Format::kSafetensors);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("\"cfg\""), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--stringify-metadata"), std::string::npos);
  ExpectNothingWritten();
  ConvertOptions opt = Fast();
  opt.stringify_metadata = true;
  auto ok = Run(set, Format::kSafetensors, opt);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto back = safetensors::ReadFile(out_);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(json::parse(back->metadata_json), json::parse(R"({"name":"m","cfg":"{\"layers\":2}","n":"3"})"));
}

TEST_F(ConvertRefusal, TensorMetadataNeedsConsentWhereTheTargetHasNone) {
  for (Format to : {Format::kSafetensors, Format::kNpz, Format::kGguf, Format::kTenbin, Format::kBtf}) {
    SCOPED_TRACE(FormatName(to));
    testing::TempDir dir;
    const std::string name = to == Format::kBtf ? "0" : "w";
    TensorSet set = One(DType::kF32, name, R"({"scale":0.5})");
    testing::WriteTsafe(dir.File("in.tsafe"), set);
    const std::string out = dir.File("out." + Ext(to));
    auto r = Convert(dir.File("in.tsafe"), out, Fast());
    ASSERT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("\"scale\""), std::string::npos) << r.status().message();
    EXPECT_FALSE(std::filesystem::exists(out));
    ConvertOptions opt = Fast();
    opt.drop_tensor_metadata = true;
    ASSERT_TRUE(Convert(dir.File("in.tsafe"), out, opt).ok());
    auto back = ReadTensorSet(out);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->tensors[0].info.metadata_json, "");
  }
}

// An integer wider than 64 bits reads as a double in nlohmann: the targets
// that re-encode metadata refuse it rather than narrow it; .tsafe keeps the
// text as it is.
TEST_F(ConvertRefusal, IntegersWiderThan64BitsAreNotNarrowed) {
  TensorSet set = One(DType::kF32, "w");
  set.metadata_json = R"({"ok":1,"big":18446744073709551617})";
  for (Format to : {Format::kGguf, Format::kZio, Format::kSafetensors}) {
    SCOPED_TRACE(FormatName(to));
    ConvertOptions opt = Fast();
    opt.stringify_metadata = to == Format::kSafetensors;
    auto r = Run(set, to, opt);
    ASSERT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("metadata key \"big\" holds the integer 18446744073709551617, wider than 64 "
                                        "bits, which " +
                                        std::string(FormatName(to)) + " would narrow to a double"),
              std::string::npos)
        << r.status().message();
    ExpectNothingWritten();
  }
  set.tensors[0].info.metadata_json = R"({"n":-99999999999999999999})";
  set.metadata_json = "";
  auto z = Run(set, Format::kZio);
  ASSERT_EQ(z.status().code(), StatusCode::kUnsupported) << z.status().ToString();
  EXPECT_NE(z.status().message().find("tensor 0 \"w\": metadata key \"n\" holds the integer -99999999999999999999"),
            std::string::npos)
      << z.status().message();
  auto t = Run(set, Format::kTsafe);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto back = ReadTensorSet(out_);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tensors[0].info.metadata_json, R"({"n":-99999999999999999999})");
}

// safetensors takes a zero-size shape whose other dims multiply past 64
// bits; tsafe does not (FORMAT.md R30): refused as unsupported, naming it.
TEST(Convert, ShapesPast64BitsAreUnsupported) {
  testing::TempDir dir;
  std::string header = R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  testing::WriteFileBytes(dir.File("a.safetensors"), file + header);
  ASSERT_TRUE(ReadTensorSet(dir.File("a.safetensors")).ok());
  auto r = Convert(dir.File("a.safetensors"), dir.File("b.tsafe"), Fast());
  ASSERT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
  EXPECT_NE(r.status().message().find("tensor 0 \"a\": element count of shape [0, 4294967296, 4294967296] "
                                      "overflows 64 bits, so tsafe cannot hold it"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir.File("b.tsafe")));
}

TEST_F(ConvertRefusal, FileMetadataNeedsConsentWhereTheTargetHasNone) {
  TensorSet set = One(DType::kF32, "0");
  set.metadata_json = R"({"a":"b"})";
  for (Format to : {Format::kNpy, Format::kNpz, Format::kTenbin, Format::kBtf}) {
    SCOPED_TRACE(FormatName(to));
    auto r = Run(set, to);
    ASSERT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().ToString();
    EXPECT_NE(r.status().message().find("--drop-metadata"), std::string::npos);
    ExpectNothingWritten();
    ConvertOptions opt = Fast();
    opt.drop_metadata = true;
    ASSERT_TRUE(Run(set, to, opt).ok());
    std::filesystem::remove(out_);
  }
}

TEST_F(ConvertRefusal, NamesTheTargetCannotHold) {
  TensorSet set = One(DType::kF32, "a_long_name");
  auto r = Run(set, Format::kTenbin);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("\"a_long_name\""), std::string::npos) << r.status().message();
  ExpectNothingWritten();
  auto b = Run(One(DType::kF32, "w"), Format::kBtf);
  ASSERT_EQ(b.status().code(), StatusCode::kInvalidArgument) << b.status().ToString();
  EXPECT_NE(b.status().message().find("read back as \"0\""), std::string::npos) << b.status().message();
  ExpectNothingWritten();
  ConvertOptions opt = Fast();
  opt.drop_names = true;
  ASSERT_TRUE(Run(set, Format::kTenbin, opt).ok());
  auto back = ReadTensorSet(out_);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tensors[0].info.name, "0");
}

TEST_F(ConvertRefusal, NpyHoldsOneTensorAndSelectionPicksIt) {
  TensorSet set = One(DType::kF32, "a");
  std::mt19937_64 rng(5);
  set.tensors.push_back(testing::RandomTensor(rng, "b", DType::kI64));
  auto r = Run(set, Format::kNpy);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  ExpectNothingWritten();
  ConvertOptions opt = Fast();
  opt.tensors = {"b"};
  ASSERT_TRUE(Run(set, Format::kNpy, opt).ok());
  auto back = ReadTensorSet(out_);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(testing::BytesOf(back->tensors[0]), testing::BytesOf(set.tensors[1]));
  opt.tensors = {"nope"};
  EXPECT_EQ(Run(set, Format::kNpy, opt).status().code(), StatusCode::kNotFound);
}

TEST_F(ConvertRefusal, SelectionKeepsItsOrder) {
  TensorSet set = One(DType::kF32, "a");
  std::mt19937_64 rng(5);
  set.tensors.push_back(testing::RandomTensor(rng, "b", DType::kI64));
  set.tensors.push_back(testing::RandomTensor(rng, "c", DType::kU8));
  ConvertOptions opt = Fast();
  opt.tensors = {"c", "a"};
  ASSERT_TRUE(Run(set, Format::kNpz, opt).ok());
  auto back = ReadTensorSet(out_);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].info.name, "c");
  EXPECT_EQ(back->tensors[1].info.name, "a");
  opt.tensors = {"a", "a"};
  EXPECT_EQ(Run(set, Format::kNpz, opt).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ConvertRefusal, OptionsThatDoNotApply) {
  ConvertOptions opt = Fast();
  opt.alignment = 128;
  EXPECT_EQ(Run(One(DType::kF32), Format::kSafetensors, opt).status().code(), StatusCode::kInvalidArgument);
  opt = Fast();
  opt.compress = true;
  EXPECT_EQ(Run(One(DType::kF32), Format::kTsafe, opt).status().code(), StatusCode::kInvalidArgument);
  testing::WriteTsafe(dir_.File("in.tsafe"), One(DType::kF32));
  auto r = Convert(dir_.File("in.tsafe"), dir_.File("out.bin"), Fast());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("out.bin"), std::string::npos);
  opt = Fast();
  opt.to = Format::kNpz;
  EXPECT_TRUE(Convert(dir_.File("in.tsafe"), dir_.File("out.bin"), opt).ok());
  EXPECT_EQ(*DetectFormat(dir_.File("out.bin")), Format::kNpz);
}

TEST_F(ConvertRefusal, AlignmentReachesTsafeAndGguf) {
  ConvertOptions opt = Fast();
  opt.alignment = 4096;
  ASSERT_TRUE(Run(One(DType::kF32), Format::kTsafe, opt).ok());
  auto r = Reader::Open(out_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->summary().alignment, 4096u);
  EXPECT_EQ((*r)->Find("w")->data_offset % 4096, 0u);
  ASSERT_TRUE(Run(One(DType::kF32), Format::kGguf, opt).ok());
  auto g = gguf::ReadFile(out_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(json::parse(g->metadata_json)["general.alignment"], 4096);
  EXPECT_EQ(g->tensors[0].info.data_offset % 4096, 0u);
}

TEST_F(ConvertRefusal, DamagedTsafeDataIsNotCarriedOver) {
  TensorSet set = One(DType::kF32);
  testing::WriteTsafe(dir_.File("in.tsafe"), set);
  auto r = Reader::Open(dir_.File("in.tsafe"));
  ASSERT_TRUE(r.ok());
  const std::uint64_t at = (*r)->Find("w")->data_offset;
  r->reset();
  std::string bytes = testing::ReadFileBytes(dir_.File("in.tsafe"));
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  testing::WriteFileBytes(dir_.File("in.tsafe"), bytes);
  out_ = dir_.File("out.npz");
  auto bad = Convert(dir_.File("in.tsafe"), out_, Fast());
  ASSERT_EQ(bad.status().code(), StatusCode::kCorruption) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("\"w\""), std::string::npos);
  ExpectNothingWritten();
  ConvertOptions opt = Fast();
  opt.verify = false;
  EXPECT_TRUE(Convert(dir_.File("in.tsafe"), out_, opt).ok());
}
}  // namespace
}  // namespace tensorsafe
