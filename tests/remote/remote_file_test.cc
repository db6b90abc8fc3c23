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
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/objects.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/url_handler.h"
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

// A set of one 1-D tensor viewing `bytes` (4-byte elements).
TensorSet OneTensor(const std::string& name, DType dtype, std::span<const std::byte> bytes) {
  Tensor t;
  t.info.name = name;
  t.info.dtype = dtype;
  t.info.shape = {bytes.size() / 4};
  t.info.data_length = bytes.size();
  t.data = bytes;
  TensorSet set;
  set.tensors.push_back(std::move(t));
  return set;
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

// 6 tensors of 5 MiB written as a 3-shard checkpoint of `format` and
// uploaded under `prefix`; returns the index URL. values[i][j] = i * 1000 + j % 997.
std::string UploadCheckpoint(const fs::path& tmp, s3::S3Client& client, Format format, const std::string& prefix,
                             std::vector<std::vector<float>>& values) {
  constexpr std::size_t kFloats = 5u << 18;  // 5 MiB of f32
  TensorSet set;
  values.assign(6, std::vector<float>(kFloats));
  for (std::size_t i = 0; i < 6; ++i) {
    for (std::size_t j = 0; j < kFloats; ++j) values[i][j] = static_cast<float>(i * 1000 + j % 997);
    Tensor t;
    t.info.name = "w" + std::to_string(i);
    t.info.dtype = DType::kF32;
    t.info.shape = {kFloats};
    t.info.data_length = kFloats * 4;
    t.data = std::as_bytes(std::span(values[i]));
    set.tensors.push_back(std::move(t));
  }
  sharded::WriteOptions o;
  o.format = format;
  o.max_shard_size = 11'000'000;  // two tensors a shard
  o.sync = false;
  const fs::path dir = tmp / prefix;
  auto stats = sharded::WriteSharded(dir.string(), set, o);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->files.size(), 3u);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string bytes = Slurp(e.path());
    EXPECT_TRUE(
        client.Put({"models", prefix + "/" + e.path().filename().string()}, std::as_bytes(std::span(bytes))).ok());
  }
  return "s3://models/" + prefix + "/" + fs::path(stats->index_path).filename().string();
}

// Opening a checkpoint at a URL reads each shard's header (safetensors) or
// index (.tsafe), never its data: 30 MiB of shards open for about 2 MiB a
// shard (the object's last MiB, which every open fetches, and its first).
TEST_F(RemoteFileTest, ShardedCheckpointOpensByItsHeadersAndFetchesOnlyWhatIsRead) {
  for (Format format : {Format::kSafetensors, Format::kTsafe}) {
    SCOPED_TRACE(FormatName(format));
    std::vector<std::vector<float>> values;
    const std::string url =
        UploadCheckpoint(tmp_->path(), *client_, format, "ck-" + std::string(FormatName(format)), values);
    ResetRemoteState();
    std::uint64_t before = RemoteBytesFetched();
    auto ck = sharded::Open(url);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    const std::uint64_t opened = RemoteBytesFetched() - before;
    std::printf("opened %s (3 shards, 31 MB) fetching %llu bytes\n", url.c_str(),
                static_cast<unsigned long long>(opened));
    EXPECT_LE(opened, 3 * (std::uint64_t{2} << 20) + (1u << 20)) << opened;
    ASSERT_EQ(ck->shards.size(), 3u);
    ASSERT_EQ(ck->set.tensors.size(), 6u);
    for (const sharded::ShardInfo& s : ck->shards) EXPECT_NE(s.file, nullptr) << s.path;
    for (const Tensor& t : ck->set.tensors) EXPECT_TRUE(t.data.empty()) << t.info.name;

    // One tensor: its 5 MiB, no more.
    std::vector<Tensor> one{ck->set.tensors[3]};
    const std::uint32_t shard[1] = {ck->shard_of[3]};
    before = RemoteBytesFetched();
    ASSERT_TRUE(sharded::FetchData(ck->shards, shard, one).ok());
    EXPECT_EQ(RemoteBytesFetched() - before, 5u << 20);
    ASSERT_EQ(one[0].data.size(), 5u << 20);
    EXPECT_EQ(std::memcmp(one[0].data.data(), values[3].data(), 5u << 20), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(one[0].data.data()) % 4096, one[0].info.data_offset % 4096);

    // The same into a scratch file (convert's path): equal bytes, aligned as
    // in the file, and nothing left in the directory.
    std::vector<Tensor> two{ck->set.tensors[3], ck->set.tensors[4]};
    const std::uint32_t shards[2] = {ck->shard_of[3], ck->shard_of[4]};
    const fs::path scratch = tmp_->path() / ("scratch-" + std::string(FormatName(format)));
    fs::create_directory(scratch);
    sharded::FetchOptions fo;
    fo.scratch_dir = scratch.string();
    ASSERT_TRUE(sharded::FetchData(ck->shards, shards, two, fo).ok());
    for (std::size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(two[k].data.size(), 5u << 20);
      EXPECT_EQ(std::memcmp(two[k].data.data(), values[3 + k].data(), 5u << 20), 0);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(two[k].data.data()) % 4096, two[k].info.data_offset % 4096);
    }
    EXPECT_TRUE(fs::is_empty(scratch));
    fo.scratch_dir = (scratch / "absent").string();
    std::vector<Tensor> three{ck->set.tensors[3]};
    const Status no_dir = sharded::FetchData(ck->shards, shard, three, fo);
    EXPECT_EQ(no_dir.code(), StatusCode::kIOError) << no_dir.ToString();
    EXPECT_NE(no_dir.message().find("cannot create a scratch file"), std::string::npos) << no_dir.ToString();
    EXPECT_NE(no_dir.message().find(ck->shards[shard[0]].path), std::string::npos) << no_dir.ToString();

    // The same through positional reads, and everything through the table.
    std::vector<float> got(values[5].size());
    const std::size_t which[1] = {5};
    const std::span<std::byte> out[1] = {std::as_writable_bytes(std::span(got))};
    ASSERT_TRUE(sharded::ReadTensors(*ck, which, out).ok());
    EXPECT_EQ(got, values[5]);
    auto all = ReadTensorSet(url);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    ASSERT_EQ(all->tensors.size(), 6u);
    for (const Tensor& t : all->tensors) {
      const std::size_t i = static_cast<std::size_t>(t.info.name[1] - '0');
      ASSERT_EQ(t.data.size(), 5u << 20) << t.info.name;
      EXPECT_EQ(std::memcmp(t.data.data(), values[i].data(), t.data.size()), 0) << t.info.name;
    }
    EXPECT_TRUE(sharded::Verify(*ck).ok());
  }
}

// A checkpoint at a URL converts into a sharded output one output shard at
// a time: the tensors of a shard are fetched as it is written, so a
// conversion that fails at the second shard has not fetched the third.
TEST_F(RemoteFileTest, ShardedUrlConvertsShardByShard) {
  std::vector<std::vector<float>> values;
  const std::string url = UploadCheckpoint(tmp_->path(), *client_, Format::kSafetensors, "convert-src", values);
  ConvertOptions o;
  o.to = Format::kTsafe;
  o.sync = false;
  const fs::path out = tmp_->path() / "converted";
  ResetRemoteState();
  std::uint64_t before = RemoteBytesFetched();
  auto stats = Convert(url, (out / "model.tsafe.index.json").string(), o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->tensor_count, 6u);
  EXPECT_EQ(stats->data_bytes, 6u * (5u << 20));
  const std::uint64_t fetched = RemoteBytesFetched() - before;
  EXPECT_GE(fetched, 6u * (5u << 20));
  EXPECT_LE(fetched, 6u * (5u << 20) + (8u << 20)) << "each byte once, and the headers";
  auto back = ReadTensorSet((out / "model.tsafe.index.json").string());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tensors.size(), 6u);
  for (const Tensor& t : back->tensors) {
    const std::size_t i = static_cast<std::size_t>(t.info.name[1] - '0');
    EXPECT_EQ(std::memcmp(t.data.data(), values[i].data(), t.data.size()), 0) << t.info.name;
  }

  const fs::path blocked = tmp_->path() / "blocked";
  fs::create_directories(blocked / "model-00002-of-00003.tsafe");  // the second shard cannot be renamed into place
  ResetRemoteState();
  before = RemoteBytesFetched();
  auto failed = Convert(url, (blocked / "model.tsafe.index.json").string(), o);
  EXPECT_FALSE(failed.ok());
  // Opening costs about 6 MiB, each shard 10 MiB: 27 MiB for two, 37 for three.
  EXPECT_LT(RemoteBytesFetched() - before, 32u << 20) << "the third shard was fetched";
}

// What is wrong with a shard at a URL is named with its URL: a .tsafe
// shard with a flipped byte (Verify, which reads it), a safetensors shard
// cut short (Open), a shard of another format.
TEST_F(RemoteFileTest, DamagedShardsAtAUrlAreNamed) {
  std::vector<std::vector<float>> values;
  const std::string tsafe = UploadCheckpoint(tmp_->path(), *client_, Format::kTsafe, "bad-tsafe", values);
  const std::string shard = "bad-tsafe/model-00002-of-00003.tsafe";
  auto reader = Reader::Open((tmp_->path() / shard).string());
  ASSERT_TRUE(reader.ok());
  auto info = (*reader)->Find("w3");
  ASSERT_TRUE(info.ok());
  std::string bytes = Slurp(tmp_->path() / shard);
  bytes[info->data_offset + 12345] ^= 0x10;
  Upload(shard, bytes);
  ResetRemoteState();
  auto ck = sharded::Open(tsafe);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  Status v = sharded::Verify(*ck);
  EXPECT_EQ(v.code(), StatusCode::kCorruption);
  EXPECT_THAT(v.message(), HasSubstr("s3://models/" + shard + ": tensor \"w3\": data checksum"));

  const std::string st = UploadCheckpoint(tmp_->path(), *client_, Format::kSafetensors, "bad-st", values);
  const std::string cut = "bad-st/model-00003-of-00003.safetensors";
  Upload(cut, Slurp(tmp_->path() / cut).substr(0, 6u << 20));
  ResetRemoteState();
  auto opened = sharded::Open(st);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(opened.status().message(), HasSubstr("s3://models/" + cut + ": "));

  Upload(cut, Slurp(tmp_->path() / "bad-tsafe/model-00003-of-00003.tsafe"));
  ResetRemoteState();
  opened = sharded::Open(st);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(opened.status().message(),
              HasSubstr("shard \"model-00003-of-00003.safetensors\" is a tsafe file, not safetensors"));
}

TEST_F(RemoteFileTest, MissingObjectNamesTheUrl) {
  auto r = Reader::Open("s3://models/absent.tsafe");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(),
              HasSubstr("S3 GET s3://models/absent.tsafe last 1048576 bytes: HTTP 404 NoSuchKey"));
}

// A file written to a URL goes to a local temporary file under $TMPDIR,
// stored whole when it is published: the object holds the bytes of a local
// write, a failed store leaves no object and no local file, and an object
// is never updated in place.
TEST_F(RemoteFileTest, FilesArePublishedAtUrlsWhole) {
  const fs::path tmpdir = tmp_->path() / "tmpdir";
  fs::create_directories(tmpdir);
  ::setenv("TMPDIR", tmpdir.c_str(), 1);
  const std::int32_t v[4] = {1, -2, 3, -4};
  const TensorSet set = OneTensor("v", DType::kI32, std::as_bytes(std::span(v)));
  const std::string local = (tmp_->path() / "published.tsafe").string();
  ASSERT_TRUE(WriteTensorSet(local, set, Format::kTsafe).ok());
  const s3::S3Location loc{"models", "published/w.tsafe"};
  ASSERT_TRUE(WriteTensorSet(loc.Url(), set, Format::kTsafe).ok());
  auto stored = client_->GetObject(loc);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(*stored, Slurp(local));
  EXPECT_TRUE(fs::is_empty(tmpdir));

  const Status no_bucket = WriteTensorSet("s3://absent-bucket/w.tsafe", set, Format::kTsafe);
  EXPECT_EQ(no_bucket.code(), StatusCode::kNotFound) << no_bucket.ToString();
  EXPECT_THAT(no_bucket.message(), HasSubstr("s3://absent-bucket/w.tsafe"));
  EXPECT_TRUE(fs::is_empty(tmpdir));
  const Status http = WriteTensorSet("http://127.0.0.1:9/w.tsafe", set, Format::kTsafe);
  EXPECT_EQ(http.code(), StatusCode::kUnsupported) << http.ToString();
  auto update = Env::Default()->OpenForUpdate(loc.Url());
  EXPECT_EQ(update.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(update.status().message(), HasSubstr("replaced whole, not updated in place"));

  ASSERT_TRUE(Env::Default()->Remove(loc.Url()).ok());
  EXPECT_EQ(client_->GetObject(loc).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Env::Default()->Remove(loc.Url()).ok());  // none there: OK
  ::unsetenv("TMPDIR");
}

// Documents beside tensor files (tensorsafe/objects.h): published whole at
// a path or a URL, read back whole within a limit, listed by prefix.
TEST_F(RemoteFileTest, DocumentsArePublishedAndReadWhole) {
  const std::string text = "{\"format\": \"doc\"}";
  const auto bytes = std::as_bytes(std::span(text));
  const std::string local = (tmp_->path() / "doc.json").string();
  ASSERT_TRUE(PublishBytes(local, bytes, /*sync=*/true).ok());
  EXPECT_EQ(Slurp(local), text);
  for (const std::string& path : {local, s3::S3Location{"models", "docs/a/doc.json"}.Url()}) {
    ASSERT_TRUE(PublishBytes(path, bytes, /*sync=*/false).ok()) << path;
    auto got = ReadWhole(path, 1024);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, text);
    auto over = ReadWhole(path, 5);
    EXPECT_EQ(over.status().code(), StatusCode::kLimitExceeded);
    EXPECT_THAT(over.status().message(), HasSubstr(path + ": 17 bytes exceeds the limit of 5"));
  }
  // CopyFile: on the server between s3:// objects, else through a local file.
  const std::string copied = (tmp_->path() / "copied.json").string();
  ASSERT_TRUE(CopyFile("s3://models/docs/a/doc.json", copied, /*sync=*/true).ok());
  EXPECT_EQ(Slurp(copied), text);
  ASSERT_TRUE(CopyFile(copied, "s3://models/docs/b/doc.json", false).ok());
  ASSERT_TRUE(CopyFile("s3://models/docs/b/doc.json", "s3://models/docs/c/doc.json", false).ok());
  EXPECT_EQ(*ReadWhole("s3://models/docs/c/doc.json", 1024), text);
  EXPECT_EQ(CopyFile(local + ".none", copied + "2", false).code(), StatusCode::kIOError);
  EXPECT_FALSE(fs::exists(copied + "2"));
  ASSERT_TRUE(PublishBytes("s3://models/docs/ab/doc.json", bytes, false).ok());
  auto listed = ListUrls("s3://models/docs/a/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::vector<std::string>{"s3://models/docs/a/doc.json"});
  auto size = UrlObjectSize("s3://models/docs/ab/doc.json");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, text.size());
  EXPECT_EQ(ReadWhole("s3://models/docs/none.json", 1024).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadWhole(local + ".none", 1024).status().code(), StatusCode::kNotFound);
  const Status http = PublishBytes("http://127.0.0.1:9/doc.json", bytes, false);
  EXPECT_EQ(http.code(), StatusCode::kUnsupported) << http.ToString();
  EXPECT_FALSE(fs::exists(local + ".none"));
  std::size_t left = 0;  // no temporary file of the local publishes
  for (const auto& e : fs::directory_iterator(tmp_->path()))
    left += e.path().string().find(".tmp") != std::string::npos;
  EXPECT_EQ(left, 0u);
}

TEST(RemoteHttpFileTest, SafetensorsOverHttp) {
  tensorsafe::testing::TempDir tmp;
  fs::create_directories(tmp.path() / "www");
  // A small file from the format table, served by nginx.
  const float v[3] = {1, 2, 3};
  const TensorSet set = OneTensor("x", DType::kF32, std::as_bytes(std::span(v)));
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
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors last 65536 bytes: HTTP 404"));
}

}  // namespace
}  // namespace tensorsafe::internal
