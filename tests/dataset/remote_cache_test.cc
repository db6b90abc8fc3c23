// The remote-shard cache shared by threads and processes, its LRU limit with
// pins, index bytes and prefetch (remote_test.cc has downloads).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "dataset/remote_fixture.h"

namespace tensorsafe::dataset {
namespace {

using namespace remote_test;  // NOLINT: the fixture's helpers and names

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

}  // namespace
}  // namespace tensorsafe::dataset
