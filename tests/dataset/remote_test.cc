// The remote-shard cache against a real nginx (tests/support/nginx_server.h):
// downloads verified before use, retries, errors naming URL and numbers, the
// cache shared by threads and processes, LRU eviction with pins, URL safety.
#include "tensorsafe/dataset/remote.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "dataset/remote/url.h"
#include "support/nginx_server.h"
#include "support/temp_dir.h"
#include "util/hash.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::NginxOptions;
using testing::NginxServer;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

std::string Hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::vector<std::string> ListDir(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadFd(int fd, std::size_t n) {
  std::string s(n, '\0');
  std::size_t off = 0;
  while (off < n) {
    const ssize_t r = ::pread(fd, s.data() + off, n - off, static_cast<off_t>(off));
    if (r <= 0) break;
    off += static_cast<std::size_t>(r);
  }
  s.resize(off);
  return s;
}

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(www());
    server_ = std::make_unique<NginxServer>(www().string());
  }

  fs::path www() const { return tmp_.path() / "www"; }
  fs::path cache_dir() const { return tmp_.path() / "cache"; }

  // Puts `content` on the server and returns its index entry.
  RemoteFile Put(const std::string& name, const std::string& content) {
    const fs::path p = www() / name;
    fs::create_directories(p.parent_path());
    WriteFileBytes(p.string(), content);
    return RemoteFile{name, content.size(), tensorsafe::internal::Hash64(std::string_view(content))};
  }

  ShardCacheOptions Options() const {
    ShardCacheOptions o;
    o.cache_dir = cache_dir().string();
    o.max_attempts = 3;
    o.initial_backoff = std::chrono::milliseconds(20);
    o.max_backoff = std::chrono::milliseconds(100);
    o.connect_timeout = std::chrono::milliseconds(2000);
    return o;
  }

  std::unique_ptr<ShardCache> OpenCache(const std::string& location, ShardCacheOptions o) {
    auto r = ShardCache::Open(server_->Url(location), std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::unique_ptr<ShardCache> OpenCache(const std::string& location = "data") { return OpenCache(location, Options()); }

  std::vector<std::string> CachedFiles() const { return ListDir(cache_dir() / "files"); }
  std::vector<std::string> TempFiles() const { return ListDir(cache_dir() / "tmp"); }

  TempDir tmp_;
  std::unique_ptr<NginxServer> server_;
};

// --- URL safety (docs/SECURITY.md, "Paths and URLs") ------------------------

TEST(RemoteNameTest, AcceptsPlainRelativeNames) {
  for (const char* n :
       {"index.json", "shards/shard.00000.mds", "a/b/c-d_e~f+g=h,i@j", "...", "..a", ".hidden", "x.zstd"}) {
    EXPECT_TRUE(ValidateRelativeName(n).ok()) << n << ": " << ValidateRelativeName(n).ToString();
  }
}

TEST(RemoteNameTest, RejectsEveryEscape) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"http://evil.example/x", "':' at byte 4"},
      {"https://127.0.0.1/x", "absolute URLs"},
      {"HTTP://evil/x", "':'"},
      {"//evil.example/x", "absolute path"},
      {"/etc/passwd", "absolute path"},
      {"../secret", "\"..\" segment at byte 0"},
      {"a/../../secret", "\"..\" segment at byte 2"},
      {"a/./b", "\".\" segment at byte 2"},
      {"a/..", "\"..\" segment at byte 2"},
      {"%2e%2e/secret", "percent-encoding is not allowed at byte 0"},
      {"a/%2E%2E/b", "percent-encoding"},
      {"a%2fb", "percent-encoding"},
      {"..\\secret", "backslash at byte 2"},
      {"a\\b", "backslash"},
      {"a//b", "empty path segment at byte 2"},
      {"a/", "empty path segment at byte 2"},
      {std::string("a\0b", 3), "NUL byte at byte 1"},
      {"a\nb", "control byte at byte 1"},
      {"a?x=1", "query or fragment"},
      {"a#frag", "query or fragment"},
      {"C:x", "':'"},
      {"a b", "byte 0x20 at byte 1 is outside"},
      {"caf\xc3\xa9", "byte 0xc3 at byte 3 is outside"},
      {std::string(1025, 'a'), "more than the limit of 1024"},
  };
  for (const auto& [name, why] : cases) {
    Status s = ValidateRelativeName(name);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(s.message(), HasSubstr(why)) << name;
    EXPECT_THAT(s.message(), HasSubstr("remote file name")) << name;
  }
}

TEST(RemoteNameTest, BaseUrlIsNormalizedOrRejected) {
  auto ok = tensorsafe::internal::ParseBaseUrl("HTTP://Example.COM:8080/Data/set");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->full, "http://example.com:8080/Data/set/");
  auto bare = tensorsafe::internal::ParseBaseUrl("https://h");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->full, "https://h/");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ftp://h/x", "only http://, https://, s3:// and"},
      {"file:///etc", "only http://, https://, s3:// and"},
      {"/local/dir", "only http://, https://, s3:// and"},
      {"http:///x", "no host"},
      {"http://user:pw@h/x", "credentials"},
      {"http://h/x?a=1", "query or fragment"},
      {"http://h/x#f", "query or fragment"},
      {"http://h/a/../b", "\"..\""},
      {"http://h/a b", "invalid character in path"},
      {"http://h_/x", "invalid character in host"},
  };
  for (const auto& [url, why] : bad) {
    auto r = tensorsafe::internal::ParseBaseUrl(url);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << url;
  }
  EXPECT_TRUE(IsRemoteUrl("https://h/x"));
  EXPECT_TRUE(IsRemoteUrl("HTTP://h/x"));
  EXPECT_FALSE(IsRemoteUrl("/data/x"));
  EXPECT_TRUE(IsRemoteUrl("s3://b/x"));  // read through src/remote/ (docs/REMOTE.md)
  EXPECT_FALSE(IsRemoteUrl("gs://b/x"));
}

TEST(RemoteNameTest, JoinedUrlsStayUnderTheBase) {
  auto base = tensorsafe::internal::ParseBaseUrl("http://127.0.0.1:8080/ds/");
  ASSERT_TRUE(base.ok());
  auto u = tensorsafe::internal::JoinUrl(*base, "shards/a.bin");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, "http://127.0.0.1:8080/ds/shards/a.bin");
  for (const char* n : {"../x", "//other/x", "http://other/x", "%2e%2e/x", "a\\..\\..\\x"}) {
    EXPECT_EQ(tensorsafe::internal::JoinUrl(*base, n).status().code(), StatusCode::kInvalidArgument) << n;
  }
}

TEST_F(RemoteTest, LocalPathsNeverLeaveTheCacheDirectory) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  const fs::path files = fs::absolute(cache_dir() / "files");
  for (const char* n : {"a", "x/y/z.bin", "...", ".hidden", "deep/../../../../escape"}) {
    auto p = cache->LocalPathFor({n, 1, 2});
    if (std::string_view(n).find("..") != std::string_view::npos && std::string_view(n) != "...") {
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << n;
      continue;
    }
    ASSERT_TRUE(p.ok()) << n;
    EXPECT_EQ(fs::path(*p).parent_path(), files) << n;
    EXPECT_EQ(fs::path(*p).filename().string().find('/'), std::string::npos);
  }
  // The same name with different content hashes gets different local names:
  // a changed shard never reads as a stale cache hit.
  EXPECT_NE(*cache->LocalPathFor({"a", 1, 2}), *cache->LocalPathFor({"a", 1, 3}));
}

TEST_F(RemoteTest, EscapingNamesAreRejectedBeforeAnyRequest) {
  Put("inside.bin", "x");
  WriteFileBytes((tmp_.path() / "secret").string(), "secret");
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  for (const char* n : {"../secret", "%2e%2e/secret", "..%2fsecret", "/secret", "http://127.0.0.1/secret", "..\\secret",
                        "a//../secret"}) {
    auto r = cache->Fetch({n, 6, 0});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(cache->FetchBytes(n).status().code(), StatusCode::kInvalidArgument) << n;
  }
  EXPECT_EQ(server_->WaitForRequests("/", 0), 0);
  EXPECT_TRUE(CachedFiles().empty());
}

// --- Downloads ---------------------------------------------------------------

TEST_F(RemoteTest, DownloadsVerifiesAndPins) {
  const std::string content = RandomBytes(300'000, 1);
  const RemoteFile f = Put("shards/s0.bin", content);
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  auto r = cache->Fetch(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->valid());
  EXPECT_EQ(r->size(), content.size());
  EXPECT_EQ(ReadFileBytes(r->path()), content);
  EXPECT_EQ(ReadFd(r->fd(), content.size()), content);
  EXPECT_EQ(r->path(), *cache->LocalPathFor(f));
  EXPECT_THAT(r->path(), HasSubstr("s0.bin"));
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_TRUE(ListDir(cache_dir() / "locks").empty());
  EXPECT_TRUE(fs::exists(cache_dir() / "CACHEDIR.TAG"));
  // A second fetch is a hit: no new request.
  auto again = cache->Fetch(f);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->path(), r->path());
  EXPECT_EQ(server_->WaitForRequests("/data/shards/s0.bin", 1), 1);
}

TEST_F(RemoteTest, EmptyFileIsFine) {
  const RemoteFile f = Put("empty.bin", "");
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  auto r = cache->Fetch(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 0u);
  EXPECT_EQ(fs::file_size(r->path()), 0u);
}

TEST_F(RemoteTest, CacheHitNeedsNoNetwork) {
  const std::string content = RandomBytes(50'000, 2);
  const RemoteFile f = Put("s.bin", content);
  {
    auto cache = OpenCache();
    ASSERT_TRUE(cache);
    ASSERT_TRUE(cache->Fetch(f).ok());
  }
  const std::string url = server_->Url("data");
  server_->Stop();
  // A new cache object (as after a restart of the job) over the same
  // directory, with the server gone.
  auto r = ShardCache::Open(url, Options());
  ASSERT_TRUE(r.ok());
  auto hit = (*r)->Fetch(f);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(ReadFileBytes(hit->path()), content);
  // And a file that is not cached fails with the transport error.
  auto miss = (*r)->Fetch({"other.bin", 3, 4});
  EXPECT_EQ(miss.status().code(), StatusCode::kIOError);
  EXPECT_THAT(miss.status().message(), HasSubstr(url + "other.bin"));
  EXPECT_THAT(miss.status().message(), HasSubstr("failed after 3 attempt(s)"));
}

// "Durability": files enter the cache unsynced; after a reboot (a new boot
// id) each is hashed before its next use, a torn one is fetched again, and
// one the index has no hash for is dropped.
TEST_F(RemoteTest, AfterARebootEachFileIsCheckedBeforeUse) {
  const std::string good = RandomBytes(70'000, 21), torn = RandomBytes(80'000, 22), plain = RandomBytes(900, 23);
  const RemoteFile f_good = Put("good.bin", good), f_torn = Put("torn.bin", torn);
  RemoteFile f_plain = Put("plain.bin", plain);
  f_plain.check_xxh3 = false;  // checked by size only (WebDataset, MDS without hashes)
  ShardCacheOptions boot_a = Options();
  boot_a.boot_id = "boot-a";
  {
    auto cache = OpenCache("data", boot_a);
    ASSERT_TRUE(cache);
    for (const RemoteFile& f : {f_good, f_torn, f_plain}) ASSERT_TRUE(cache->Fetch(f).ok()) << f.name;
  }
  ASSERT_EQ(CachedFiles().size(), 3u);
  // The same boot: hits, with no server.
  const std::string url = server_->Url("data");
  server_->Stop();
  {
    auto r = ShardCache::Open(url, boot_a);
    ASSERT_TRUE(r.ok());
    for (const RemoteFile& f : {f_good, f_torn, f_plain}) ASSERT_TRUE((*r)->Fetch(f).ok()) << f.name;
  }
  // A crash left zeros in the middle of one file (same size).
  for (const std::string& name : CachedFiles()) {
    if (name.find("torn.bin") == std::string::npos) continue;
    std::string bytes = ReadFileBytes((cache_dir() / "files" / name).string());
    std::fill(bytes.begin() + 4096, bytes.begin() + 8192, '\0');
    WriteFileBytes((cache_dir() / "files" / name).string(), bytes);
  }
  // A decompressed copy (made from a checked file, written unsynced too).
  fs::create_directories(cache_dir() / "decompressed");
  WriteFileBytes((cache_dir() / "decompressed" / "x.tsafe").string(), "half-written");
  ShardCacheOptions boot_b = Options();
  boot_b.boot_id = "boot-b";
  auto r = ShardCache::Open(url, boot_b);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(CachedFiles().empty());
  EXPECT_FALSE(fs::exists(cache_dir() / "decompressed"));
  EXPECT_EQ(ListDir(cache_dir() / "unverified").size(), 3u);
  // The sound file is back without the server.
  auto hit = (*r)->Fetch(f_good);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  EXPECT_EQ(ReadFileBytes(hit->path()), good);
  // The torn one and the unhashed one need the server again.
  EXPECT_EQ((*r)->Fetch(f_torn).status().code(), StatusCode::kIOError);
  EXPECT_EQ((*r)->Fetch(f_plain).status().code(), StatusCode::kIOError);
  EXPECT_TRUE(ListDir(cache_dir() / "unverified").empty());
  server_ = std::make_unique<NginxServer>(www().string());
  auto again = ShardCache::Open(server_->Url("data"), boot_b);
  ASSERT_TRUE(again.ok());
  auto refetched = (*again)->Fetch(f_torn);
  ASSERT_TRUE(refetched.ok()) << refetched.status().ToString();
  EXPECT_EQ(ReadFileBytes(refetched->path()), torn);
}

TEST_F(RemoteTest, AlteredShardIsCorruptionAndNothingIsCached) {
  std::string content = RandomBytes(100'000, 3);
  const RemoteFile f = Put("s.bin", content);
  content[4321] ^= 0x10;  // the server now holds other bytes of the same size
  Put("s.bin", content);
  const std::uint64_t actual = tensorsafe::internal::Hash64(std::string_view(content));
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  auto r = cache->Fetch(f);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("GET " + server_->Url("data") + "s.bin"));
  EXPECT_THAT(r.status().message(), HasSubstr("XXH3-64 of the 100000 bytes received is 0x" + Hex16(actual)));
  EXPECT_THAT(r.status().message(), HasSubstr("the index says 0x" + Hex16(f.xxh3)));
  EXPECT_THAT(r.status().message(), HasSubstr("not cached"));
  EXPECT_TRUE(CachedFiles().empty());
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_EQ(server_->WaitForRequests("/data/s.bin", 1), 1);  // not retried
}

TEST_F(RemoteTest, WrongSizeIsCorruption) {
  const RemoteFile f = Put("s.bin", RandomBytes(1000, 4));
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  RemoteFile longer = f;
  longer.bytes = 1001;
  auto r = cache->Fetch(longer);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("server sends 1000 bytes (Content-Length), the index says 1001"));
  RemoteFile shorter = f;
  shorter.bytes = 999;
  r = cache->Fetch(shorter);
  ASSERT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("server sends 1000 bytes (Content-Length), the index says 999"));
  EXPECT_TRUE(CachedFiles().empty());
  EXPECT_TRUE(TempFiles().empty());
}

TEST_F(RemoteTest, NotFoundIsClearAndNotRetried) {
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  auto r = cache->Fetch({"missing.bin", 10, 0});
  ASSERT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "GET " + server_->Url("data") + "missing.bin: HTTP 404");
  EXPECT_EQ(server_->WaitForRequests("/data/missing.bin", 1), 1);
  auto b = cache->FetchBytes("missing.json");
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(TempFiles().empty());
}

TEST_F(RemoteTest, ServerErrorsAreRetriedThenReported) {
  auto cache = OpenCache("error500");
  ASSERT_TRUE(cache);
  auto r = cache->Fetch({"s.bin", 10, 0});
  ASSERT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().message(), "GET " + server_->Url("error500") + "s.bin: failed after 3 attempt(s): HTTP 500");
  EXPECT_EQ(server_->WaitForRequests("/error500/s.bin", 3), 3);
  EXPECT_TRUE(TempFiles().empty());
}

TEST_F(RemoteTest, RedirectsAreNotFollowed) {
  auto cache = OpenCache("redirect");
  ASSERT_TRUE(cache);
  auto r = cache->FetchBytes("index.json");
  ASSERT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 302 (redirects are not followed)"));
}

TEST_F(RemoteTest, ConnectionRefusedIsRetriedThenReported) {
  const int port = testing::FreeLoopbackPort();  // nobody listens there
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/data/";
  ShardCacheOptions o = Options();
  o.max_attempts = 2;
  auto cache = ShardCache::Open(url, o);
  ASSERT_TRUE(cache.ok());
  auto r = (*cache)->Fetch({"s.bin", 10, 0});
  ASSERT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_THAT(r.status().message(), HasSubstr("GET " + url + "s.bin: failed after 2 attempt(s): "));
  EXPECT_THAT(r.status().message(), HasSubstr("Couldn't connect to server"));
  EXPECT_EQ(r.status().error_number(), ECONNREFUSED);
}

TEST_F(RemoteTest, TransferTimeoutIsAnIOError) {
  const RemoteFile f = Put("big.bin", RandomBytes(1 << 20, 5));
  ShardCacheOptions o = Options();
  o.max_attempts = 1;
  o.transfer_timeout = std::chrono::milliseconds(300);  // 1 MiB at 256 KiB/s needs 4 s
  auto cache = OpenCache("slow", o);
  ASSERT_TRUE(cache);
  auto r = cache->Fetch(f);
  ASSERT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_THAT(r.status().message(), HasSubstr("failed after 1 attempt(s): Timeout was reached"));
  EXPECT_THAT(r.status().message(), HasSubstr(" of 1048576"));
  EXPECT_TRUE(CachedFiles().empty());
  EXPECT_TRUE(TempFiles().empty());
}

// Polls until a download in progress has written at least `bytes`.
bool WaitForPartialDownload(const fs::path& tmp_dir, std::uintmax_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tmp_dir, ec)) {
      if (fs::file_size(e.path(), ec) >= bytes) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST_F(RemoteTest, ServerDyingMidDownloadIsRetriedThenReportedAndRecovers) {
  const std::string content = RandomBytes(2 << 20, 6);
  const RemoteFile f = Put("s.bin", content);
  // 64 KiB at once, then 256 KiB/s: 2 MiB takes ~8 s, plenty of time to kill.
  server_->Restart({"256k", "64k"});
  auto cache = OpenCache("slow");
  ASSERT_TRUE(cache);
  Result<CachedFile> r = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { r = cache->Fetch(f); });
  ASSERT_TRUE(WaitForPartialDownload(cache_dir() / "tmp", 64 << 10));
  EXPECT_TRUE(CachedFiles().empty());  // partial data is never under the final name
  server_->Kill();
  t.join();
  ASSERT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("GET " + server_->Url("slow") + "s.bin: failed after 3 attempt(s)"));
  EXPECT_THAT(r.status().message(), HasSubstr("Couldn't connect to server"));  // the retries found no server
  EXPECT_TRUE(CachedFiles().empty());
  EXPECT_TRUE(TempFiles().empty());

  server_->Restart({"100m", "0"});
  auto ok = cache->Fetch(f);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ReadFileBytes(ok->path()), content);
}

TEST_F(RemoteTest, CutTransferIsRetriedWithinOneFetch) {
  // The server dies mid-body and comes back before the retry: one Fetch
  // succeeds, starting the body again from byte 0.
  const std::string content = RandomBytes(1 << 20, 7);
  const RemoteFile f = Put("s.bin", content);
  server_->Restart({"128k", "32k"});
  ShardCacheOptions o = Options();
  o.max_attempts = 5;
  o.initial_backoff = std::chrono::milliseconds(300);
  auto cache = OpenCache("slow", o);
  ASSERT_TRUE(cache);
  Result<CachedFile> r = Status(StatusCode::kInternal, "not run");
  std::thread t([&] { r = cache->Fetch(f); });
  ASSERT_TRUE(WaitForPartialDownload(cache_dir() / "tmp", 32 << 10));
  server_->Kill();
  server_->Restart({"100m", "0"});
  t.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(r->path()), content);
  EXPECT_GE(server_->WaitForRequests("/slow/s.bin", 1), 1);
}

// --- Sharing one cache ---------------------------------------------------------

TEST_F(RemoteTest, ThreadsFetchingOneShardDownloadItOnce) {
  const std::string content = RandomBytes(512 << 10, 8);
  const RemoteFile f = Put("s.bin", content);
  server_->Restart({"4m", "0"});  // ~125 ms: the threads overlap
  auto cache = OpenCache("slow");
  ASSERT_TRUE(cache);
  constexpr int kThreads = 8;
  std::vector<Result<CachedFile>> results;
  for (int i = 0; i < kThreads; ++i) results.emplace_back(Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { results[i] = cache->Fetch(f); });
  for (auto& t : threads) t.join();
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(ReadFd(r->fd(), content.size()), content);
  }
  EXPECT_EQ(CachedFiles().size(), 1u);
  EXPECT_EQ(server_->WaitForRequests("/slow/s.bin", 1), 1);
}

TEST_F(RemoteTest, ProcessesFetchingOneShardDownloadItOnce) {
  const std::string content = RandomBytes(512 << 10, 9);
  const RemoteFile f = Put("s.bin", content);
  server_->Restart({"4m", "0"});
  const std::string url = server_->Url("slow");
  constexpr int kProcs = 4;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest macros, report through the exit code.
      ::close(go[1]);
      char c;
      if (::read(go[0], &c, 1) != 0) ::_exit(10);  // wait until the parent closes the pipe
      auto cache = ShardCache::Open(url, Options());
      if (!cache.ok()) ::_exit(11);
      auto r = (*cache)->Fetch(f);
      if (!r.ok()) ::_exit(12);
      ::_exit(ReadFd(r->fd(), content.size()) == content ? 0 : 13);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // all children start now
  for (pid_t pid : pids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child exit " << WEXITSTATUS(st);
  }
  EXPECT_EQ(CachedFiles().size(), 1u);
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_EQ(server_->WaitForRequests("/slow/s.bin", 1), 1);
}

TEST_F(RemoteTest, KilledDownloaderLeavesOnlyATempThatTheNextRunRemoves) {
  const std::string content = RandomBytes(1 << 20, 10);
  const RemoteFile f = Put("s.bin", content);
  server_->Restart({"128k", "32k"});
  const std::string url = server_->Url("slow");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto cache = ShardCache::Open(url, Options());
    if (cache.ok()) (void)(*cache)->Fetch(f);
    ::_exit(0);
  }
  ASSERT_TRUE(WaitForPartialDownload(cache_dir() / "tmp", 32 << 10));
  ::kill(pid, SIGKILL);  // like Ctrl-C-then-kill, or the OOM killer
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_EQ(TempFiles().size(), 1u);
  EXPECT_TRUE(CachedFiles().empty());
  // Its lock died with it: a new process does not wait, and cleans up.
  server_->Restart({"100m", "0"});
  auto cache = OpenCache("slow");
  ASSERT_TRUE(cache);
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_TRUE(ListDir(cache_dir() / "locks").empty());
  auto r = cache->Fetch(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(r->path()), content);
}

TEST_F(RemoteTest, WaitingForAnotherDownloaderTimesOut) {
  const RemoteFile f = Put("s.bin", "abc");
  ShardCacheOptions o = Options();
  o.lock_timeout = std::chrono::milliseconds(100);
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  // Hold the file's download lock as another process would (docs/REMOTE.md,
  // "Locking protocol", step 2): <key> is the first 33 bytes of the name.
  const std::string key = fs::path(*cache->LocalPathFor(f)).filename().string().substr(0, 33);
  const std::string lock_path = (cache_dir() / "locks" / (key + ".lock")).string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto r = cache->Fetch(f);
  ASSERT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), lock_path + ": still locked by another download after 100 ms");
  ::close(fd);  // the "other process" dies: its lock goes with it
  auto ok = cache->Fetch(f);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(server_->WaitForRequests("/data/s.bin", 1), 1);
}

TEST_F(RemoteTest, VerifyOnHitReplacesAFileChangedInTheCache) {
  const std::string content = RandomBytes(10'000, 17);
  const RemoteFile f = Put("s.bin", content);
  std::string path;
  {
    auto cache = OpenCache();
    ASSERT_TRUE(cache);
    auto r = cache->Fetch(f);
    ASSERT_TRUE(r.ok());
    path = r->path();
  }
  std::string damaged = content;
  damaged[10] ^= 1;
  WriteFileBytes(path, damaged);  // same size: only a rehash can tell
  {
    auto cache = OpenCache();  // default: trusts what it verified before
    ASSERT_TRUE(cache);
    auto r = cache->Fetch(f);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(ReadFileBytes(r->path()), damaged);
  }
  ShardCacheOptions o = Options();
  o.verify_on_hit = true;
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  auto r = cache->Fetch(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadFileBytes(r->path()), content);
  EXPECT_EQ(server_->WaitForRequests("/data/s.bin", 2), 2);
}

// --- Cache limit -------------------------------------------------------------

TEST_F(RemoteTest, LruEvictionKeepsPinnedFiles) {
  const RemoteFile a = Put("a", RandomBytes(10'000, 11));
  const RemoteFile b = Put("b", RandomBytes(10'000, 12));
  const RemoteFile c = Put("c", RandomBytes(10'000, 13));
  ShardCacheOptions o = Options();
  o.cache_limit_bytes = 25'000;  // room for two
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  const std::string pa = *cache->LocalPathFor(a), pb = *cache->LocalPathFor(b), pc = *cache->LocalPathFor(c);

  auto ha = cache->Fetch(a);  // pinned while ha lives
  ASSERT_TRUE(ha.ok());
  ASSERT_TRUE(cache->Fetch(b).ok());  // released at once
  // c needs room: a is older but pinned, so b goes.
  auto hc = cache->Fetch(c);
  ASSERT_TRUE(hc.ok()) << hc.status().ToString();
  EXPECT_TRUE(fs::exists(pa));
  EXPECT_FALSE(fs::exists(pb));
  EXPECT_TRUE(fs::exists(pc));
  // Everything pinned: no room, a clear error, nothing evicted.
  auto hb = cache->Fetch(b);
  ASSERT_EQ(hb.status().code(), StatusCode::kLimitExceeded);
  EXPECT_THAT(hb.status().message(), HasSubstr("cache limit of 25000 bytes leaves no room for 10000 bytes: "
                                               "20000 bytes in use, of which 20000 pinned"));
  EXPECT_TRUE(fs::exists(pa));
  EXPECT_TRUE(fs::exists(pc));
  // An evicted file stays readable through a descriptor opened before.
  const std::string a_bytes = ReadFd(ha->fd(), a.bytes);
  ha = CachedFile();  // unpin a: it is now the least recently used
  hb = cache->Fetch(b);
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_FALSE(fs::exists(pa));
  EXPECT_TRUE(fs::exists(pc));
  EXPECT_EQ(a_bytes.size(), a.bytes);
  // A file larger than the whole limit is refused up front.
  auto huge = cache->Fetch({"huge", 25'001, 0});
  EXPECT_EQ(huge.status().code(), StatusCode::kLimitExceeded);
  EXPECT_THAT(huge.status().message(), HasSubstr("25001 bytes exceeds the cache limit of 25000 bytes"));
}

TEST_F(RemoteTest, CacheHitsRefreshTheLruOrder) {
  const RemoteFile a = Put("a", RandomBytes(10'000, 14));
  const RemoteFile b = Put("b", RandomBytes(10'000, 15));
  const RemoteFile c = Put("c", RandomBytes(10'000, 16));
  ShardCacheOptions o = Options();
  o.cache_limit_bytes = 25'000;
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  ASSERT_TRUE(cache->Fetch(a).ok());
  ASSERT_TRUE(cache->Fetch(b).ok());
  ASSERT_TRUE(cache->Fetch(a).ok());  // a hit: b is now the least recently used
  ASSERT_TRUE(cache->Fetch(c).ok());
  EXPECT_TRUE(fs::exists(*cache->LocalPathFor(a)));
  EXPECT_FALSE(fs::exists(*cache->LocalPathFor(b)));
  EXPECT_EQ(server_->WaitForRequests("/data/a", 1), 1);
}

TEST_F(RemoteTest, FileSizeLimitComesFromOptions) {
  ShardCacheOptions o = Options();
  o.max_file_bytes = 1000;
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  auto r = cache->Fetch({"s", 1001, 0});
  ASSERT_EQ(r.status().code(), StatusCode::kLimitExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("1001 bytes exceeds max_file_bytes 1000"));
}

// --- Index bytes and prefetch -------------------------------------------------

TEST_F(RemoteTest, FetchBytesReadsTheIndexWithinItsLimit) {
  Put("index.json", R"({"version": 1})");
  Put("big.json", std::string(5000, ' '));
  ShardCacheOptions o = Options();
  o.max_index_bytes = 4096;
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  auto r = cache->FetchBytes("index.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, R"({"version": 1})");
  auto big = cache->FetchBytes("big.json");
  ASSERT_EQ(big.status().code(), StatusCode::kLimitExceeded);
  EXPECT_THAT(big.status().message(), HasSubstr("big.json: Content-Length 5000 exceeds the limit of 4096 bytes"));
  EXPECT_TRUE(CachedFiles().empty());  // never cached
}

TEST_F(RemoteTest, PrefetchDownloadsInTheBackground) {
  std::vector<RemoteFile> files;
  std::vector<std::string> contents;
  for (int i = 0; i < 6; ++i) {
    contents.push_back(RandomBytes(40'000 + i, 20 + i));
    files.push_back(Put("p/" + std::to_string(i), contents.back()));
  }
  ShardCacheOptions o = Options();
  o.max_concurrent_downloads = 3;
  auto cache = OpenCache("data", o);
  ASSERT_TRUE(cache);
  cache->Prefetch(files);
  cache->Prefetch(files);  // duplicates are skipped
  ASSERT_TRUE(cache->WaitForPrefetch().ok());
  EXPECT_EQ(CachedFiles().size(), files.size());
  server_->Stop();
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto r = cache->Fetch(files[i]);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(ReadFileBytes(r->path()), contents[i]);
  }
  for (const RemoteFile& f : files) EXPECT_EQ(server_->WaitForRequests("/data/" + f.name, 1), 1) << f.name;
}

TEST_F(RemoteTest, PrefetchErrorsAreReportedByWait) {
  const RemoteFile ok = Put("ok", "fine");
  auto cache = OpenCache();
  ASSERT_TRUE(cache);
  cache->Prefetch({ok, {"missing", 4, 0}});
  Status s = cache->WaitForPrefetch();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("missing: HTTP 404"));
  EXPECT_TRUE(cache->WaitForPrefetch().ok());  // reported once
  cache->Prefetch({{"../x", 1, 0}});
  EXPECT_EQ(cache->WaitForPrefetch().code(), StatusCode::kInvalidArgument);
}

TEST_F(RemoteTest, DestroyingTheCacheAbortsBackgroundDownloads) {
  const RemoteFile f = Put("s.bin", RandomBytes(2 << 20, 30));
  server_->Restart({"64k", "0"});  // 32 s if it were allowed to finish
  auto cache = OpenCache("slow");
  ASSERT_TRUE(cache);
  cache->Prefetch({f});
  ASSERT_TRUE(WaitForPartialDownload(cache_dir() / "tmp", 1));
  const auto t0 = std::chrono::steady_clock::now();
  cache.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_TRUE(CachedFiles().empty());
}

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
