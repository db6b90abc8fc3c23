// Files of the shard cache (shard_cache.cc): the sinks downloads write
// into, hashing of cached files, directory listings, flock and mtime helpers.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dataset/remote/http.h"
#include "tensorsafe/status.h"
#include "util/hash.h"

namespace tensorsafe::dataset::cache_files {

using tensorsafe::internal::HttpSink;

std::string Errno(int err);

// Marks the file most recently used for the LRU order. An explicit
// nanosecond time, not "now" from the kernel's coarse clock, so that two
// uses in a row stay ordered.
void Touch(int fd);

// flock(2), retried on EINTR.
int FlockRetry(int fd, int op);

// XXH3-64 of the first `size` bytes of `fd` (kCorruption when shorter).
Result<std::uint64_t> HashFd(int fd, std::uint64_t size, const std::string& path);

// Writes a download into the temporary file, hashing as it goes; or, for
// Direct(), lets it land in a shared mapping of the file (one copy fewer:
// the socket's bytes go straight to the page cache) and hashes it after.
class FileSink : public HttpSink {
 public:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FileSink() override { Unmap(); }
  Status Reset() override;
  Status Write(std::span<const std::byte> bytes) override;
  Result<std::span<std::byte>> Direct(std::uint64_t size) override;
  Status DirectDone() override;
  std::uint64_t digest() const { return hash_.Digest(); }
  std::uint64_t size() const { return offset_; }

 private:
  void Unmap();

  int fd_;
  std::string path_;
  std::uint64_t offset_ = 0;
  tensorsafe::internal::StreamingHash hash_;
  std::byte* map_ = nullptr;
  std::size_t map_size_ = 0;
};

class StringSink : public HttpSink {
 public:
  Status Reset() override {
    data.clear();
    return Status::OK();
  }
  Status Write(std::span<const std::byte> bytes) override {
    data.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Status::OK();
  }
  std::string data;
};

struct DirEntry {
  std::string name;
  struct stat st;
};

// The entries of `dir` with their lstat, skipping any that vanish meanwhile.
Result<std::vector<DirEntry>> ListDir(const std::string& dir);

}  // namespace tensorsafe::dataset::cache_files
