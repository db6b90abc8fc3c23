// The S3 client against a real S3 server (moto_server on 127.0.0.1, counted
// at the server from its request log) and nginx (a static server that
// ignores signatures, for 5xx and for a server killed mid-transfer).
#include "remote/s3_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/moto_server.h"
#include "support/nginx_server.h"
#include "support/temp_dir.h"

namespace tensorsafe::internal::s3 {
namespace {

namespace fs = std::filesystem;
using tensorsafe::testing::MotoServer;
using tensorsafe::testing::NginxServer;
using ::testing::HasSubstr;

std::string RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

S3Config ConfigFor(const std::string& endpoint) {
  S3Config c;
  c.credentials = {"testing", "testing", ""};
  c.endpoint = endpoint;
  c.path_style = true;
  c.credentials_source = "test";
  return c;
}

S3ClientOptions FastRetries() {
  S3ClientOptions o;
  o.max_attempts = 3;
  o.initial_backoff = std::chrono::milliseconds(10);
  o.max_backoff = std::chrono::milliseconds(50);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.stall_timeout = std::chrono::seconds(5);
  return o;
}

class S3ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!MotoServer::Binary().empty()) server_ = new MotoServer();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "no moto_server (pip install -r requirements-dev.txt)";
    client_ = S3Client::Create(ConfigFor(server_->Endpoint()), FastRetries());
    // One bucket per test: tests never see each other's keys.
    bucket_ = "t" + std::to_string(counter_++) + "-bucket";
    ASSERT_TRUE(client_->CreateBucket(bucket_).ok());
  }
  S3Location Loc(const std::string& key) const { return {bucket_, key}; }

  static MotoServer* server_;
  static int counter_;
  std::unique_ptr<S3Client> client_;
  std::string bucket_;
};
MotoServer* S3ClientTest::server_ = nullptr;
int S3ClientTest::counter_ = 0;

TEST_F(S3ClientTest, PutHeadGetRoundTrip) {
  const std::string data = RandomBytes(10'000, 1);
  ASSERT_TRUE(client_->Put(Loc("dir/a b+c.bin"), Bytes(data)).ok());
  auto info = client_->Head(Loc("dir/a b+c.bin"));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 10'000u);
  EXPECT_FALSE(info->etag.empty());
  std::string part(100, '\0');
  ASSERT_TRUE(client_->ReadRange(Loc("dir/a b+c.bin"), 4321, std::as_writable_bytes(std::span(part))).ok());
  EXPECT_EQ(part, data.substr(4321, 100));
  auto all = client_->GetObject(Loc("dir/a b+c.bin"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, data);
}

TEST_F(S3ClientTest, LargeReadsUseParallelRangedGets) {
  const std::string data = RandomBytes(3 << 20, 2);
  ASSERT_TRUE(client_->Put(Loc("big"), Bytes(data)).ok());
  S3ClientOptions o = FastRetries();
  o.parallel_chunk = 256 << 10;
  o.parallelism = 4;
  auto client = S3Client::Create(ConfigFor(server_->Endpoint()), o);
  const int mark = server_->LogLines();
  std::string out(data.size() - 1000, '\0');
  ASSERT_TRUE(client->ReadRange(Loc("big"), 1000, std::as_writable_bytes(std::span(out))).ok());
  EXPECT_EQ(out, data.substr(1000));
  // ceil((3 MiB - 1000) / 256 KiB) = 12 pieces, each one GET at the server.
  EXPECT_EQ(server_->CountRequestsSince(mark, "GET /" + bucket_ + "/big"), 12);
  EXPECT_EQ(client->requests(), 12u);
}

TEST_F(S3ClientTest, MultipartUploadAboveThreshold) {
  const std::string data = RandomBytes(12 << 20, 3);  // 5 + 5 + 2 MiB
  S3ClientOptions o = FastRetries();
  o.multipart_threshold = 6 << 20;
  o.part_size = 5 << 20;
  auto client = S3Client::Create(ConfigFor(server_->Endpoint()), o);
  const int mark = server_->LogLines();
  ASSERT_TRUE(client->Put(Loc("ckpt/model.tsafe"), Bytes(data)).ok());
  EXPECT_EQ(server_->CountRequestsSince(mark, "PUT /" + bucket_ + "/ckpt/model.tsafe?partNumber="), 3);
  EXPECT_EQ(server_->CountRequestsSince(mark, "POST /" + bucket_ + "/ckpt/model.tsafe?uploads"), 1);
  EXPECT_EQ(server_->CountRequestsSince(mark, "POST /" + bucket_ + "/ckpt/model.tsafe?uploadId="), 1);
  auto info = client->Head(Loc("ckpt/model.tsafe"));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, data.size());
  EXPECT_THAT(info->etag, HasSubstr("-3"));  // S3's multipart ETag: "<md5 of md5s>-<parts>"
  std::string back(data.size(), '\0');
  ASSERT_TRUE(client->ReadRange(Loc("ckpt/model.tsafe"), 0, std::as_writable_bytes(std::span(back))).ok());
  EXPECT_TRUE(back == data);
}

// Copies stay on the server: one CopyObject, or above copy_part_size a
// multipart copy whose parts name byte ranges of the source.
TEST_F(S3ClientTest, CopiesOnTheServerWholeOrInParts) {
  const std::string data = RandomBytes(12 << 20, 4);  // 5 + 5 + 2 MiB in parts
  ASSERT_TRUE(client_->Put(Loc("src/a b.tsafe"), Bytes(data)).ok());
  const int mark = server_->LogLines();
  ASSERT_TRUE(client_->Copy(Loc("src/a b.tsafe"), Loc("dst/one.tsafe"), data.size()).ok());
  EXPECT_EQ(server_->CountRequestsSince(mark, "PUT /" + bucket_ + "/dst/one.tsafe"), 1);
  S3ClientOptions o = FastRetries();
  o.copy_part_size = 5 << 20;
  auto client = S3Client::Create(ConfigFor(server_->Endpoint()), o);
  const int parts = server_->LogLines();
  ASSERT_TRUE(client->Copy(Loc("src/a b.tsafe"), Loc("dst/parts.tsafe"), data.size()).ok());
  EXPECT_EQ(server_->CountRequestsSince(parts, "PUT /" + bucket_ + "/dst/parts.tsafe?partNumber="), 3);
  for (const char* key : {"dst/one.tsafe", "dst/parts.tsafe"}) {
    auto back = client_->GetObject(Loc(key));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == data) << key;
  }
  EXPECT_THAT(client_->Head(Loc("dst/parts.tsafe"))->etag, HasSubstr("-3"));
  // A missing source is the server's error, naming the destination and the source.
  Status missing = client_->Copy(Loc("src/none"), Loc("dst/none"), 10);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("dst/none"));
  EXPECT_THAT(missing.message(), HasSubstr("src/none"));
  EXPECT_EQ(client_->Head(Loc("dst/none")).status().code(), StatusCode::kNotFound);
}

TEST_F(S3ClientTest, ListFollowsContinuationTokens) {
  for (int i = 0; i < 25; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "p/%03d", 24 - i);
    ASSERT_TRUE(client_->Put(Loc(name), Bytes(std::string(i, 'x'))).ok());
  }
  ASSERT_TRUE(client_->Put(Loc("q/other"), Bytes("y")).ok());
  S3ClientOptions o = FastRetries();
  o.list_page_size = 10;
  auto client = S3Client::Create(ConfigFor(server_->Endpoint()), o);
  const int mark = server_->LogLines();
  auto list = client->List(bucket_, "p/");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 25u);
  EXPECT_EQ((*list)[0].key, "p/000");
  EXPECT_EQ((*list)[0].size, 24u);
  EXPECT_EQ((*list)[24].key, "p/024");
  EXPECT_EQ(server_->CountRequestsSince(mark, "GET /" + bucket_ + "?"), 3);
  auto none = client->List(bucket_, "zzz/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(S3ClientTest, MissingObjectAndBucketNameTheUrl) {
  auto h = client_->Head(Loc("no/such.tsafe"));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(h.status().message(), HasSubstr("S3 HEAD s3://" + bucket_ + "/no/such.tsafe: HTTP 404"));
  std::string buf(10, '\0');
  Status g = client_->ReadRange(Loc("no/such.tsafe"), 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(g.code(), StatusCode::kNotFound);
  EXPECT_THAT(g.message(), HasSubstr("S3 GET s3://" + bucket_ + "/no/such.tsafe bytes 0-9: HTTP 404 NoSuchKey"));
  auto b = client_->List("no-such-bucket", "");
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("NoSuchBucket"));
}

TEST_F(S3ClientTest, RangePastTheEnd) {
  ASSERT_TRUE(client_->Put(Loc("small"), Bytes("0123456789")).ok());
  std::string buf(5, '\0');
  Status s = client_->ReadRange(Loc("small"), 20, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("s3://" + bucket_ + "/small bytes 20-24: HTTP 416"));
}

TEST_F(S3ClientTest, DeleteRemoves) {
  ASSERT_TRUE(client_->Put(Loc("gone"), Bytes("x")).ok());
  ASSERT_TRUE(client_->Delete(Loc("gone")).ok());
  EXPECT_EQ(client_->Head(Loc("gone")).status().code(), StatusCode::kNotFound);
}

// moto checks signatures and keys only with its IAM emulation on
// (INITIAL_NO_AUTH_ACTION_COUNT=0): then an unknown key is refused.
TEST(S3ClientAuthTest, BadCredentialsAreNamed) {
  if (MotoServer::Binary().empty()) GTEST_SKIP() << "no moto_server";
  ::setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0", 1);
  std::unique_ptr<MotoServer> server;
  try {
    server = std::make_unique<MotoServer>();
  } catch (...) {
    ::unsetenv("INITIAL_NO_AUTH_ACTION_COUNT");
    throw;
  }
  ::unsetenv("INITIAL_NO_AUTH_ACTION_COUNT");
  S3Config c = ConfigFor(server->Endpoint());
  c.credentials = {"AKIANOTAREALKEY00000", "wrong", ""};
  c.credentials_source = "environment";
  auto client = S3Client::Create(c, FastRetries());
  auto h = client->List("any-bucket", "");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kIOError);
  EXPECT_EQ(h.status().error_number(), EACCES);
  EXPECT_THAT(h.status().message(), HasSubstr("S3 GET s3://any-bucket/"));
  EXPECT_THAT(h.status().message(), HasSubstr("HTTP 403 InvalidAccessKeyId"));
  EXPECT_THAT(h.status().message(), HasSubstr("(credentials: environment)"));
}

// Retries: a server that always answers 500 (nginx's /error500/ location,
// reached as bucket "error500"), and no server at all.
TEST(S3ClientRetryTest, ServerErrorsRetriedAndCounted) {
  tensorsafe::testing::TempDir tmp;
  fs::create_directories(tmp.path() / "www");
  NginxServer nginx((tmp.path() / "www").string());
  auto client = S3Client::Create(ConfigFor("http://127.0.0.1:" + std::to_string(nginx.port())), FastRetries());
  std::string buf(4, '\0');
  Status s = client->ReadRange({"error500", "k.bin"}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(),
              HasSubstr("S3 GET s3://error500/k.bin bytes 0-3: HTTP 500; failed after 3 attempts (2 retries)"));
  EXPECT_EQ(nginx.WaitForRequests("/error500/k.bin", 3), 3);
  EXPECT_EQ(client->requests(), 3u);

  nginx.Stop();
  s = client->ReadRange({"data", "k.bin"}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_THAT(s.message(), HasSubstr("Couldn't connect to server"));
  EXPECT_THAT(s.message(), HasSubstr("failed after 3 attempts (2 retries)"));
}

// A server killed mid-transfer: the body is cut short, the retries find no
// server, and the caller gets an error (never a short buffer taken as data).
TEST(S3ClientRetryTest, ServerDiesMidTransfer) {
  tensorsafe::testing::TempDir tmp;
  fs::create_directories(tmp.path() / "www");
  const std::string data = RandomBytes(4 << 20, 4);
  { std::ofstream(tmp.path() / "www" / "obj", std::ios::binary) << data; }
  tensorsafe::testing::NginxOptions no;
  no.limit_rate = "512k";
  NginxServer nginx((tmp.path() / "www").string(), no);
  S3ClientOptions o = FastRetries();
  o.parallel_chunk = 64 << 20;  // one connection
  auto client = S3Client::Create(ConfigFor("http://127.0.0.1:" + std::to_string(nginx.port())), o);
  std::string out(data.size(), '\0');
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    nginx.Kill();
  });
  Status s = client->ReadRange({"slow", "obj"}, 0, std::as_writable_bytes(std::span(out)));
  killer.join();
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("S3 GET s3://slow/obj bytes 0-4194303: "));
  EXPECT_THAT(s.message(), HasSubstr("failed after 3 attempts (2 retries)"));
}

// A server that promises 100 bytes and sends 40 before closing: every
// attempt is cut short, the error says so and counts the attempts, and the
// caller's buffer is never taken as data.
TEST(S3ClientRetryTest, TruncatedBodyIsRetriedThenAnError) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  std::atomic<int> served{0};
  std::thread server([&] {
    for (int i = 0; i < 3; ++i) {
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      char req[4096];
      (void)::recv(c, req, sizeof(req), 0);
      const std::string resp =
          "HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes 0-99/100\r\n\r\n" +
          std::string(40, 'x');
      (void)::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
      ++served;
    }
  });
  auto client = S3Client::Create(ConfigFor("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port))), FastRetries());
  std::string out(100, '\0');
  Status s = client->ReadRange({"bkt", "cut.bin"}, 0, std::as_writable_bytes(std::span(out)));
  server.join();
  ::close(fd);
  EXPECT_EQ(served.load(), 3);
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("S3 GET s3://bkt/cut.bin bytes 0-99: "));
  EXPECT_THAT(s.message(), HasSubstr("after 40 body bytes; failed after 3 attempts (2 retries)"));
}

}  // namespace
}  // namespace tensorsafe::internal::s3
