// remote_bench: the shard cache against Debian's nginx on loopback, beside a
// plain libcurl GET of the same files into memory-less sink (the baseline,
// same run, same server, same connection reuse).
//
//   remote_bench [--quick] [--reps N] [--shards N] [--mib N]
//
// Figures (best of --reps; the machine is shared):
//   raw       libcurl GET, bytes discarded
//   raw file  libcurl GET written to a file and fsynced (what any cache pays)
//   cold      ShardCache::Fetch of uncached shards, one thread: download,
//             XXH3, write, fsync, rename
//   prefetch  ShardCache::Prefetch of all shards with 4 threads, then Wait
//   hit       ShardCache::Fetch of cached shards (open, flock, stat, touch)
#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/nginx_server.h"
#include "tensorsafe/dataset/remote.h"
#include "util/hash.h"

using namespace tensorsafe;
using namespace tensorsafe::dataset;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

size_t Discard(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

size_t ToFd(char* data, size_t size, size_t nmemb, void* user) {
  const int fd = *static_cast<int*>(user);
  size_t n = size * nmemb, off = 0;
  while (off < n) {
    const ssize_t w = ::write(fd, data + off, n - off);
    if (w <= 0) return 0;
    off += static_cast<size_t>(w);
  }
  return n;
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  int reps = 3, shards = 16, mib = 16;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      reps = 1;
      shards = 4;
      mib = 1;
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--shards") && i + 1 < argc) {
      shards = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--mib") && i + 1 < argc) {
      mib = std::atoi(argv[++i]);
    }
  }
  std::string tmpl = (fs::temp_directory_path() / "tensorsafe-remote-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return 1;
  const fs::path dir = tmpl;
  fs::create_directories(dir / "www");
  std::vector<RemoteFile> files;
  std::mt19937_64 rng(1);
  for (int s = 0; s < shards; ++s) {
    std::string bytes(static_cast<std::size_t>(mib) << 20, '\0');
    for (std::size_t i = 0; i + 8 <= bytes.size(); i += 8) {
      const std::uint64_t v = rng();
      std::memcpy(&bytes[i], &v, 8);
    }
    const std::string name = "shard." + std::to_string(s);
    std::ofstream((dir / "www" / name).string(), std::ios::binary).write(bytes.data(), bytes.size());
    files.push_back({name, bytes.size(), internal::Hash64(std::string_view(bytes))});
  }
  const double total_mib = static_cast<double>(shards) * mib;
  double raw = 1e9, raw_file = 1e9, cold = 1e9, prefetch = 1e9, hit = 1e9;
  {
    testing::NginxServer server((dir / "www").string());
    const std::string base = server.Url("data");
    for (int r = 0; r < reps; ++r) {
      CURL* c = curl_easy_init();
      curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 256L << 10);  // as ShardCache does
      auto t0 = Clock::now();
      for (const RemoteFile& f : files) {
        const std::string url = base + f.name;
        curl_easy_setopt(c, CURLOPT_URL, url.c_str());
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Discard);
        if (curl_easy_perform(c) != CURLE_OK) return 1;
      }
      raw = std::min(raw, Seconds(t0));
      // Baseline 2: the same GETs written to files and fsynced, as the
      // cache must (no hashing, no locks, no rename).
      const fs::path plain = dir / "plain";
      fs::create_directories(plain);
      t0 = Clock::now();
      for (const RemoteFile& f : files) {
        const std::string url = base + f.name;
        int fd = ::open((plain / f.name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        curl_easy_setopt(c, CURLOPT_URL, url.c_str());
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &ToFd);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &fd);
        if (fd < 0 || curl_easy_perform(c) != CURLE_OK || ::fsync(fd) != 0) return 1;
        ::close(fd);
      }
      raw_file = std::min(raw_file, Seconds(t0));
      fs::remove_all(plain);
      curl_easy_cleanup(c);

      ShardCacheOptions o;
      o.cache_dir = (dir / ("cache" + std::to_string(r))).string();
      auto cache = ShardCache::Open(base, o);
      Die(cache.status(), "open");
      t0 = Clock::now();
      for (const RemoteFile& f : files) Die((*cache)->Fetch(f).status(), "fetch");
      cold = std::min(cold, Seconds(t0));
      t0 = Clock::now();
      constexpr int kHits = 20;
      for (int k = 0; k < kHits; ++k) {
        for (const RemoteFile& f : files) Die((*cache)->Fetch(f).status(), "hit");
      }
      hit = std::min(hit, Seconds(t0) / kHits);
      cache->reset();
      fs::remove_all(o.cache_dir);

      o.max_concurrent_downloads = 4;
      auto cache2 = ShardCache::Open(base, o);
      Die(cache2.status(), "open");
      t0 = Clock::now();
      (*cache2)->Prefetch(files);
      Die((*cache2)->WaitForPrefetch(), "prefetch");
      prefetch = std::min(prefetch, Seconds(t0));
      cache2->reset();
      fs::remove_all(o.cache_dir);
    }
  }
  fs::remove_all(dir);
  std::printf("remote_bench: %d shards x %d MiB from nginx on 127.0.0.1, best of %d\n", shards, mib, reps);
  std::printf("  raw libcurl GET (discard)   %8.0f MiB/s   1.00x\n", total_mib / raw);
  std::printf("  raw libcurl GET to file+fsync %6.0f MiB/s   %.2fx of raw\n", total_mib / raw_file, raw / raw_file);
  std::printf("  ShardCache cold Fetch       %8.0f MiB/s   %.2fx of raw, %.2fx of raw to file\n", total_mib / cold,
              raw / cold, raw_file / cold);
  std::printf("  ShardCache Prefetch x4      %8.0f MiB/s   %.2fx of raw, %.2fx of raw to file\n", total_mib / prefetch,
              raw / prefetch, raw_file / prefetch);
  std::printf("  ShardCache hit              %8.1f us/fetch\n", hit / shards * 1e6);
  return 0;
}
