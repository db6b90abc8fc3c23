#include "io/scratch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "remote/object_store.h"
#include "remote/remote_file.h"

namespace tensorsafe::internal {
namespace {

// An unlinked file in `dir`: O_TMPFILE where the file system has it, else
// mkstemp and unlink.
int OpenUnlinked(const std::string& dir) {
#ifdef O_TMPFILE
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
#endif
  std::string tmpl = dir + "/.tensorsafe-scratch-XXXXXX";
  int fd2 = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd2 >= 0) ::unlink(tmpl.c_str());
  return fd2;
}

}  // namespace

std::string ScratchDirFor(const std::string& path) {
  if (IsRemotePath(path)) return LocalTempDir();
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

Result<std::shared_ptr<ScratchRegion>> ScratchRegion::Create(const std::string& dir, std::uint64_t size) {
  if (size == 0) return std::shared_ptr<ScratchRegion>(new ScratchRegion(nullptr, 0));
  if (size > static_cast<std::uint64_t>(SIZE_MAX)) return OutOfRange("scratch of " + std::to_string(size) + " bytes");
  const int fd = OpenUnlinked(dir);
  if (fd < 0) return IOError(dir + ": cannot create a scratch file", errno);
  // Reserved blocks: writes through the mapping cannot fail for space.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    ::close(fd);
    return IOError(dir + ": cannot reserve " + std::to_string(size) + " bytes of scratch space", err);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED)
    return IOError(dir + ": cannot map " + std::to_string(size) + " bytes of scratch space", map_errno);
  return std::shared_ptr<ScratchRegion>(new ScratchRegion(static_cast<std::byte*>(p), static_cast<std::size_t>(size)));
}

ScratchRegion::~ScratchRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tensorsafe::internal
