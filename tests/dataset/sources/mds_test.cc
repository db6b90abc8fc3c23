// MDS datasets: golden datasets written by mosaicml-streaming (tests/golden/
// mds/make.py) read sample for sample as its StreamingDataset reads them, and
// compressed shards decompressed into a cache kept apart per dataset.
// mds_index_test.cc has the checks of index.json, mds_corruption_test.cc
// damaged shards (docs/formats/mds.md).
#include "tensorsafe/dataset/mds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "dataset/sources/mds_test_util.h"
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
using namespace mds_test;  // NOLINT: kGolden

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

}  // namespace
}  // namespace tensorsafe
