// The checks of an MDS dataset's index.json (docs/formats/mds.md): golden
// plain/index.json (tests/golden/mds/make.py) mutated, each refusal with its
// code and message, and what MosaicML's reader accepts that we read too.
#include <gtest/gtest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "dataset/sources/mds/internal.h"
#include "dataset/sources/mds_test_util.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/mds.h"

namespace tensorsafe {
namespace {

using testing::ReadFileBytes;
using namespace mds_test;  // NOLINT: kGolden

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

}  // namespace
}  // namespace tensorsafe
