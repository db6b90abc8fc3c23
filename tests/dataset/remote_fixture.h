// The remote-shard cache tests' fixture (remote_test.cc, remote_cache_test.cc,
// remote_hostile_test.cc): a real nginx (tests/support/nginx_server.h) over a
// temporary directory, and a cache directory beside it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/nginx_server.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/remote.h"
#include "util/hash.h"

namespace tensorsafe::dataset::remote_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::NginxOptions;
using testing::NginxServer;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

inline std::string Hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::string RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

inline std::vector<std::string> ListDir(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string ReadFd(int fd, std::size_t n) {
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

// Polls until a download in progress has written at least `bytes`.
inline bool WaitForPartialDownload(const fs::path& tmp_dir, std::uintmax_t bytes) {
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

}  // namespace tensorsafe::dataset::remote_test
