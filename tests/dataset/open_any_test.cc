// OpenAny: every location kind read fully against known contents (native
// directories against the model, MDS and WebDataset goldens against what
// their reference readers returned, a native dataset over http against the
// local read), and the detection and refusal rules of DATASET.md "Locations".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "formats/sample_json.h"
#include "support/dataset_model.h"
#include "support/mds_files.h"
#include "support/nginx_server.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"
#include "util/endian.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using testing::ModelSample;
using testing::TempDir;

const std::string kGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/";

struct Written {
  Schema schema;
  std::vector<ModelSample> samples;
};

Written WriteNative(const std::string& dir, std::uint64_t seed, int zstd_level = 0, std::size_t n = 40) {
  std::mt19937_64 rng(seed);
  Written w;
  w.schema = testing::RandomSchema(rng);
  DatasetWriterOptions opt;
  opt.sync = false;
  opt.max_shard_samples = 7;
  opt.zstd_level = zstd_level;
  opt.schema = w.schema;
  auto writer = DatasetWriter::Create(dir, opt);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  for (std::size_t i = 0; i < n; ++i) {
    w.samples.push_back(testing::RandomSample(rng, w.schema));
    auto named = testing::ToNamed(w.schema, w.samples.back());
    Status st = (*writer)->Add(named);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*writer)->Finish().ok());
  return w;
}

void ExpectModel(const Dataset& ds, const Written& w) {
  ASSERT_EQ(ds.num_samples(), w.samples.size());
  std::string why;
  ASSERT_TRUE(SameSchema(ds.schema(), w.schema, &why)) << why;
  auto it = ds.IterateRange(0, ds.num_samples());
  Sample s;
  std::size_t i = 0;
  while (it.Next(s)) {
    ASSERT_EQ(testing::Diff(w.schema, w.samples[i], s), "") << "sample " << i;
    ++i;
  }
  ASSERT_TRUE(it.status().ok()) << it.status().ToString();
  EXPECT_EQ(i, w.samples.size());
}

// Every sample of `ds` as the reference reader's expected.jsonl has it.
void ExpectJsonLines(const Dataset& ds, const std::string& expected_path, bool drop_img) {
  auto expected = testing::ReadJsonLines(expected_path);
  ASSERT_EQ(ds.num_samples(), expected.size());
  Sample s;
  for (std::uint64_t i = 0; i < ds.num_samples(); ++i) {
    ASSERT_TRUE(ds.Read(i, s).ok()) << i;
    nlohmann::json got = testing::SampleJson(s.fields);
    nlohmann::json want = expected[i]["fields"];
    if (drop_img) {  // PIL re-encodes PNGs on read; we hand out the stored bytes
      got.erase("img");
      want.erase("img");
    }
    EXPECT_EQ(got, want) << "sample " << i;
    // The views carry the dataset's (merged) schema.
    for (std::size_t k = 0; k < s.fields.size(); ++k) {
      EXPECT_EQ(s.fields[k].spec->name, ds.schema().fields[k].name);
      EXPECT_EQ(s.fields[k].spec->shape, ds.schema().fields[k].shape) << s.fields[k].spec->name;
    }
  }
}

TEST(OpenAny, NativeDirectory) {
  TempDir tmp;
  Written w = WriteNative(tmp.File("d"), testing::TestSeed());
  auto ds = OpenAny(tmp.File("d"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectModel(**ds, w);
  EXPECT_EQ((*ds)->shards()[0].kind, "tsafe");
}

TEST(OpenAny, MdsPlainMatchesStreaming) {
  auto ds = OpenAny(kGolden + "mds/plain");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->shards()[0].kind, "mds");
  ExpectJsonLines(**ds, kGolden + "mds/plain/expected.jsonl", true);
  // "any" is an ndarray whose shape is per sample: the shards' first samples
  // differ in dims, so the merged schema leaves them open.
  const FieldSpec* any = (*ds)->schema().Find("any");
  ASSERT_NE(any, nullptr);
  EXPECT_EQ(any->shape, (std::vector<std::int64_t>{kAnyDim, kAnyDim}));
  EXPECT_TRUE((*ds)->Verify().ok());
}

TEST(OpenAny, MdsZstdDecompressesIntoTheCacheDir) {
  TempDir cache;
  DatasetOptions opt;
  opt.cache_dir = cache.path().string();
  auto ds = OpenAny(kGolden + "mds/zstd", opt);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectJsonLines(**ds, kGolden + "mds/zstd/expected.jsonl", true);
  EXPECT_TRUE(fs::exists(cache.path() / "raw-xxh3_64-43cb3bea525dcb2d-2466.mds"));  // mds.md: by digest
  EXPECT_FALSE(fs::exists(kGolden + "mds/zstd/shard.00000.mds"));                   // the golden dir is never written
}

std::vector<std::int64_t> AllX(const Dataset& ds) {
  std::vector<std::int64_t> xs;
  Sample s;
  for (std::uint64_t i = 0; i < ds.num_samples(); ++i) {
    Status st = ds.Read(i, s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) break;
    xs.push_back(static_cast<std::int64_t>(tensorsafe::internal::Load64(s.fields[1].bytes.data())));
  }
  return xs;
}

// Two MDSWriter outputs with the same shard names and sizes but other
// values, read through one cache directory (Python Dataset(cache_dir=...)
// and the CLI's --cache-dir come here): each reads its own values and
// verifies clean (mds.md "Compression and hashes").
TEST(OpenAny, MdsDatasetsSharingACacheDirReadTheirOwnShards) {
  for (bool hashes : {true, false}) {
    SCOPED_TRACE(hashes ? "xxh64 in the index" : "no hashes in the index");
    TempDir a, b, cache;
    testing::WriteZstdMds(a.path().string(), 100, "AAA", hashes);
    testing::WriteZstdMds(b.path().string(), 200, "BBB", hashes);
    DatasetOptions opt;
    opt.cache_dir = cache.path().string();
    for (const auto& [dir, first] : {std::pair{a.path().string(), 100}, std::pair{b.path().string(), 200}}) {
      auto ds = OpenAny(dir, opt);
      ASSERT_TRUE(ds.ok()) << ds.status().ToString();
      EXPECT_EQ(AllX(**ds), (std::vector<std::int64_t>{first, first + 1, first + 2, first + 3})) << dir;
      Status v = (*ds)->Verify();
      EXPECT_TRUE(v.ok()) << v.ToString();
    }
  }
}

// `dataset verify --cache-dir`: the raw shard actually read (here the cached
// copy) is checked against the index's digest, not just read sample by
// sample; a changed value inside a well-formed shard is kCorruption.
TEST(OpenAny, MdsVerifyChecksTheCachedRawShardAgainstTheIndex) {
  TempDir a, cache;
  testing::WriteZstdMds(a.path().string(), 100, "AAA", /*with_hashes=*/true);
  DatasetOptions opt;
  opt.cache_dir = cache.path().string();
  {
    auto ds = OpenAny(a.path().string(), opt);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    ASSERT_TRUE((*ds)->Verify().ok());
  }
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(cache.path())) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const std::string cached = files[0].string();
  std::string raw = testing::ReadFileBytes(cached);
  raw.back() ^= 1;  // the top byte of the last sample's x: the shard stays well-formed
  testing::WriteFileBytes(cached, raw);
  auto ds = OpenAny(a.path().string(), opt);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();  // opening reuses it unhashed (the fast path)
  std::vector<Status> problems;
  Status st = (*ds)->Verify(&problems);
  EXPECT_STATUS(st, StatusCode::kCorruption, cached + " (raw_data \"shard.00000.mds\"): xxh64 is ");
  EXPECT_STATUS(st, StatusCode::kCorruption, ", the index says \"");
  EXPECT_EQ(problems.size(), 1u);
}

TEST(OpenAny, MdsPickleColumnsAreRefused) {
  EXPECT_STATUS(OpenAny(kGolden + "mds/pkl").status(), StatusCode::kUnsupported, "pkl");
}

TEST(OpenAny, WdsBracePatternMatchesWebDataset) {
  auto ds = OpenAny(kGolden + "wds/ds-{000000..000002}.tar");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->shards().size(), 3u);
  EXPECT_EQ((*ds)->shards()[0].kind, "wds");
  ExpectJsonLines(**ds, kGolden + "wds/expected.jsonl", false);
  EXPECT_TRUE((*ds)->Verify().ok());
}

TEST(OpenAny, WdsDirectoryAndSingleTar) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "w");
  for (const char* n : {"ds-000000.tar", "ds-000001.tar", "ds-000002.tar"}) {
    fs::copy_file(kGolden + "wds/" + n, tmp.path() / "w" / n);
  }
  auto ds = OpenAny(tmp.File("w"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectJsonLines(**ds, kGolden + "wds/expected.jsonl", false);

  auto one = OpenAny(kGolden + "wds/ds-000000.tar");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)->num_samples(), 3u);  // ShardWriter maxcount 3
}

TEST(OpenAny, WdsShardsWithOtherFieldsAreRefused) {
  // The golden directory also holds gnu.tar and pax.tar (fields cls, txt).
  EXPECT_STATUS(OpenAny(kGolden + "wds").status(), StatusCode::kUnsupported, "has another schema than the first shard");
}

TEST(OpenAny, WdsDirectorySymlinkOutsideIsRefused) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "w");
  fs::create_symlink(kGolden + "wds/ds-000000.tar", tmp.path() / "w" / "a.tar");
  EXPECT_STATUS(OpenAny(tmp.File("w")).status(), StatusCode::kCorruption, "a.tar");
}

TEST(OpenAny, DetectionErrors) {
  TempDir tmp;
  EXPECT_STATUS(OpenAny(tmp.File("missing")).status(), StatusCode::kIOError, "no such dataset");
  fs::create_directories(tmp.path() / "empty");
  EXPECT_STATUS(OpenAny(tmp.File("empty")).status(), StatusCode::kIOError, "neither index.json nor .tar shards");
  fs::create_directories(tmp.path() / "other");
  std::ofstream(tmp.path() / "other" / "index.json") << R"({"format": "something-else", "version": 1})";
  EXPECT_STATUS(OpenAny(tmp.File("other")).status(), StatusCode::kUnsupported, "neither a tensorsafe dataset index");
  std::ofstream(tmp.path() / "x.bin") << "x";
  EXPECT_STATUS(OpenAny(tmp.File("x.bin")).status(), StatusCode::kInvalidArgument, "not a .tar shard");
  EXPECT_STATUS(OpenAny(tmp.File("ds-{0..1}.tar")).status(), StatusCode::kNotFound, "does not exist");
}

class OpenAnyRemote : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(tmp_.path() / "www");
    server_ = std::make_unique<testing::NginxServer>((tmp_.path() / "www").string());
  }
  std::string Www(const std::string& name) const { return (tmp_.path() / "www" / name).string(); }
  DatasetOptions Options() const {
    DatasetOptions o;
    o.cache_dir = (tmp_.path() / "cache").string();
    o.remote.max_attempts = 1;
    return o;
  }
  std::size_t CachedFiles() const {
    std::size_t n = 0;
    const fs::path files = tmp_.path() / "cache" / "files";
    if (!fs::exists(files)) return 0;
    for (const auto& e : fs::directory_iterator(files)) n += e.is_regular_file() ? 1 : 0;
    return n;
  }
  TempDir tmp_;
  std::unique_ptr<testing::NginxServer> server_;
};

TEST_F(OpenAnyRemote, ReadsLikeTheLocalDatasetAndKeepsWorkingFromTheCache) {
  Written w = WriteNative(Www("ds"), testing::TestSeed());
  DatasetOptions o = Options();
  o.max_open_shards = 1;  // later reads reopen shards: from the cache only
  auto ds = OpenAny(server_->Url("data/ds"), o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectModel(**ds, w);
  EXPECT_TRUE((*ds)->Verify().ok());
  EXPECT_EQ(CachedFiles(), (*ds)->shards().size());
  server_->Stop();
  ExpectModel(**ds, w);
}

TEST_F(OpenAnyRemote, ZstdShardsAreDecompressedOutsideTheCachedFiles) {
  Written w = WriteNative(Www("dz"), testing::TestSeed() + 1, 3);
  auto ds = OpenAny(server_->Url("data/dz"), Options());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ExpectModel(**ds, w);
  EXPECT_EQ(CachedFiles(), (*ds)->shards().size());  // the .zst files only
  EXPECT_TRUE(fs::exists(tmp_.path() / "cache" / "decompressed"));
}

TEST_F(OpenAnyRemote, AlteredShardIsCorruptionAndNothingIsCached) {
  WriteNative(Www("ds"), testing::TestSeed(), 0, 5);  // one shard
  auto idx = ReadIndexFile(Www("ds"));
  ASSERT_TRUE(idx.ok());
  const std::string shard = Www("ds/" + idx->shards[0].name);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(idx->shards[0].bytes / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(idx->shards[0].bytes / 2));
    c ^= 0x20;
    f.write(&c, 1);
  }
  DatasetOptions o = Options();
  o.prefetch_shards = 0;
  auto ds = OpenAny(server_->Url("data/ds"), o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Sample s;
  EXPECT_STATUS((*ds)->Read(0, s), StatusCode::kCorruption, idx->shards[0].name);
  EXPECT_EQ(CachedFiles(), 0u);
}

TEST_F(OpenAnyRemote, UnsafeShardNameFailsAtOpen) {
  WriteNative(Www("ds"), testing::TestSeed(), 0, 5);
  auto idx = ReadIndexFile(Www("ds"));
  ASSERT_TRUE(idx.ok());
  idx->shards[0].name = "a:b.tsafe";  // ':' could start a scheme: never fetched
  ASSERT_TRUE(WriteIndexFile(Www("ds"), *idx, false).ok());
  auto ds = OpenAny(server_->Url("data/ds"), Options());
  EXPECT_FALSE(ds.ok());
  if (!ds.ok()) EXPECT_NE(ds.status().message().find("a:b.tsafe"), std::string::npos) << ds.status().ToString();
  EXPECT_EQ(server_->CountRequests("a:b"), 0);
}

TEST_F(OpenAnyRemote, MissingIndexIsNotFound) {
  EXPECT_STATUS(OpenAny(server_->Url("data/nothing"), Options()).status(), StatusCode::kNotFound, "");
}

}  // namespace
}  // namespace tensorsafe::dataset
