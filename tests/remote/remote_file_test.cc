// Tensor files over s3:// (moto_server) and http:// (nginx) through the Env
// seam: the native reader by ranges (a 100,000-tensor .tsafe opened in at
// most 5 requests, counted at the server), every other format through the
// format table, and errors naming the URL.
#include "remote/remote_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "remote/s3_client.h"
#include "support/moto_server.h"
#include "support/nginx_server.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::internal {
namespace {

namespace fs = std::filesystem;
using tensorsafe::testing::MotoServer;
using ::testing::HasSubstr;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RemoteFileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (MotoServer::Binary().empty()) return;
    server_ = new MotoServer();
    tmp_ = new tensorsafe::testing::TempDir();
    // The environment as a user sets it for an S3-compatible store.
    ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
    ::setenv("AWS_ENDPOINT_URL_S3", server_->Endpoint().c_str(), 1);
    ResetRemoteState();
    client_ = s3::S3Client::FromEnvironment()->release();
    ASSERT_TRUE(client_->CreateBucket("models").ok());

    // 100,000 small tensors: an index of several MiB.
    const std::string path = (tmp_->path() / "many.tsafe").string();
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 100'000; ++i) {
      const float v[2] = {static_cast<float>(i), static_cast<float>(-i)};
      const std::uint64_t shape[1] = {2};
      ASSERT_TRUE((*w)->Add("layer." + std::to_string(i) + ".w", DType::kF32, shape, std::as_bytes(std::span(v))).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
    Upload("many.tsafe", Slurp(path));
    // The same tensors, fewer, as safetensors through the format table.
    auto set = ReadTensorSet(path);
    ASSERT_TRUE(set.ok());
    set->tensors.resize(1000);
    const std::string st = (tmp_->path() / "small.safetensors").string();
    ASSERT_TRUE(WriteTensorSet(st, *set, Format::kSafetensors).ok());
    Upload("small.safetensors", Slurp(st));
  }
  static void TearDownTestSuite() {
    delete client_;
    delete server_;
    delete tmp_;
    client_ = nullptr;
    server_ = nullptr;
    ::unsetenv("AWS_ENDPOINT_URL_S3");
    ResetRemoteState();
  }
  static void Upload(const std::string& key, const std::string& bytes) {
    ASSERT_TRUE(client_->Put({"models", key}, std::as_bytes(std::span(bytes.data(), bytes.size()))).ok());
  }
  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "no moto_server (pip install -r requirements-dev.txt)";
    ResetRemoteState();  // no blocks left from another test
  }

  static MotoServer* server_;
  static s3::S3Client* client_;
  static tensorsafe::testing::TempDir* tmp_;
};
MotoServer* RemoteFileTest::server_ = nullptr;
s3::S3Client* RemoteFileTest::client_ = nullptr;
tensorsafe::testing::TempDir* RemoteFileTest::tmp_ = nullptr;

TEST_F(RemoteFileTest, NativeFileOf100kTensorsOpensInFewRequests) {
  const int mark = server_->LogLines();
  auto r = Reader::Open("s3://models/many.tsafe");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 100'000u);
  const int open_requests = server_->CountRequestsSince(mark, "/models/many.tsafe");
  EXPECT_LE(open_requests, 5);
  std::printf("opened s3://models/many.tsafe (%llu bytes, 100,000 tensors) in %d requests\n",
              static_cast<unsigned long long>((*r)->summary().file_size), open_requests);
  // Two tensors far apart: one ranged GET each (1 MiB blocks).
  for (int i : {7, 98'765}) {
    auto t = (*r)->Get("layer." + std::to_string(i) + ".w");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_EQ(t->data.size(), 8u);
    float v[2];
    std::memcpy(v, t->data.data(), 8);
    EXPECT_EQ(v[0], static_cast<float>(i));
    EXPECT_EQ(v[1], static_cast<float>(-i));
  }
  // A neighbour of a tensor read already: no request.
  const int before = server_->CountRequestsSince(mark, "/models/many.tsafe");
  ASSERT_TRUE((*r)->Get("layer.8.w").ok());
  EXPECT_EQ(server_->CountRequestsSince(mark, "/models/many.tsafe"), before);
}

TEST_F(RemoteFileTest, EveryFormatThroughTheTable) {
  auto d = DescribeFile("s3://models/small.safetensors");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->format, Format::kSafetensors);
  EXPECT_EQ(d->tensor_count, 1000u);
  auto t = ReadTensor("s3://models/small.safetensors", Format::kUnknown, "layer.999.w");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  float v[2];
  std::memcpy(v, t->data.data(), 8);
  EXPECT_EQ(v[0], 999.0f);
  EXPECT_TRUE(VerifyFile("s3://models/many.tsafe").ok());
}

TEST_F(RemoteFileTest, MissingObjectNamesTheUrl) {
  auto r = Reader::Open("s3://models/absent.tsafe");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(),
              HasSubstr("S3 GET s3://models/absent.tsafe last 1048576 bytes: HTTP 404 NoSuchKey"));
}

TEST(RemoteHttpFileTest, SafetensorsOverHttp) {
  tensorsafe::testing::TempDir tmp;
  fs::create_directories(tmp.path() / "www");
  // A small file from the format table, served by nginx.
  TensorSet set;
  const float v[3] = {1, 2, 3};
  Tensor t;
  t.info.name = "x";
  t.info.dtype = DType::kF32;
  t.info.shape = {3};
  t.info.data_length = 12;
  t.data = std::as_bytes(std::span(v));
  set.tensors.push_back(t);
  const std::string local = (tmp.path() / "www" / "w.safetensors").string();
  ASSERT_TRUE(WriteTensorSet(local, set, Format::kSafetensors).ok());
  tensorsafe::testing::NginxServer nginx((tmp.path() / "www").string());
  const std::string url = nginx.Url("data") + "w.safetensors";
  auto got = ReadTensor(url, Format::kUnknown, "x");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->data.size(), 12u);
  EXPECT_EQ(std::memcmp(got->data.data(), v, 12), 0);
  auto missing = DescribeFile(nginx.Url("data") + "nope.safetensors");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors last 1048576 bytes: HTTP 404"));
}

}  // namespace
}  // namespace tensorsafe::internal
