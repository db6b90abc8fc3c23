#include "io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "remote/object_store.h"
#include "remote/remote_file.h"

namespace tensorsafe::internal {

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

Result<FileLock> FileLock::Acquire(const std::string& path, std::chrono::milliseconds timeout) {
  if (IsRemotePath(path)) return NotUpdatableInPlace(path);  // the only callers update files in place
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IOError(path + ": cannot open: " + std::strerror(errno), errno);
    FileLock lock(fd);
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) return IOError(path + ": flock: " + std::strerror(errno), errno);
      if (std::chrono::steady_clock::now() >= deadline) {
        return FailedPrecondition(path + ": another updater holds the lock (waited " + std::to_string(timeout.count()) +
                                  " ms)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    struct stat held, now;
    if (::fstat(fd, &held) != 0) return IOError(path + ": fstat: " + std::strerror(errno), errno);
    if (::stat(path.c_str(), &now) != 0) return IOError(path + ": stat: " + std::strerror(errno), errno);
    if (held.st_dev == now.st_dev && held.st_ino == now.st_ino) return lock;
    // Replaced (compacted) while we waited: lock the new file instead.
  }
}

}  // namespace tensorsafe::internal
