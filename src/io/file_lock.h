// An exclusive advisory lock (flock) on a file, held while an updater or a
// compaction works on it.
#pragma once

#include <chrono>
#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

class FileLock {
 public:
  // Locks `path`, waiting up to `timeout`. Because a compaction replaces the
  // file by rename, the lock is retaken when the path no longer names the
  // locked inode. Errors: kFailedPrecondition when still locked after the
  // timeout, kIOError otherwise.
  static Result<FileLock> Acquire(const std::string& path, std::chrono::milliseconds timeout);

  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tensorsafe::internal
