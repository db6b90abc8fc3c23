#include "dataset/remote/cache_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tensorsafe::dataset::cache_files {

std::string Errno(int err) { return std::strerror(err); }

void Touch(int fd) {
  struct timespec ts[2];
  ::clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[1] = ts[0];
  if (::futimens(fd, ts) != 0) (void)::futimens(fd, nullptr);
}

int FlockRetry(int fd, int op) {
  int rc;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

Result<std::uint64_t> HashFd(int fd, std::uint64_t size, const std::string& path) {
  tensorsafe::internal::StreamingHash h;
  std::vector<std::byte> buf(1 << 20);
  std::uint64_t off = 0;
  while (off < size) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IOError(path + ": read: " + Errno(errno), errno);
    if (n == 0) return Corruption(path + ": truncated at " + std::to_string(off) + " bytes");
    h.Update({buf.data(), static_cast<std::size_t>(n)});
    off += static_cast<std::uint64_t>(n);
  }
  return h.Digest();
}

Status FileSink::Reset() {
  Unmap();
  hash_.Reset();
  offset_ = 0;
  if (::ftruncate(fd_, 0) != 0) return IOError(path_ + ": ftruncate: " + Errno(errno), errno);
  return Status::OK();
}

Status FileSink::Write(std::span<const std::byte> bytes) {
  hash_.Update(bytes);
  while (!bytes.empty()) {
    const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IOError(path_ + ": write: " + Errno(errno), errno);
    offset_ += static_cast<std::uint64_t>(n);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return Status::OK();
}

Result<std::span<std::byte>> FileSink::Direct(std::uint64_t size) {
  if (size == 0) return std::span<std::byte>();
  // Blocks first: a full disk is ENOSPC here, never SIGBUS on a store into
  // the mapping.
  if (const int e = ::posix_fallocate(fd_, 0, static_cast<off_t>(size)); e != 0) {
    return IOError(path_ + ": fallocate " + std::to_string(size) + " bytes: " + Errno(e), e);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return IOError(path_ + ": mmap: " + Errno(errno), errno);
  map_ = static_cast<std::byte*>(p);
  map_size_ = static_cast<std::size_t>(size);
  return std::span<std::byte>(map_, map_size_);
}

Status FileSink::DirectDone() {
  hash_.Reset();
  hash_.Update(std::span<const std::byte>(map_, map_size_));
  offset_ = map_size_;
  Unmap();
  return Status::OK();
}

void FileSink::Unmap() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

Result<std::vector<DirEntry>> ListDir(const std::string& dir) {
  std::vector<DirEntry> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return IOError(dir + ": opendir: " + Errno(errno), errno);
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry de{name, {}};
    if (::fstatat(::dirfd(d), e->d_name, &de.st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // raced away
    out.push_back(std::move(de));
  }
  ::closedir(d);
  return out;
}

}  // namespace tensorsafe::dataset::cache_files
