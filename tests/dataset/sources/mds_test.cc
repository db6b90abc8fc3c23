// MDS datasets: golden datasets written by mosaicml-streaming (tests/golden/
// mds/make.py) read sample for sample as its StreamingDataset reads them, and
// each reader check of docs/formats/mds.md with its code and message.
#include "tensorsafe/dataset/mds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "dataset/internal.h"
#include "dataset/sources/mds/internal.h"
#include "formats/sample_json.h"
#include "support/mds_files.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
using dataset::FieldKind;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

const std::string kGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/mds/";

// Reads every sample of `dir` and compares with expected.jsonl.
void ExpectMatchesReference(const std::string& dir, const std::string& cache) {
  auto ds = mds::OpenIndex(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  auto expected = testing::ReadJsonLines(dir + "/expected.jsonl");
  ASSERT_EQ(ds->total_samples, expected.size());
  mds::ShardOptions opt;
  opt.cache_dir = cache;
  std::size_t global = 0;
  std::vector<dataset::FieldView> views;
  for (std::size_t k = 0; k < ds->shards.size(); ++k) {
    auto src = mds::OpenShard(*ds, k, opt);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i, ++global) {
      ASSERT_TRUE((*src)->Read(i, views).ok());
      nlohmann::json got = testing::SampleJson(views);
      nlohmann::json want = expected[global]["fields"];
      // PNG: PIL re-encodes on read; we hand out the stored file's bytes.
      EXPECT_EQ(got["img"]["kind"], "bytes");
      EXPECT_EQ(got["img"]["hex"].get<std::string>().substr(0, 8), "89504e47");
      got.erase("img");
      want.erase("img");
      EXPECT_EQ(got, want) << "sample " << global;
    }
  }
  EXPECT_EQ(global, expected.size());
}

TEST(MdsGolden, PlainDatasetMatchesStreamingDataset) {
  TempDir cache;
  ExpectMatchesReference(kGolden + "plain", cache.path().string());
}

TEST(MdsGolden, ZstdDatasetDecompressesIntoTheCacheAndMatches) {
  TempDir cache;
  ExpectMatchesReference(kGolden + "zstd", cache.path().string());
  // Named by the index's strongest xxh digest of the raw shard (mds.md).
  EXPECT_TRUE(fs::exists(cache.File("raw-xxh3_64-43cb3bea525dcb2d-2466.mds")));
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(cache.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 2u) << "temporary files left behind";
  // The second time the cached raw shard is used (even with the zip gone).
  TempDir copy;
  fs::copy(kGolden + "zstd", copy.path(), fs::copy_options::recursive);
  fs::remove(copy.File("shard.00000.mds.zstd"));
  auto ds = mds::OpenIndex(copy.path().string());
  ASSERT_TRUE(ds.ok());
  mds::ShardOptions opt;
  opt.cache_dir = cache.path().string();
  opt.verify_existing = true;
  EXPECT_TRUE(mds::OpenShard(*ds, 0, opt).ok());
}

// The other codecs of compression.py (tests/golden/mds/make.py): the same
// samples as plain/, decompressed into the cache under the name mds.md
// gives (a raw digest where the index has one, else the .bz2 file's identity).
struct GoldenCodec {
  const char* dir;
  const char* cache_name;  // of shard 0; "at-" is followed by a digest of the zip's identity
};

class MdsGoldenCodec : public ::testing::TestWithParam<GoldenCodec> {};

TEST_P(MdsGoldenCodec, DecompressesIntoTheCacheAndMatches) {
  TempDir cache;
  ExpectMatchesReference(kGolden + GetParam().dir, cache.path().string());
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(cache.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u) << "temporary files left behind";
  const std::string want = GetParam().cache_name;
  EXPECT_TRUE(names[0] == want || (want == "at-" && names[0].starts_with("at-"))) << names[0];
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, MdsGoldenCodec,
    ::testing::Values(GoldenCodec{"gz", "raw-xxh64-74bead15590c7da7-2443.mds"}, GoldenCodec{"bz2", "at-"},
                      GoldenCodec{"br", "raw-xxh3_64-697b7e5cbfe4e3f7-2455.mds"},
                      GoldenCodec{"snappy", "raw-xxh128-99b5c2a0d5cef78ef7c580a716405ca9-2448.mds"}),
    [](const auto& info) { return std::string(info.param.dir); });

TEST(MdsGolden, ColumnsMapToFields) {
  TempDir cache;
  auto ds = mds::OpenIndex(kGolden + "plain");
  ASSERT_TRUE(ds.ok());
  auto src = mds::OpenShard(*ds, 0);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const dataset::Schema& s = (*src)->schema();
  auto kind = [&](const char* n) { return s.Find(n)->kind; };
  EXPECT_EQ(kind("blob"), FieldKind::kBytes);
  EXPECT_EQ(kind("img"), FieldKind::kBytes);
  EXPECT_EQ(kind("name"), FieldKind::kStr);
  EXPECT_EQ(kind("sd"), FieldKind::kStr);
  EXPECT_EQ(kind("js"), FieldKind::kJson);
  EXPECT_EQ(kind("id"), FieldKind::kInt);
  EXPECT_EQ(s.Find("s_float16")->dtype, DType::kF16);
  EXPECT_TRUE(s.Find("s_uint64")->shape.empty());
  EXPECT_EQ(s.Find("fixed")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(s.Find("vec")->dtype, DType::kI16);
  EXPECT_EQ(s.Find("vec")->shape, (std::vector<std::int64_t>{dataset::kAnyDim}));
  EXPECT_EQ(s.Find("any")->dtype, DType::kF64);  // from sample 0
  EXPECT_EQ(s.Find("any")->shape, (std::vector<std::int64_t>{dataset::kAnyDim, dataset::kAnyDim}));
  EXPECT_TRUE(s.Find("fixed")->fixed_size());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read((*src)->num_samples(), v), StatusCode::kOutOfRange, "sample");
}

TEST(MdsInvalid, PickleColumnsAreRefused) {
  EXPECT_STATUS(mds::OpenIndex(kGolden + "pkl").status(), StatusCode::kUnsupported,
                "column \"obj\": encoding \"pkl\" is pickle, which tensorsafe never decodes");
}

// Mutates plain/index.json and parses it.
Status ParseMutated(const std::function<void(nlohmann::json&)>& mutate, mds::Limits limits = {}) {
  nlohmann::json j = nlohmann::json::parse(ReadFileBytes(kGolden + "plain/index.json"));
  mutate(j);
  std::string text = j.dump();
  return mds::ParseIndex({reinterpret_cast<const std::byte*>(text.data()), text.size()}, "index.json", limits).status();
}

TEST(MdsInvalid, IndexFields) {
  EXPECT_TRUE(ParseMutated([](nlohmann::json&) {}).ok());
  EXPECT_STATUS(ParseMutated([](auto& j) { j["version"] = 3; }), StatusCode::kUnsupported,
                "index.json: index version 3 (only 2 is read)");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["version"] = 1; }), StatusCode::kUnsupported,
                "shard 0: version 1");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][1]["format"] = "jsonl"; }), StatusCode::kUnsupported,
                "shard 1: format \"jsonl\" (only \"mds\" is read)");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_sizes"][3] = 4; }), StatusCode::kCorruption,
                "shard 0 column \"id\": column size 4 contradicts encoding \"int\" (8)");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_sizes"][2] = nullptr; }), StatusCode::kCorruption,
                "column \"fixed\": column size null contradicts encoding \"ndarray:float32:2,3\" (24)");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["raw_data"]["basename"] = "../x.mds"; }),
                StatusCode::kCorruption, "shard 0 raw_data: unsafe basename \"../x.mds\"");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["raw_data"]["basename"] = "/etc/passwd"; }),
                StatusCode::kCorruption, "absolute path");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["compression"] = "lz4"; }), StatusCode::kUnsupported,
                "shard 0: compression \"lz4\" (read: br, bz2, gz, snappy, zstd)");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["compression"] = "zstd:99"; }), StatusCode::kCorruption,
                "zstd levels are 1..22");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["compression"] = "zstd"; }), StatusCode::kCorruption,
                "compressed but zip_data is null");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["samples"] = -1; }), StatusCode::kCorruption,
                "\"samples\" is not a non-negative integer");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["samples"] = 1ull << 32; }), StatusCode::kCorruption,
                "\"samples\" = 4294967296 exceeds 4294967295");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_encodings"][0] = "float128"; }),
                StatusCode::kUnsupported, "unknown encoding \"float128\"");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_encodings"][0] = "ndarray:bool"; }),
                StatusCode::kUnsupported, "ndarray dtype \"bool\"");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_encodings"][2] = "ndarray:float32:0,3"; }),
                StatusCode::kCorruption, "shape must be positive decimal dims");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0].erase("raw_data"); }), StatusCode::kCorruption,
                "shard 0: missing \"raw_data\"");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_names"].erase(0); }), StatusCode::kCorruption,
                "22 column_encodings, 21 column_names, 22 column_sizes");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_names"][1] = "any"; }), StatusCode::kCorruption,
                "column \"any\" appears twice");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][1]["raw_data"]["basename"] = "shard.00000.mds"; }),
                StatusCode::kCorruption, "is named by another shard too");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"] = 5; }), StatusCode::kCorruption, "\"shards\" is missing");
  mds::Limits one;
  one.max_shards = 1;
  EXPECT_STATUS(ParseMutated([](auto&) {}, one), StatusCode::kLimitExceeded, "2 shards exceed the limit 1");
  std::string bad = "{\"version\": 2, \"shards\": [";
  EXPECT_STATUS(mds::ParseIndex({reinterpret_cast<const std::byte*>(bad.data()), bad.size()}, "i").status(),
                StatusCode::kCorruption, "i: not JSON");
  std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_STATUS(mds::ParseIndex({reinterpret_cast<const std::byte*>(deep.data()), deep.size()}, "i").status(),
                StatusCode::kLimitExceeded, "nested deeper than 32");
}

// ndarray encodings as MosaicML reads them: encodings.py NDArray.from_str
// takes Python's int() of each dim, so MDSWriter accepts (and writes into
// index.json) "2, 3", "+2,03" or "1_0"; "ndarray:" has no arguments and is
// "ndarray". Verdicts from mosaicml-streaming 0.13.0's is_mds_encoding and
// get_mds_encoded_size.
TEST(MdsEncodings, NdarrayArgumentsAsPythonReadsThem) {
  struct Case {
    const char* encoding;
    std::vector<std::int64_t> shape;
    std::int64_t size;
  };
  for (const Case& c : {Case{"ndarray:float32:2, 3", {2, 3}, 24}, Case{"ndarray:float32: 2,3 ", {2, 3}, 24},
                        Case{"ndarray:float32:+2,03", {2, 3}, 24}, Case{"ndarray:uint8:1_0", {10}, 10},
                        Case{"ndarray:int8:\t4\n", {4}, 4}}) {
    mds::Column col;
    Status s = mds::internal::ParseEncoding(c.encoding, {}, &col);
    ASSERT_TRUE(s.ok()) << c.encoding << ": " << s.ToString();
    EXPECT_EQ(col.codec, mds::ColumnCodec::kNdarray) << c.encoding;
    EXPECT_TRUE(col.dtype_fixed && col.shape_fixed) << c.encoding;
    EXPECT_EQ(col.shape, c.shape) << c.encoding;
    EXPECT_EQ(col.size, c.size) << c.encoding;
  }
  mds::Column any;
  ASSERT_TRUE(mds::internal::ParseEncoding("ndarray:", {}, &any).ok());
  EXPECT_EQ(any.codec, mds::ColumnCodec::kNdarray);
  EXPECT_FALSE(any.dtype_fixed || any.shape_fixed);
  EXPECT_EQ(any.size, -1);
  for (const char* bad : {"ndarray:float32:1__0", "ndarray:float32:_1", "ndarray:float32:1_", "ndarray:float32:-2",
                          "ndarray:float32:-0", "ndarray:float32:2,", "ndarray:float32:", "ndarray:float32:2 3",
                          "ndarray:float32:0x10", "ndarray:float32:+-2", "ndarray:float32:2,3:4"}) {
    SCOPED_TRACE(bad);
    mds::Column col;
    EXPECT_STATUS(mds::internal::ParseEncoding(bad, {}, &col), StatusCode::kCorruption,
                  "shape must be positive decimal dims");
  }
  // Through the index: the size must still be the shape's.
  EXPECT_TRUE(ParseMutated([](auto& j) { j["shards"][0]["column_encodings"][2] = "ndarray:float32:2, 3"; }).ok());
  EXPECT_TRUE(ParseMutated([](auto& j) { j["shards"][0]["column_encodings"][0] = "ndarray:"; }).ok());
}

// compression.py names its algorithms by extension, alone or with a level
// as f"{extension}:{level}" in the family's range (br 0..11, bz2 1..9, gz
// 0..9, zstd 1..22; snappy has no levels): nothing else is one
// (is_compression("zstd:01") is False). Every spelling it has is read.
TEST(MdsInvalid, CompressionSpelledOtherwise) {
  auto with = [](const std::string& c) {
    return ParseMutated([c](auto& j) {
      j["shards"][0]["compression"] = c;
      j["shards"][0]["zip_data"] = {{"basename", "shard.00000.mds.z"}, {"bytes", 10}, {"hashes", {}}};
    });
  };
  struct Family {
    const char* name;
    int min, max;  // -1: no levels
  };
  std::size_t accepted = 0;
  for (const Family& f : {Family{"br", 0, 11}, Family{"bz2", 1, 9}, Family{"gz", 0, 9}, Family{"snappy", -1, -1},
                          Family{"zstd", 1, 22}}) {
    const std::string name = f.name;
    EXPECT_TRUE(with(name).ok()) << name;
    accepted += with(name).ok();
    for (int level = -1; level <= 24; ++level) {
      const std::string c = name + ":" + std::to_string(level);
      SCOPED_TRACE(c);
      if (f.min >= 0 && level >= f.min && level <= f.max) {
        EXPECT_TRUE(with(c).ok());
        accepted += with(c).ok();
      } else {
        EXPECT_STATUS(with(c), StatusCode::kCorruption,
                      f.min < 0 ? "(snappy has no levels)"
                                : name + " levels are " + std::to_string(f.min) + ".." + std::to_string(f.max));
      }
    }
    for (const std::string& bad : {name + ":01", name + ":+1", name + ": 1", name + ":", name + ":1 ", name + ":1:1",
                                   name + ":100", name + ":x"}) {
      SCOPED_TRACE(bad);
      EXPECT_EQ(with(bad).code(), StatusCode::kCorruption) << with(bad).ToString();
    }
  }
  EXPECT_EQ(accepted, 13u + 10u + 11u + 1u + 23u);  // len(compression.get_compressions()) in 0.13.0
  for (const char* other : {"lz4", "gzip", "GZ", "Zstd:3", "brotli", "bz2 ", " gz", "snappy1", "zstd9", ":9", ""}) {
    SCOPED_TRACE(other);
    EXPECT_STATUS(with(other), StatusCode::kUnsupported, "(read: br, bz2, gz, snappy, zstd)");
  }
}

// Python's json keeps the last of a repeated key, simdjson's lookup the
// first: refused wherever we read keys, so no index means two datasets.
TEST(MdsInvalid, RepeatedKeys) {
  const std::string text = ReadFileBytes(kGolden + "plain/index.json");
  auto parse = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    std::size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    return mds::ParseIndex({reinterpret_cast<const std::byte*>(t.data()), t.size()}, "index.json").status();
  };
  EXPECT_TRUE(parse("\"samples\": 4", "\"samples\": 4").ok());
  EXPECT_STATUS(parse("\"samples\": 4", "\"samples\": 4, \"samples\": 400"), StatusCode::kCorruption,
                "index.json: shard 0: key \"samples\" appears twice");
  EXPECT_STATUS(parse("{\"basename\": \"shard.00001.mds\"",
                      "{\"basename\": \"shard.00000.mds\", \"basename\": \"shard.00001.mds\""),
                StatusCode::kCorruption, "shard 1 raw_data: key \"basename\" appears twice");
  EXPECT_STATUS(
      parse("\"hashes\": {}}, \"samples\": 4", "\"hashes\": {\"xxh64\": \"00\", \"xxh64\": \"01\"}}, \"samples\": 4"),
      StatusCode::kCorruption, "shard 0 raw_data hashes: key \"xxh64\" appears twice");
  EXPECT_STATUS(parse("{\"shards\":", "{\"version\": 2, \"shards\":"), StatusCode::kCorruption,
                "index.json: key \"version\" appears twice");
}

// PERMISSIVE.md, MDS 3: MosaicML builds MDSReader(**entry) and
// FileInfo(**raw_data), so each of these raises there (TypeError, KeyError,
// ValueError for the negative size_limit; checked with 0.13.0). We read
// only the keys we use.
TEST(MdsPermissive, ShardEntryKeysMosaicMLWouldRefuse) {
  for (const auto& mutate : std::vector<std::function<void(nlohmann::json&)>>{
           [](auto& j) { j["shards"][0].erase("hashes"); },
           [](auto& j) { j["shards"][0].erase("size_limit"); },
           [](auto& j) { j["shards"][0]["size_limit"] = -1; },
           [](auto& j) { j["shards"][0].erase("zip_data"); },
           [](auto& j) { j["shards"][0]["raw_data"].erase("hashes"); },
           [](auto& j) { j["shards"][0]["extra"] = 1; },
           [](auto& j) { j["shards"][0]["raw_data"]["extra"] = 1; },
       }) {
    EXPECT_TRUE(ParseMutated(mutate).ok());
  }
}

// MDSWriter(columns={"": ...}) writes an empty column name and MosaicML
// reads it; a tensorsafe field needs a name (mds.md, "Differences").
TEST(MdsInvalid, EmptyColumnName) {
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["column_names"][1] = ""; }), StatusCode::kCorruption,
                "shard 0: column 1 has an empty name");
}

// MosaicML accepts these through Python's loose tests (2.0 == 2; "" is
// falsy, so uncompressed); no writer produces them and we refuse them
// (mds.md, "Differences"; checked with 0.13.0's reader_from_json).
TEST(MdsInvalid, ValuesOnlyPythonsLooseTestsAccept) {
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["version"] = 2.0; }), StatusCode::kCorruption,
                "shard 0: \"version\" is not a non-negative integer");
  EXPECT_STATUS(ParseMutated([](auto& j) { j["shards"][0]["compression"] = ""; }), StatusCode::kUnsupported,
                "shard 0: compression \"\" (read: br, bz2, gz, snappy, zstd)");
}

// A copy of plain/ whose shard 0 is mutated; the index's raw size follows.
class MdsShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(kGolden + "plain", dir_.path(), fs::copy_options::recursive);
    bytes_ = ReadFileBytes(dir_.File("shard.00000.mds"));
    auto ds = mds::OpenIndex(dir_.path().string());
    ASSERT_TRUE(ds.ok());
    info_ = ds->shards[0];
  }
  std::uint32_t Get32(std::size_t at) const {
    return internal::Load32(reinterpret_cast<const std::byte*>(&bytes_[at]));
  }
  void Set32(std::size_t at, std::uint32_t v) { internal::Store32(reinterpret_cast<std::byte*>(&bytes_[at]), v); }
  Result<std::unique_ptr<dataset::ShardSource>> Open() {
    WriteFileBytes(dir_.File("shard.00000.mds"), bytes_);
    mds::ShardEntry info = info_;
    info.raw.bytes = bytes_.size();
    return mds::OpenShardFile(dir_.File("shard.00000.mds"), info);
  }
  TempDir dir_;
  mds::ShardEntry info_;
  std::string bytes_;
};

TEST_F(MdsShardCorruption, EveryTruncationIsRefused) {
  const std::string whole = bytes_;
  ASSERT_TRUE(Open().ok());
  for (std::size_t len = 0; len < whole.size(); ++len) {
    bytes_ = whole.substr(0, len);
    EXPECT_EQ(Open().status().code(), StatusCode::kCorruption) << "prefix " << len;
  }
  bytes_ = whole.substr(0, whole.size() - 1);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption,
                "offsets[4] = " + std::to_string(whole.size()) + " is past the file's " +
                    std::to_string(whole.size() - 1) + " bytes");
  bytes_ = whole + std::string(3, '\0');
  EXPECT_STATUS(
      Open().status(), StatusCode::kCorruption,
      "offsets[4] = " + std::to_string(whole.size()) + " is not the file size " + std::to_string(whole.size() + 3));
}

TEST_F(MdsShardCorruption, EveryByteFlippedOpensOrFailsAndReadsOrFails) {
  const std::string whole = bytes_;
  std::vector<dataset::FieldView> v;
  std::size_t opened = 0, read_errors = 0;
  for (std::size_t at = 0; at < whole.size(); ++at) {
    bytes_ = whole;
    bytes_[at] = static_cast<char>(bytes_[at] ^ 0xFF);
    auto src = Open();
    if (!src.ok()) continue;
    ++opened;
    for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i) read_errors += !(*src)->Read(i, v).ok();
  }
  // Most flips land in values (not checksummed in MDS); some break the layout.
  EXPECT_GT(opened, whole.size() / 2);
  EXPECT_GT(read_errors, 0u);
}

TEST_F(MdsShardCorruption, SizeDisagreeingWithTheIndex) {
  WriteFileBytes(dir_.File("shard.00000.mds"), bytes_ + "x");
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kCorruption,
                std::to_string(bytes_.size() + 1) + " bytes, the index says " + std::to_string(bytes_.size()));
}

TEST_F(MdsShardCorruption, SampleCount) {
  Set32(0, Get32(0) + 1);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "holds 5 samples, the index says 4");
}

TEST_F(MdsShardCorruption, OffsetsOutOfOrder) {
  std::uint32_t a = Get32(8), b = Get32(12);
  Set32(8, b);
  Set32(12, a);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption,
                "offsets[2] = " + std::to_string(a) + " is below offsets[1] = " + std::to_string(b));
}

TEST_F(MdsShardCorruption, FirstOffsetInsideTheTable) {
  Set32(4, 8);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "offsets[0] = 8 is inside the offset table (ends at 24)");
}

TEST_F(MdsShardCorruption, FirstOffsetPastTheFile) {
  Set32(4, 1u << 20);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "offsets[0] = 1048576 is past the file's");
}

TEST_F(MdsShardCorruption, ConfigDisagreeingWithTheIndex) {
  std::size_t at = bytes_.find("\"blob\"", 28);
  ASSERT_NE(at, std::string::npos);
  bytes_[at + 1] = 'B';
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "config column 1 disagrees with the index's \"blob\"");
}

TEST_F(MdsShardCorruption, ValueSizeRunningPastTheSample) {
  Set32(Get32(8), 0xFFFF);  // sample 1's first size prefix (column "any")
  auto src = Open();
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"any\": value of 65535 bytes at 36");
  EXPECT_TRUE((*src)->Read(2, v).ok());  // the others stay readable
}

TEST_F(MdsShardCorruption, NdarrayDtypeCode) {
  bytes_[Get32(8) + 36] = static_cast<char>(99);  // sample 1, "any"'s dtype byte after 9 sizes
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"any\": unknown ndarray dtype code 99");
}

TEST_F(MdsShardCorruption, NdarrayDtypeOtherThanTheFields) {
  bytes_[Get32(8) + 36] = static_cast<char>(34);  // float32 where sample 0 has float64
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kUnsupported,
                "ndarray of f32 rank 2, but the shard's field is f64 rank 2");
}

TEST_F(MdsShardCorruption, TextThatIsNotUtf8) {
  std::size_t at = bytes_.find("sample-1-");
  ASSERT_NE(at, std::string::npos);
  bytes_[at] = static_cast<char>(0xFF);
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"name\": text is not valid UTF-8");
}

// PERMISSIVE.md, MDS 4: str_decimal text is handed out as stored, even
// text Decimal() refuses (StreamingDataset raises InvalidOperation).
TEST_F(MdsShardCorruption, StrDecimalTextIsNotParsed) {
  std::size_t at = bytes_.find("1.25");  // sample 1's "sd"
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes_.find("1.25", at + 1), std::string::npos);
  bytes_[at + 3] = 'x';
  auto src = Open();
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<dataset::FieldView> v;
  ASSERT_TRUE((*src)->Read(1, v).ok());
  const dataset::FieldView& sd = v[(*src)->schema().Find("sd") - (*src)->schema().fields.data()];
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(sd.bytes.data()), sd.bytes.size()), "1.2x");
}

TEST_F(MdsShardCorruption, SymlinkedShardIsNotFollowed) {
  fs::rename(dir_.File("shard.00000.mds"), dir_.File("elsewhere"));
  fs::create_symlink(dir_.File("elsewhere"), dir_.File("shard.00000.mds"));
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kCorruption,
                "not a regular file (symlinks are not followed)");
}

// The x values of every sample of shard 0 of `dir`, read through `cache`.
Result<std::vector<std::int64_t>> ReadX(const std::string& dir, const std::string& cache, bool verify = false) {
  TS_ASSIGN_OR_RETURN(mds::Index ds, mds::OpenIndex(dir));
  mds::ShardOptions opt;
  opt.cache_dir = cache;
  opt.verify_existing = verify;
  TS_ASSIGN_OR_RETURN(auto src, mds::OpenShard(ds, 0, opt));
  std::vector<std::int64_t> xs;
  std::vector<dataset::FieldView> views;
  for (std::uint64_t i = 0; i < src->num_samples(); ++i) {
    TS_RETURN_IF_ERROR(src->Read(i, views));
    xs.push_back(static_cast<std::int64_t>(internal::Load64(views[1].bytes.data())));
  }
  return xs;
}

std::vector<std::string> CacheEntries(const TempDir& cache) {
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(cache.path())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Every MDSWriter names its first shard shard.00000.mds: a cache keyed by
// that name (and the size) handed dataset A's values to dataset B
// (differential test against mosaicml-streaming 0.13.0).
TEST(MdsCache, DatasetsWithTheSameShardNamesAndSizesKeepTheirOwnValues) {
  for (bool hashes : {true, false}) {
    SCOPED_TRACE(hashes ? "xxh64 in the index" : "no hashes in the index");
    TempDir a, b, cache;
    testing::WriteZstdMds(a.path().string(), 100, "AAA", hashes);
    testing::WriteZstdMds(b.path().string(), 200, "BBB", hashes);
    ASSERT_EQ(ReadFileBytes(a.File("index.json")).size(), ReadFileBytes(b.File("index.json")).size());
    const std::vector<std::int64_t> want_a = {100, 101, 102, 103}, want_b = {200, 201, 202, 203};
    for (int round = 0; round < 2; ++round) {  // decompressed, then reused from the cache
      auto xa = ReadX(a.path().string(), cache.path().string());
      ASSERT_TRUE(xa.ok()) << xa.status().ToString();
      EXPECT_EQ(*xa, want_a) << "round " << round;
      auto xb = ReadX(b.path().string(), cache.path().string());
      ASSERT_TRUE(xb.ok()) << xb.status().ToString();
      EXPECT_EQ(*xb, want_b) << "round " << round;
    }
    std::vector<std::string> names = CacheEntries(cache);
    ASSERT_EQ(names.size(), 2u);
    for (const std::string& n : names) EXPECT_EQ(n.substr(0, hashes ? 10 : 3), hashes ? "raw-xxh64-" : "at-") << n;
  }
}

// Without digests the name comes from the zip file's identity: a dataset
// rewritten in place with other values of the same sizes is decompressed
// again, not served from the old cache file.
TEST(MdsCache, DatasetRewrittenInPlaceIsNotServedFromTheOldCacheFile) {
  TempDir a, cache;
  testing::WriteZstdMds(a.path().string(), 100, "AAA", /*with_hashes=*/false);
  auto first = ReadX(a.path().string(), cache.path().string());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  testing::WriteZstdMds(a.path().string(), 300, "CCC", /*with_hashes=*/false);
  auto second = ReadX(a.path().string(), cache.path().string());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, (std::vector<std::int64_t>{300, 301, 302, 303}));
}

// A cache file under a digest's name holds what decompression checked; one
// changed since is found by verify_existing (and by Dataset::Verify,
// open_any_test.cc).
TEST(MdsCache, TamperedCachedShardFailsVerifyExisting) {
  TempDir a, cache;
  testing::WriteZstdMds(a.path().string(), 100, "AAA", /*with_hashes=*/true);
  ASSERT_TRUE(ReadX(a.path().string(), cache.path().string()).ok());
  std::vector<std::string> names = CacheEntries(cache);
  ASSERT_EQ(names.size(), 1u);
  const std::string cached = cache.File(names[0]);
  std::string raw = ReadFileBytes(cached);
  raw.back() ^= 1;  // the top byte of the last sample's x: still a well-formed shard
  WriteFileBytes(cached, raw);
  auto xs = ReadX(a.path().string(), cache.path().string(), /*verify=*/true);
  EXPECT_STATUS(xs.status(), StatusCode::kCorruption, cached + ": xxh64 is ");
  EXPECT_STATUS(xs.status(), StatusCode::kCorruption, ", the index says \"");
}

// The dataset directory as the cache (OpenAny's default): the raw shard goes
// next to the zip under its own name, where StreamingDataset leaves it.
TEST(MdsCache, DatasetDirectoryAsTheCacheKeepsTheRawName) {
  TempDir a;
  testing::WriteZstdMds(a.path().string(), 100, "AAA", /*with_hashes=*/true);
  auto xs = ReadX(a.path().string(), a.path().string());
  ASSERT_TRUE(xs.ok()) << xs.status().ToString();
  EXPECT_EQ(xs->front(), 100);
  EXPECT_TRUE(fs::exists(a.File("shard.00000.mds")));
}

class MdsZstdCorruption : public ::testing::Test {
 protected:
  void SetUp() override { fs::copy(kGolden + "zstd", dir_.path(), fs::copy_options::recursive); }
  Status Open(const std::function<void(nlohmann::json&)>& mutate = {}) {
    if (mutate) {
      nlohmann::json j = nlohmann::json::parse(ReadFileBytes(dir_.File("index.json")));
      mutate(j);
      WriteFileBytes(dir_.File("index.json"), j.dump());
    }
    auto ds = mds::OpenIndex(dir_.path().string());
    if (!ds.ok()) return ds.status();
    mds::ShardOptions opt;
    opt.cache_dir = cache_.path().string();
    return mds::OpenShard(*ds, 0, opt).status();
  }
  std::size_t CacheFiles() const {
    std::size_t n = 0;
    for (auto& e : fs::recursive_directory_iterator(cache_.path())) n += e.is_regular_file();
    return n;
  }
  void Flip(std::size_t at) {
    std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
    z[at] ^= 1;
    WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z);
  }
  TempDir dir_, cache_;
};

TEST_F(MdsZstdCorruption, NeedsACacheDirectory) {
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kFailedPrecondition, "needs a cache directory");
}

TEST_F(MdsZstdCorruption, ZipHashMismatchLeavesNothingCached) {
  Flip(40);
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("shard.00000.mds.zstd: xxh3_64 is "), std::string::npos) << s.ToString();
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, RawHashMismatchAfterDecompression) {
  EXPECT_STATUS(Open([](auto& j) { j["shards"][0]["raw_data"]["hashes"]["xxh64"] = "0123456789abcdef"; }),
                StatusCode::kCorruption, "(decompressed): xxh64 is ");
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, DamagedFrameWithoutHashes) {
  Flip(40);
  Status s = Open([](auto& j) { j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object(); });
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, RawSizeOtherThanTheFrames) {
  std::uint64_t raw = 0;
  EXPECT_STATUS(Open([&](auto& j) {
                  raw = j["shards"][0]["raw_data"]["bytes"].template get<std::uint64_t>();
                  j["shards"][0]["raw_data"]["bytes"] = raw + 1;
                }),
                StatusCode::kCorruption, "bytes, the index says the raw shard has ");
  EXPECT_EQ(CacheFiles(), 0u);
}

// python-zstd's decompress (StreamingDataset's) reads every frame of the
// file and skips skippable ones; MDSWriter writes one frame, other tools may
// write several. Only the frames' total must be the raw size.
TEST_F(MdsZstdCorruption, SeveralFramesAndASkippableOne) {
  ASSERT_TRUE(Open().ok());
  std::string raw;
  for (auto& e : fs::directory_iterator(cache_.path())) raw = ReadFileBytes(e.path().string());
  ASSERT_FALSE(raw.empty());
  TempDir parts;
  std::string zip = std::string(
      "\x50\x2a\x4d\x18\x03\x00\x00\x00"
      "abc",
      11);  // skippable frame, 3 bytes
  for (std::string part : {raw.substr(0, 1000), raw.substr(1000)}) {
    WriteFileBytes(parts.File("in"), part);
    ASSERT_TRUE(dataset::internal::ZstdCompressFile(parts.File("in"), parts.File("out"), 3, false).ok());
    zip += ReadFileBytes(parts.File("out"));
  }
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), zip);
  fs::remove_all(cache_.path());
  fs::create_directories(cache_.path());
  Status s = Open([&](auto& j) {
    j["shards"][0]["zip_data"]["bytes"] = zip.size();
    j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(CacheFiles(), 1u);
  // A raw size other than the frames' total is still refused, with nothing cached.
  fs::remove_all(cache_.path());
  EXPECT_STATUS(Open([&](auto& j) { j["shards"][0]["raw_data"]["bytes"] = raw.size() - 1; }), StatusCode::kCorruption,
                "decompresses to more than the index's " + std::to_string(raw.size() - 1));
  EXPECT_EQ(CacheFiles(), 0u);
}

// Errors in a shard decompressed into the cache name the .zstd file it came
// from, not only the cache file's digest name.
TEST_F(MdsZstdCorruption, ErrorsInACachedShardNameItsZstdFile) {
  ASSERT_TRUE(Open().ok());
  std::string cached;
  for (auto& e : fs::directory_iterator(cache_.path())) cached = e.path().string();
  std::string raw = ReadFileBytes(cached);
  internal::Store32(reinterpret_cast<std::byte*>(raw.data()), 5);
  WriteFileBytes(cached, raw);
  EXPECT_STATUS(
      Open(), StatusCode::kCorruption,
      dir_.File("shard.00000.mds.zstd") + " (decompressed as " + cached + "): holds 5 samples, the index says 4");
}

TEST_F(MdsZstdCorruption, TrailingGarbageAfterTheFrame) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z + "junk");
  EXPECT_STATUS(Open([&](auto& j) {
                  j["shards"][0]["zip_data"]["bytes"] = z.size() + 4;
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption, "shard.00000.mds.zstd: zstd: ");
  EXPECT_EQ(CacheFiles(), 0u);
}

// The start of a second frame after a whole one: the output already has the
// index's size, and the message must not read "decompresses to 2466 bytes
// (truncated frame), the index says 2466".
TEST_F(MdsZstdCorruption, TruncatedSecondFrame) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  z += std::string("\x28\xb5\x2f\xfd", 4);  // a zstd frame's magic and nothing more
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z);
  std::uint64_t raw = 0;
  EXPECT_STATUS(Open([&](auto& j) {
                  raw = j["shards"][0]["raw_data"]["bytes"].template get<std::uint64_t>();
                  j["shards"][0]["zip_data"]["bytes"] = z.size();
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption,
                "shard.00000.mds.zstd: the input ends inside a zstd frame (truncated frame) after " +
                    std::to_string(raw) + " decompressed bytes; the index says " + std::to_string(raw));
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, TruncatedZip) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z.substr(0, z.size() / 2));
  EXPECT_STATUS(Open([&](auto& j) {
                  j["shards"][0]["zip_data"]["bytes"] = z.size() / 2;
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption, "(truncated frame)");
  EXPECT_EQ(CacheFiles(), 0u);
}

}  // namespace
}  // namespace tensorsafe
