// Native datasets at s3://bucket/prefix (moto_server): uploaded file by file,
// opened with OpenAny through the shard cache, read equal to the model, and
// a shard whose size differs from the index refused with nothing cached.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "remote/remote_file.h"
#include "remote/s3_client.h"
#include "support/dataset_model.h"
#include "support/moto_server.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using tensorsafe::testing::MotoServer;
using ::testing::HasSubstr;

class S3DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (MotoServer::Binary().empty()) GTEST_SKIP() << "no moto_server (pip install -r requirements-dev.txt)";
    server_ = std::make_unique<MotoServer>();
    ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    ::setenv("AWS_ENDPOINT_URL_S3", server_->Endpoint().c_str(), 1);
    internal::ResetRemoteState();
    client_ = std::move(*internal::s3::S3Client::FromEnvironment());
    ASSERT_TRUE(client_->CreateBucket("data").ok());
  }
  void TearDown() override {
    ::unsetenv("AWS_ENDPOINT_URL_S3");
    internal::ResetRemoteState();
  }

  // Writes a native dataset locally and uploads every file under `prefix`,
  // the index last (as a writer to S3 must: the index is the commit).
  std::vector<testing::ModelSample> WriteAndUpload(const std::string& prefix, Schema* schema) {
    std::mt19937_64 rng(testing::TestSeed());
    *schema = testing::RandomSchema(rng);
    DatasetWriterOptions opt;
    opt.sync = false;
    opt.max_shard_samples = 7;
    opt.schema = *schema;
    const fs::path dir = tmp_.path() / "local";
    auto writer = DatasetWriter::Create(dir.string(), opt);
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    std::vector<testing::ModelSample> samples;
    for (int i = 0; i < 40; ++i) {
      samples.push_back(testing::RandomSample(rng, *schema));
      EXPECT_TRUE((*writer)->Add(testing::ToNamed(*schema, samples.back())).ok());
    }
    EXPECT_TRUE((*writer)->Finish().ok());
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().filename() != "index.json") files.push_back(e.path());
    }
    files.push_back(dir / "index.json");
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      const std::string key = prefix + fs::relative(f, dir).string();
      EXPECT_TRUE(client_->Put({"data", key}, std::as_bytes(std::span(bytes.data(), bytes.size()))).ok());
    }
    return samples;
  }
  DatasetOptions Options() const {
    DatasetOptions o;
    o.cache_dir = (tmp_.path() / "cache").string();
    o.remote.max_attempts = 2;
    return o;
  }
  std::size_t CachedFiles() const {
    std::size_t n = 0;
    const fs::path files = tmp_.path() / "cache" / "files";
    if (!fs::exists(files)) return 0;
    for (const auto& e : fs::directory_iterator(files)) n += e.is_regular_file() ? 1 : 0;
    return n;
  }

  tensorsafe::testing::TempDir tmp_;
  std::unique_ptr<MotoServer> server_;
  std::unique_ptr<internal::s3::S3Client> client_;
};

TEST_F(S3DatasetTest, NativeDatasetReadsLikeTheModel) {
  Schema schema;
  auto samples = WriteAndUpload("sets/a/", &schema);
  auto ds = OpenAny("s3://data/sets/a", Options());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->num_samples(), samples.size());
  auto it = (*ds)->IterateRange(0, (*ds)->num_samples());
  Sample s;
  std::size_t i = 0;
  while (it.Next(s)) {
    ASSERT_EQ(testing::Diff(schema, samples[i], s), "") << "sample " << i;
    ++i;
  }
  ASSERT_TRUE(it.status().ok()) << it.status().ToString();
  EXPECT_EQ(i, samples.size());
  EXPECT_TRUE((*ds)->Verify().ok());
  EXPECT_EQ(CachedFiles(), (*ds)->shards().size());
}

TEST_F(S3DatasetTest, ShardOfAnotherSizeIsRefusedAndNotCached) {
  Schema schema;
  WriteAndUpload("sets/b/", &schema);
  auto ds = OpenAny("s3://data/sets/b", Options());
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const std::string name = (*ds)->shards()[0].name;
  ASSERT_TRUE(client_->Put({"data", "sets/b/" + name}, std::as_bytes(std::span("short", 5))).ok());
  auto src = (*ds)->OpenShard(0);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(src.status().message(), HasSubstr("GET s3://data/sets/b/" + name + ": server sends 5 bytes"));
  EXPECT_EQ(CachedFiles(), 0u);
}

TEST_F(S3DatasetTest, MissingDatasetIsNotFound) {
  auto ds = OpenAny("s3://data/nothing/here", Options());
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ds.status().message(), HasSubstr("s3://data/nothing/here/index.json"));
}

}  // namespace
}  // namespace tensorsafe::dataset
