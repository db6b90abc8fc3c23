#include "tensorsafe/env.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "remote/object_store.h"
#include "remote/remote_file.h"

namespace tensorsafe {
namespace {

Status ErrnoStatus(const std::string& what, const std::string& name, int err) {
  return IOError(name + ": " + what + ": " + std::strerror(err), err);
}

// Writes all bytes to fd, retrying on EINTR and short writes.
Status WriteAllFd(int fd, std::span<const std::byte> bytes, const std::string& name) {
  while (!bytes.empty()) {
    // Linux writes at most 0x7ffff000 bytes per call.
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", name, errno);
    }
    if (n == 0) return IOError(name + ": write wrote nothing", EIO);  // would loop forever
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return Status::OK();
}

std::string DirOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Preallocation of a temp file's blocks ahead of its appends (see
// Env::NewTempFile): none below kPreallocFrom bytes, then steps of the size
// written so far, clamped to [kPreallocMinStep, kPreallocMaxStep], while the
// filesystem has kPreallocMinFree free beside 8 steps.
constexpr std::uint64_t kPreallocFrom = std::uint64_t{1} << 20;
constexpr std::uint64_t kPreallocMinStep = std::uint64_t{8} << 20;
constexpr std::uint64_t kPreallocMaxStep = std::uint64_t{128} << 20;
// Free space below which nothing is reserved (beside 8x the step).
constexpr std::uint64_t kPreallocMinFree = std::uint64_t{1} << 30;

class FdWritableFile : public WritableFile {
 public:
  FdWritableFile(int fd, std::string name, bool owned, bool seekable, bool positional = false, bool preallocate = false)
      : fd_(fd),
        name_(std::move(name)),
        owned_(owned),
        seekable_(seekable),
        positional_(positional),
        preallocate_(preallocate) {}
  ~FdWritableFile() override {
    Unmap();
    if (owned_ && fd_ >= 0) ::close(fd_);
  }
  Status Append(std::span<const std::byte> bytes) override {
    if (preallocate_ && pos_ + bytes.size() > prealloc_end_) Preallocate(pos_ + bytes.size());
    if (positional_) {
      TS_RETURN_IF_ERROR(WriteAt(pos_, bytes));
    } else {
      TS_RETURN_IF_ERROR(WriteAllFd(fd_, bytes, name_));
    }
    pos_ += bytes.size();
    return Status::OK();
  }
  Status SetAppendPosition(std::uint64_t pos) override {
    if (!positional_) return WritableFile::SetAppendPosition(pos);
    pos_ = pos;
    return Status::OK();
  }
  Status Truncate(std::uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return ErrnoStatus("ftruncate to " + std::to_string(size), name_, errno);
    }
    return Status::OK();
  }
  bool seekable() const override { return seekable_; }
  Status WriteAt(std::uint64_t offset, std::span<const std::byte> bytes) override {
    while (!bytes.empty()) {
      ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pwrite at " + std::to_string(offset), name_, errno);
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
    }
    return Status::OK();
  }
  Status Sync() override {
    if (!seekable_) return Status::OK();  // pipes and sockets have nothing to sync
    TS_RETURN_IF_ERROR(TrimPreallocation());
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", name_, errno);
    return Status::OK();
  }
  Result<std::span<std::byte>> MapForWrite(std::uint64_t size) override {
    if (!seekable_ || positional_ || pos_ != 0 || map_ != nullptr || fd_ < 0) {
      return WritableFile::MapForWrite(size);
    }
    if (size == 0) return std::span<std::byte>();
    if (size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
      return InvalidArgument(name_ + ": cannot map " + std::to_string(size) + " bytes");
    }
    if (int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(size)); err != 0) {
      return ErrnoStatus("fallocate of " + std::to_string(size) + " bytes", name_, err);
    }
    void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return ErrnoStatus("mmap of " + std::to_string(size) + " bytes", name_, errno);
    map_ = p;
    map_size_ = static_cast<std::size_t>(size);
    pos_ = size;
    return std::span<std::byte>(static_cast<std::byte*>(p), map_size_);
  }
  Status Close() override {
    Unmap();
    if (fd_ >= 0) TS_RETURN_IF_ERROR(TrimPreallocation());
    if (owned_ && fd_ >= 0) {
      int fd = fd_;
      fd_ = -1;
      if (::close(fd) != 0) return ErrnoStatus("close", name_, errno);
    }
    return Status::OK();
  }
  std::uint64_t position() const override { return pos_; }
  const std::string& name() const override { return name_; }
  void set_position(std::uint64_t p) { pos_ = p; }

 private:
  // Reserves blocks past the end without changing the file's size, so the
  // page-cache writes that follow skip ext4's per-page delayed allocation:
  // 100 MiB in 1 MiB writes took 15-17 ms instead of 21-27 ms here. Any
  // failure (no support, no space for the step) only ends preallocation;
  // the writes themselves report real errors.
  void Preallocate(std::uint64_t need) {
    if (need <= kPreallocFrom) return;
    const std::uint64_t step = std::clamp(pos_, kPreallocMinStep, kPreallocMaxStep);
    const std::uint64_t from = std::max(prealloc_end_, pos_);
    const std::uint64_t to = need + step;
    // Only with room to spare: space reserved here and never written could
    // make another writer on a nearly full disk fail early (ENOSPC).
    struct statvfs vfs;
    if (::fstatvfs(fd_, &vfs) != 0 ||
        static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < kPreallocMinFree + 8 * (to - from)) {
      preallocate_ = false;
      return;
    }
    if (::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from), static_cast<off_t>(to - from)) != 0) {
      // No support, or no room for the step. A failed call may still have
      // reserved part of the range (ext4 keeps what it got): give it all
      // back so that the writes can have the space.
      preallocate_ = false;
      prealloc_end_ = 0;
      (void)GiveBackPastEnd();
      return;
    }
    prealloc_end_ = to;
  }
  void Unmap() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    map_ = nullptr;
  }
  // Ends reservation and gives back what is reserved, if anything.
  Status TrimPreallocation() {
    if (prealloc_end_ == 0) return Status::OK();
    prealloc_end_ = 0;
    preallocate_ = false;
    return GiveBackPastEnd();
  }
  // Truncating to the current size frees the blocks past the end (a no-op
  // for the file's bytes).
  Status GiveBackPastEnd() {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("fstat", name_, errno);
    return Truncate(static_cast<std::uint64_t>(st.st_size));
  }

  int fd_;
  std::string name_;
  bool owned_;
  bool seekable_;
  bool positional_;
  bool preallocate_;
  std::uint64_t pos_ = 0;
  std::uint64_t prealloc_end_ = 0;  // reserved up to here (0: nothing reserved)
  void* map_ = nullptr;             // MapForWrite's mapping, until Close
  std::size_t map_size_ = 0;
};

class FdRandomAccessFile final : public RandomAccessFile {
 public:
  FdRandomAccessFile(int fd, std::string name, std::uint64_t size) : fd_(fd), name_(std::move(name)), size_(size) {}
  ~FdRandomAccessFile() override { ::close(fd_); }
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override {
    if (offset > size_ || out.size() > size_ - offset) {
      return Corruption(name_ + ": read of " + std::to_string(out.size()) + " bytes at offset " +
                        std::to_string(offset) + " runs past the end of the file (" + std::to_string(size_) +
                        " bytes)");
    }
    while (!out.empty()) {
      ssize_t n = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pread at " + std::to_string(offset), name_, errno);
      }
      if (n == 0) {
        return Corruption(name_ + ": file shrank while reading: no bytes at offset " + std::to_string(offset));
      }
      out = out.subspan(static_cast<std::size_t>(n));
      offset += static_cast<std::uint64_t>(n);
    }
    return Status::OK();
  }
  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string name_;
  std::uint64_t size_;
};

bool IsSeekable(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

MappedRegion::~MappedRegion() {
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<void*>(data_), size_);
}

Env* Env::Default() {
  static Env env;
  return &env;
}

namespace {

// The local file a file bound for a URL is written to: durable once the
// upload returns, so syncing it to this disk first would only cost time
// (0.3 s of a 256 MiB save here).
class StagingFile final : public FdWritableFile {
 public:
  using FdWritableFile::FdWritableFile;
  Status Sync() override { return Status::OK(); }
};

}  // namespace

Result<std::unique_ptr<WritableFile>> Env::NewTempFile(const std::string& final_path, std::string* tmp_path) {
  // A file bound for a URL is written locally, under $TMPDIR, and stored
  // whole by Rename: a reader of the URL sees the old object or the new one.
  std::string stem = final_path;
  if (internal::IsRemotePath(final_path)) {
    TS_RETURN_IF_ERROR(internal::CheckStorableUrl(final_path));
    // The key's last segment, cut short: a key may be longer than a file name.
    stem = internal::LocalTempDir() + "/tensorsafe-upload-" + final_path.substr(final_path.rfind('/') + 1, 100);
  }
  // Not mkostemp: it makes mode 0600, and fixing that needs the umask, which
  // only a process-wide umask() call reveals. O_EXCL with 0666 applies the
  // umask as any new file gets it.
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[32];
    const std::uint64_t r = (static_cast<std::uint64_t>(::getpid()) << 32) ^
                            static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                            (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    std::snprintf(suffix, sizeof suffix, ".tmp-%012llx", static_cast<unsigned long long>(r & 0xffffffffffffull));
    std::string name = stem + suffix;
    // Read and write: MapForWrite's shared mapping needs both.
    int fd = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return ErrnoStatus("cannot create temporary file", name, errno);
    }
    *tmp_path = name;
    if (stem != final_path) {
      return std::unique_ptr<WritableFile>(std::make_unique<StagingFile>(fd, *tmp_path, /*owned=*/true,
                                                                         /*seekable=*/true, /*positional=*/false,
                                                                         /*preallocate=*/true));
    }
    return std::unique_ptr<WritableFile>(std::make_unique<FdWritableFile>(fd, *tmp_path, /*owned=*/true,
                                                                          /*seekable=*/true,
                                                                          /*positional=*/false, /*preallocate=*/true));
  }
  return IOError(final_path + ": cannot create a temporary file: 100 names taken", EEXIST);
}

std::unique_ptr<WritableFile> Env::WrapFd(int fd, std::string name) {
  auto f = std::make_unique<FdWritableFile>(fd, std::move(name), /*owned=*/false, IsSeekable(fd));
  return f;
}

Result<std::unique_ptr<WritableFile>> Env::OpenForUpdate(const std::string& path) {
  if (internal::IsRemotePath(path)) return internal::NotUpdatableInPlace(path);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open for update", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoStatus("fstat", path, e);
  }
  auto f = std::make_unique<FdWritableFile>(fd, path, /*owned=*/true, /*seekable=*/true, /*positional=*/true);
  f->set_position(static_cast<std::uint64_t>(st.st_size));
  return std::unique_ptr<WritableFile>(std::move(f));
}

namespace {
// Opens a regular file for reading; the result owns the descriptor.
Result<std::unique_ptr<FdRandomAccessFile>> OpenRegularFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoStatus("fstat", path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  return std::make_unique<FdRandomAccessFile>(fd, path, static_cast<std::uint64_t>(st.st_size));
}
}  // namespace

Result<std::unique_ptr<RandomAccessFile>> Env::OpenRead(const std::string& path) {
  // URLs (s3://, http(s)://) are read with ranged GETs (docs/REMOTE.md).
  if (internal::IsRemotePath(path)) return internal::OpenRemoteFile(path);
  TS_ASSIGN_OR_RETURN(auto f, OpenRegularFile(path));
  return std::unique_ptr<RandomAccessFile>(std::move(f));
}

Result<std::shared_ptr<MappedRegion>> Env::Map(const std::string& path) {
  TS_ASSIGN_OR_RETURN(MappedFile m, MapWithFile(path));
  return std::move(m.region);  // the mapping holds its own reference to the file
}

Result<Env::MappedFile> Env::MapWithFile(const std::string& path) {
  if (internal::IsRemotePath(path)) return internal::MapRemoteFile(path);
  TS_ASSIGN_OR_RETURN(auto f, OpenRegularFile(path));
  const std::size_t size = static_cast<std::size_t>(f->size());
  MappedFile out;
  if (size == 0) {
    out.region = std::make_shared<MappedRegion>(nullptr, 0);
  } else {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f->fd(), 0);
    if (p == MAP_FAILED) return ErrnoStatus("mmap", path, errno);
    out.region = std::make_shared<MappedRegion>(p, size);
  }
  // The reader owns the descriptor from here (closed with it).
  out.file = std::move(f);
  return out;
}

Status Env::Rename(const std::string& from, const std::string& to) {
  if (internal::IsRemotePath(to)) {  // the local file NewTempFile made, stored and removed
    Status s = internal::PutObjectFromFile(to, from);
    ::unlink(from.c_str());
    return s;
  }
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus("cannot rename to " + to, from, errno);
  }
  return Status::OK();
}

Status Env::Remove(const std::string& path) {
  if (internal::IsRemotePath(path)) return internal::DeleteObject(path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", path, errno);
  return Status::OK();
}

Status Env::SyncDirOf(const std::string& path) {
  if (internal::IsRemotePath(path)) return Status::OK();  // a stored object is durable when its PUT returns
  std::string dir = DirOf(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open directory", dir, errno);
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0 && e != EINVAL) return ErrnoStatus("fsync directory", dir, e);
  return Status::OK();
}

}  // namespace tensorsafe
