// The remote-shard cache against a real nginx (tests/support/nginx_server.h):
// URL safety, and downloads verified before use, retried, with errors naming
// URL and numbers. remote_cache_test.cc: one cache shared by threads and
// processes, its limit and prefetch; remote_hostile_test.cc: TLS and servers
// that lie.
#include <fcntl.h>
#include <sys/file.h>

#include <thread>

#include "dataset/remote/url.h"

#include "dataset/remote_fixture.h"
#include "support/child_server.h"

namespace tensorsafe::dataset {
namespace {

using namespace remote_test;  // NOLINT: the fixture's helpers and names

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

}  // namespace
}  // namespace tensorsafe::dataset
