// The remote-shard cache over TLS, against a scripted server that lies about
// lengths or never ends a body, and its options (remote_test.cc has
// downloads from a well-behaved nginx).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <thread>

#include "dataset/remote_fixture.h"

namespace tensorsafe::dataset {
namespace {

using namespace remote_test;  // NOLINT: the fixture's helpers and names

TEST(RemoteTlsTest, HttpsWithTheServersCertificate) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "www");
  const std::string content = RandomBytes(70'000, 40);
  WriteFileBytes((tmp.path() / "www" / "s.bin").string(), content);
  const RemoteFile f{"s.bin", content.size(), tensorsafe::internal::Hash64(std::string_view(content))};
  NginxOptions no;
  no.tls = true;
  NginxServer server((tmp.path() / "www").string(), no);
  ShardCacheOptions o;
  o.cache_dir = tmp.File("cache");
  o.max_attempts = 3;
  o.initial_backoff = std::chrono::milliseconds(10);
  {
    // Without the CA: the certificate does not verify, and that is not retried.
    auto cache = ShardCache::Open(server.HttpsUrl("data"), o);
    ASSERT_TRUE(cache.ok());
    auto r = (*cache)->Fetch(f);
    ASSERT_EQ(r.status().code(), StatusCode::kIOError);
    EXPECT_THAT(r.status().message(), HasSubstr("failed after 1 attempt(s)"));
    EXPECT_THAT(r.status().message(), HasSubstr("SSL"));
  }
  o.ca_file = server.cert_path();
  auto cache = ShardCache::Open(server.HttpsUrl("data"), o);
  ASSERT_TRUE(cache.ok());
  auto r = (*cache)->Fetch(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(r->path()), content);
}

// A scripted HTTP server for what nginx will not do: lie about lengths and
// stream without end. Each connection gets `response` (then `endless`
// chunks if set) and is closed.
class HostileServer {
 public:
  HostileServer(std::string response, bool endless) : response_(std::move(response)), endless_(endless) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_, 8) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("HostileServer: bind/listen failed");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HostileServer() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/d/"; }
  int connections() const { return connections_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      ++connections_;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      bool ok = ::send(c, response_.data(), response_.size(), MSG_NOSIGNAL) >= 0;
      const std::string chunk = "1000\r\n" + std::string(4096, 'z') + "\r\n";
      for (int i = 0; endless_ && ok && !stop_ && i < 1'000'000; ++i) {
        ok = ::send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) >= 0;
      }
      ::close(c);
    }
  }
  std::string response_;
  bool endless_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

ShardCacheOptions HostileOptions(const TempDir& tmp) {
  ShardCacheOptions o;
  o.cache_dir = tmp.File("cache");
  o.max_attempts = 2;
  o.initial_backoff = std::chrono::milliseconds(10);
  o.max_index_bytes = 4096;
  return o;
}

TEST(RemoteHostileTest, EndlessBodyIsCutAtTheLimit) {
  TempDir tmp;
  HostileServer server("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true);
  auto cache = ShardCache::Open(server.Url(), HostileOptions(tmp));
  ASSERT_TRUE(cache.ok());
  auto index = (*cache)->FetchBytes("index.json");
  ASSERT_EQ(index.status().code(), StatusCode::kLimitExceeded);
  EXPECT_EQ(index.status().message(), "GET " + server.Url() + "index.json: body exceeds the limit of 4096 bytes");
  auto shard = (*cache)->Fetch({"s.bin", 10'000, 0});
  ASSERT_EQ(shard.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(shard.status().message(),
            "GET " + server.Url() + "s.bin: server sends more than the 10000 bytes the index says; not cached");
  EXPECT_TRUE(ListDir(tmp.path() / "cache" / "files").empty());
  EXPECT_TRUE(ListDir(tmp.path() / "cache" / "tmp").empty());
}

TEST(RemoteHostileTest, CompleteButShortChunkedBodyIsCorruption) {
  TempDir tmp;
  HostileServer server("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false);
  auto cache = ShardCache::Open(server.Url(), HostileOptions(tmp));
  ASSERT_TRUE(cache.ok());
  auto r = (*cache)->Fetch({"s.bin", 6, tensorsafe::internal::Hash64(std::string_view("hello!"))});
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(r.status().message(), "GET " + server.Url() + "s.bin: received 5 bytes, the index says 6; not cached");
  EXPECT_EQ(server.connections(), 1);  // not retried
}

TEST(RemoteHostileTest, BodyCutShortIsRetriedThenReported) {
  TempDir tmp;
  HostileServer server("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly forty bytes then the server hangs up",
                       false);
  auto cache = ShardCache::Open(server.Url(), HostileOptions(tmp));
  ASSERT_TRUE(cache.ok());
  auto r = (*cache)->Fetch({"s.bin", 100, 0});
  ASSERT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_THAT(r.status().message(), HasSubstr("GET " + server.Url() +
                                              "s.bin: failed after 2 attempt(s): "
                                              "Transferred a partial file"));
  EXPECT_THAT(r.status().message(), HasSubstr("received 41 bytes of 100"));
  EXPECT_EQ(server.connections(), 2);
  EXPECT_TRUE(ListDir(tmp.path() / "cache" / "tmp").empty());
}

TEST(RemoteOptionsTest, BadOptionsAreRejected) {
  ShardCacheOptions o;
  EXPECT_EQ(ShardCache::Open("http://h/", o).status().code(), StatusCode::kInvalidArgument);
  TempDir tmp;
  o.cache_dir = tmp.File("c");
  o.max_attempts = 0;
  auto r = ShardCache::Open("http://h/", o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("max_attempts 0"));
  o.max_attempts = 1;
  EXPECT_EQ(ShardCache::Open("gs://bucket/x", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ShardCache::Open("http://h/", o).ok());
}

TEST(RemoteOptionsTest, DefaultCacheDirFollowsTheEnvironment) {
  ::setenv("TENSORSAFE_CACHE_DIR", "/x/y", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/y");
  ::unsetenv("TENSORSAFE_CACHE_DIR");
  EXPECT_THAT(DefaultCacheDir(), HasSubstr("tensorsafe"));
}

}  // namespace
}  // namespace tensorsafe::dataset
