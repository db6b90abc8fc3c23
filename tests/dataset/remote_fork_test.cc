// The remote layer across fork() (util/fork_local.h): DataLoader workers fork
// while the parent's shard cache has background downloads in flight and its
// connection pools hold keep-alive sockets. A child must get its own
// threads, locks and connections, and leave the parent's alone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "support/nginx_server.h"
#include "support/sanitizer.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/remote.h"
#include "util/fork_local.h"
#include "util/hash.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using testing::NginxServer;
using testing::TempDir;
using testing::WriteFileBytes;

// Runs `child` in a forked process; its return value is the exit code.
template <typename F>
int InChild(F child) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(child());  // no gtest macros in the child
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct Counter {
  int value = 7;
};

TEST(ForkLocalTest, AChildGetsAFreshValueAndTheParentKeepsItsOwn) {
  tensorsafe::internal::ForkLocal<Counter> c;
  c->value = 42;
  const std::uint64_t gen = tensorsafe::internal::ForkGeneration();
  EXPECT_EQ(InChild([&] {
              if (tensorsafe::internal::ForkGeneration() != gen + 1) return 1;
              if (c->value != 7) return 2;  // fresh, not the parent's 42
              c->value = 9;
              // A grandchild starts fresh again.
              return InChild([&] { return c->value == 7 ? 0 : 3; });
            }),
            0);
  EXPECT_EQ(c->value, 42);
  EXPECT_EQ(tensorsafe::internal::ForkGeneration(), gen);
}

std::string ForkTestBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& ch : s) ch = static_cast<char>(rng());
  return s;
}

TEST(ShardCacheForkTest, AChildFetchesAndPrefetchesWhileTheParentDownloads) {
  if (TS_UNDER_ASAN) {
    // ASan's own allocator is not fork-safe: forked while the parent's
    // download threads allocate, the child's new threads wait forever on an
    // allocator region lock (SizeClassAllocator64::GetFromAllocator, seen
    // with gdb). glibc's malloc resets its locks in the child; the normal
    // build runs this test.
    GTEST_SKIP() << "ASan's allocator deadlocks a child forked while other threads allocate";
  }
  TempDir tmp;
  const fs::path www = tmp.path() / "www";
  fs::create_directories(www);
  std::vector<RemoteFile> files;
  std::vector<std::string> contents;
  for (int i = 0; i < 6; ++i) {
    contents.push_back(ForkTestBytes(300 << 10, static_cast<std::uint32_t>(i)));
    const std::string name = "f" + std::to_string(i);
    WriteFileBytes((www / name).string(), contents.back());
    files.push_back({name, contents.back().size(), tensorsafe::internal::Hash64(std::string_view(contents.back()))});
  }
  NginxServer server(www.string());  // /slow/ at 256 KiB/s: downloads stay in flight
  ShardCacheOptions o;
  o.cache_dir = (tmp.path() / "cache").string();
  o.max_concurrent_downloads = 2;
  auto opened = ShardCache::Open(server.Url("slow"), o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<ShardCache> cache = std::move(*opened);
  // The parent's connection pool holds a socket, and two threads download.
  ASSERT_TRUE(cache->FetchBytes("f5").ok());
  cache->Prefetch({files[0], files[1], files[2]});

  EXPECT_EQ(InChild([&] {
              ::alarm(60);  // inherited state used to hang here: fail instead
              // The parent's queue, threads and sockets are not this process's.
              cache->Prefetch({files[3], files[4]});
              if (!cache->WaitForPrefetch().ok()) return 1;
              for (int i : {1, 3, 4, 5}) {
                auto f = cache->Fetch(files[i]);
                if (!f.ok()) return 10 + i;
                if (f->size() != contents[i].size()) return 20 + i;
              }
              cache.reset();  // joins this process's threads only
              return 0;
            }),
            0);
  ASSERT_TRUE(cache->WaitForPrefetch().ok());
  for (int i = 0; i < 6; ++i) {
    auto f = cache->Fetch(files[i]);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
  }
}

}  // namespace
}  // namespace tensorsafe::dataset
