// flock(2) locks on files inside the shard cache directory (docs/REMOTE.md,
// "Locking protocol"). flock locks belong to an open file description, so
// they exclude other processes and also other descriptors of this process
// (other threads), and the kernel drops them when the process dies: a crash
// can never leave a stale lock behind.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

class PathLock {
 public:
  // Exclusive lock on `path` (created if missing), waiting up to `timeout`
  // or until `cancel` is set. Because holders may remove the file when they
  // are done (RemoveAndRelease), the lock is retaken until the path still
  // names the locked inode. Errors: kFailedPrecondition (timeout, cancel),
  // kIOError.
  static Result<PathLock> Acquire(const std::string& path, std::chrono::milliseconds timeout,
                                  const std::atomic<bool>* cancel);
  // Non-blocking: nullopt when someone else holds it.
  static Result<std::optional<PathLock>> TryAcquire(const std::string& path);

  PathLock(PathLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  PathLock& operator=(PathLock&& o) noexcept;
  ~PathLock();
  PathLock(const PathLock&) = delete;
  PathLock& operator=(const PathLock&) = delete;

  // Unlinks the lock file while still holding it (safe: every acquirer
  // re-checks the inode), then releases. Keeps locks/ from growing.
  void RemoveAndRelease();

 private:
  PathLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// True when `fd` and `path` name the same inode (false if path is gone).
bool SameInode(int fd, const std::string& path);

}  // namespace tensorsafe::internal
