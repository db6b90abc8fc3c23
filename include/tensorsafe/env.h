// Env: the file seam. Every byte tensorsafe reads or writes goes through an
// Env, so a caller can count, redirect or fail file operations: tests inject
// failed writes, failed syncs, short reads and failed renames; the crash tests
// stop a process after the Nth operation; `convert` counts bytes for its
// progress bar. This is an advanced interface (as LevelDB's Env is): most
// callers never name it, and every options struct takes `Env* env = nullptr`,
// meaning Env::Default().
//
// Thread safety: Env::Default() is shared and thread-safe. A WritableFile,
// RandomAccessFile or MappedRegion is used by one thread at a time unless its
// method says otherwise (RandomAccessFile::ReadAt and MappedRegion::bytes are
// safe from many threads). An Env subclass must be thread-safe when passed to
// a reader or writer that uses threads (ReaderOptions::read_threads, the
// writer's background appender).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe {

// A file written front to back; seekable files also accept positional writes.
// The writers' DataWriter calls Append from a background thread (one call
// at a time, never beside another method; see io/background_appender.h).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `bytes` at the current end. A short write by the OS is
  // retried; an error leaves the file in an unspecified state.
  virtual Status Append(std::span<const std::byte> bytes) = 0;
  // True when WriteAt works (a regular file, not a pipe or socket).
  virtual bool seekable() const = 0;
  virtual Status WriteAt(std::uint64_t offset, std::span<const std::byte> bytes) = 0;
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  // Bytes appended so far (the offset of the next Append, relative to where
  // the file started).
  virtual std::uint64_t position() const = 0;
  virtual const std::string& name() const = 0;
  // Positional files (opened for update): the next Append lands at `pos`.
  virtual Status SetAppendPosition(std::uint64_t pos) { return Internal(name() + ": not a positional file"); }
  virtual Status Truncate(std::uint64_t size) { return Internal(name() + ": cannot truncate"); }
  // For a decoder that writes its whole output in one call (MDS snappy
  // shards, src/dataset/sources/mds/codecs.cc): makes this file, still empty, `size`
  // bytes long with its blocks allocated (a full disk fails here, not as a
  // SIGBUS in the mapping) and returns a writable shared mapping of it,
  // valid until Close(); the bytes go to the page cache, not the heap.
  // kUnsupported where the file cannot be mapped (not a fresh regular file).
  virtual Result<std::span<std::byte>> MapForWrite(std::uint64_t size) {
    return Unsupported(name() + ": cannot be mapped for writing");
  }
};

// Positional reads.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly out.size() bytes at `offset`; a read past the end or a short
  // read is an error (kCorruption "truncated" / kIOError).
  virtual Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const = 0;
  virtual std::uint64_t size() const = 0;
  virtual const std::string& name() const = 0;
};

// A read-only mapping of a whole file; shared so tensors can outlive readers.
class MappedRegion {
 public:
  MappedRegion(const void* data, std::size_t size) : data_(data), size_(size) {}
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  const void* data_;
  std::size_t size_;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX implementation; never deleted.
  static Env* Default();

  // Creates "<dir>/<base>.tmp-XXXXXX" next to `final_path`, exclusive, mode
  // 0644 (subject to umask). *tmp_path receives its name. Past its first MiB
  // the file reserves blocks ahead of its appends (fallocate, size kept)
  // while the filesystem has over 1 GiB free; Sync and Close give back what
  // was not written. A `final_path` that is an s3:// URL (or one the
  // UrlHandler stores) gets a local file under $TMPDIR, which Rename then
  // stores there whole (docs/REMOTE.md); an http(s) URL is kUnsupported.
  virtual Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp_path);
  // Wraps an fd the caller owns (not closed).
  virtual std::unique_ptr<WritableFile> WrapFd(int fd, std::string name);
  // Opens an existing file for positional writes (the updater): Append
  // writes at the append position (initially the file size) with pwrite.
  // kUnsupported for a URL: objects are replaced whole.
  virtual Result<std::unique_ptr<WritableFile>> OpenForUpdate(const std::string& path);
  virtual Result<std::unique_ptr<RandomAccessFile>> OpenRead(const std::string& path);
  virtual Result<std::shared_ptr<MappedRegion>> Map(const std::string& path);
  // Maps `path` and also returns positional reads of the same open file (the
  // same inode even if `path` is renamed over meanwhile): a mapped reader
  // copies large ranges with pread, which skips the page faults and page
  // table set-up a copy out of a fresh mapping pays (about 1.3x the time of
  // pread from the page cache for 1 GiB). The default implementation opens
  // the file once.
  struct MappedFile {
    std::shared_ptr<MappedRegion> region;
    std::unique_ptr<RandomAccessFile> file;
  };
  virtual Result<MappedFile> MapWithFile(const std::string& path);
  // Renames `from` over `to`; with `to` a URL, stores the local file
  // `from` there (one PUT, or a multipart upload) and removes it.
  virtual Status Rename(const std::string& from, const std::string& to);
  // Removes a file, or the object at a URL; OK when there is none.
  virtual Status Remove(const std::string& path);
  // fsyncs the directory that holds `path`, making a rename durable.
  virtual Status SyncDirOf(const std::string& path);
};

}  // namespace tensorsafe
