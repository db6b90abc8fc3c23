#include "dataset/remote/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tensorsafe::internal {

bool SameInode(int fd, const std::string& path) {
  struct stat a, b;
  if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0) return false;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

PathLock& PathLock::operator=(PathLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

PathLock::~PathLock() {
  if (fd_ >= 0) ::close(fd_);  // the last descriptor closing releases the flock
}

void PathLock::RemoveAndRelease() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

Result<std::optional<PathLock>> PathLock::TryAcquire(const std::string& path) {
  for (int round = 0; round < 100; ++round) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return IOError(path + ": cannot open lock file: " + std::strerror(errno), errno);
    PathLock lock(fd, path);
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno == EWOULDBLOCK) return std::optional<PathLock>();
      return IOError(path + ": flock: " + std::strerror(errno), errno);
    }
    if (SameInode(fd, path)) return std::optional<PathLock>(std::move(lock));
    // Removed by its previous holder while we opened it: try the new one.
  }
  return Internal(path + ": lock file keeps being replaced");
}

Result<PathLock> PathLock::Acquire(const std::string& path, std::chrono::milliseconds timeout,
                                   const std::atomic<bool>* cancel) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sleep = std::chrono::microseconds(500);
  while (true) {
    TS_ASSIGN_OR_RETURN(std::optional<PathLock> lock, TryAcquire(path));
    if (lock) return std::move(*lock);
    if (cancel != nullptr && cancel->load()) return FailedPrecondition(path + ": cancelled while waiting for the lock");
    if (std::chrono::steady_clock::now() >= deadline) {
      return FailedPrecondition(path + ": still locked by another download after " + std::to_string(timeout.count()) +
                                " ms");
    }
    // Polling rather than a blocking flock keeps the timeout and the cancel
    // flag honest; 20 ms is nothing next to a shard download.
    std::this_thread::sleep_for(sleep);
    sleep = std::min<std::chrono::microseconds>(sleep * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace tensorsafe::internal
