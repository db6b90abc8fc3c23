// Remote shards: a local, verified, size-limited cache of the files of a
// dataset served over http://, https:// or s3:// (docs/REMOTE.md).
//
// A ShardCache is opened with the dataset's base URL and a cache directory.
// The dataset reader fetches the index into memory with FetchBytes(), then
// asks for shards by the relative names, sizes and XXH3-64 hashes the index
// lists: Fetch() returns a CachedFile, a pinned local copy whose size and hash
// were checked before it was given its final name. Prefetch() downloads ahead
// in background threads.
//
// Several processes (and several ShardCache objects) on one host may share one
// cache directory: they coordinate with flock(2) on files inside it, never
// with shared memory, so there are no names to collide and nothing stale after
// a crash or Ctrl-C (the kernel drops a dead process's locks; its temporary
// download is removed by the next process that looks).
//
// Names from an index are untrusted (docs/SECURITY.md, "Paths and URLs"):
// ValidateRelativeName() rejects anything that could leave the base URL, and
// local file names are derived from hashes so they never leave the cache
// directory.
//
// Thread safety: a ShardCache may be used from several threads at once
// (Fetch, FetchBytes, Prefetch, WaitForPrefetch). A CachedFile is a value
// owned by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// One file of a remote dataset, as its index describes it.
struct RemoteFile {
  std::string name;         // relative to the base URL, e.g. "shards/00017.tsds"
  std::uint64_t bytes = 0;  // exact size
  std::uint64_t xxh3 = 0;   // XXH3-64 (seed 0) of the whole file
  // False when the index has no XXH3-64 of the file (MDS without hashes,
  // WebDataset): the download is checked by size only, and `xxh3` is just
  // the file's identity in the cache (a hash of what the index or the
  // server says about it, such as the ETag), so a changed file gets a new
  // cache entry.
  bool check_xxh3 = true;
};

// An object as the server describes it (Stat, List).
struct RemoteObject {
  std::string name;  // relative to the base URL
  std::uint64_t bytes = 0;
  std::string etag;  // "" when the server sends none
};

struct ShardCacheOptions {
  // Where complete files, downloads in progress and locks live (created if
  // missing). Required. May be shared by several processes and datasets.
  std::string cache_dir;
  // Upper bound on the bytes of complete files plus downloads in progress in
  // cache_dir (all datasets together). Least recently used files are removed
  // to make room; files pinned by a live CachedFile (in any process) never
  // are. 0 = no limit.
  std::uint64_t cache_limit_bytes = 0;
  // Attempts per download (1 = no retry). Retried: connection errors,
  // timeouts, transfers cut short, HTTP 408, 429 and 5xx.
  int max_attempts = 4;
  // Wait before retry k (1-based): min(initial_backoff * 2^(k-1), max_backoff),
  // plus up to 25% random jitter so that processes do not retry in lockstep.
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10'000};
  std::chrono::milliseconds connect_timeout{10'000};
  // Whole-transfer limit per attempt; 0 = none (large shards on slow links).
  std::chrono::milliseconds transfer_timeout{0};
  // An attempt fails when fewer than 1 byte/s arrive for this long (whole
  // seconds, at least 1). Catches hung servers without capping large files.
  std::chrono::seconds stall_timeout{30};
  // Background download threads used by Prefetch(). Fetch() downloads in the
  // caller's thread.
  int max_concurrent_downloads = 4;
  // FetchBytes() refuses bodies larger than this (kLimitExceeded) before
  // buffering them.
  std::uint64_t max_index_bytes = 64ull << 20;
  // Fetch() refuses RemoteFile.bytes above this (kLimitExceeded): the index
  // is untrusted and one entry must not be able to claim the whole disk.
  std::uint64_t max_file_bytes = 16ull << 30;
  // How long Fetch() waits for another thread or process that is downloading
  // the same file before giving up with kFailedPrecondition.
  std::chrono::milliseconds lock_timeout{30 * 60'000};
  // Rehash a cached file on every cache hit (reads the whole file). Off by
  // default: files enter the cache only after verification.
  bool verify_on_hit = false;
  // CA bundle for https:// (PEM file); empty = the system default.
  std::string ca_file;
  // This boot's identity; empty = /proc/sys/kernel/random/boot_id. Files
  // enter the cache without fsync; when the id differs from the one the
  // cache directory recorded (a reboot, perhaps a crash), every file is
  // hashed again before its next use, or dropped when the index has no hash.
  // With no id at all, each file is fsynced before it gets its name.
  std::string boot_id;
};

// A complete, verified local copy of a remote file, pinned while this object
// lives: no ShardCache in any process evicts it (it holds a shared flock on
// the file). Move-only. After the CachedFile is destroyed the file may be
// evicted at any time; a mapping or descriptor opened before that stays valid
// (POSIX keeps an unlinked inode alive while it is open or mapped).
class CachedFile {
 public:
  CachedFile() = default;
  CachedFile(std::string path, int fd, std::uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  CachedFile(CachedFile&& o) noexcept;
  CachedFile& operator=(CachedFile&& o) noexcept;
  CachedFile(const CachedFile&) = delete;
  CachedFile& operator=(const CachedFile&) = delete;
  ~CachedFile();

  // Absolute path of the cached file inside cache_dir.
  const std::string& path() const { return path_; }
  // A read-only descriptor of the file, owned by this object (dup() it to
  // keep it longer). Prefer it to reopening path(): it cannot race eviction.
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  bool valid() const { return fd_ >= 0; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

class ShardCache {
 public:
  // Parses and checks `base_url` (http://, https:// or s3://bucket/prefix, a host, an optional
  // port and path; no credentials, query or fragment; a trailing '/' is
  // added), creates the cache directory and removes temporary files and
  // locks that dead processes left behind.
  // Errors: kInvalidArgument (URL, options), kIOError (cache directory).
  static Result<std::unique_ptr<ShardCache>> Open(std::string_view base_url, ShardCacheOptions options);

  // Stops background downloads (in-flight ones are aborted, their temporary
  // files removed) and joins the threads.
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // The normalized base URL ("https://host:port/path/").
  const std::string& base_url() const;
  // The full URL of `name` (which must pass ValidateRelativeName).
  Result<std::string> UrlFor(std::string_view name) const;

  // Downloads base_url + name into memory, never caching it (an index has no
  // hash to verify against). Errors: kInvalidArgument (name), kNotFound (HTTP
  // 404/410), kLimitExceeded (body larger than max_index_bytes, before it is
  // buffered), kIOError (other HTTP status or transport error after retries).
  Result<std::string> FetchBytes(std::string_view name) const;

  // The size and ETag of base_url + name (HEAD). Errors as FetchBytes.
  Result<RemoteObject> Stat(std::string_view name) const;

  // The objects directly under the base URL (not in sub-"directories"), in
  // byte order of their names. s3:// only: kUnsupported for http(s), whose
  // servers have no listing.
  Result<std::vector<RemoteObject>> List() const;

  // Returns a pinned local copy of `file`, downloading it when it is not
  // cached. Exactly one thread or process downloads a given file; the others
  // wait for it (lock_timeout). The download goes to a temporary file whose
  // size and XXH3-64 are checked before it is renamed into place.
  // Errors: kInvalidArgument (name), kLimitExceeded (bytes above
  // max_file_bytes or cache_limit_bytes, or no room because the rest is
  // pinned), kCorruption (size or hash differs from `file`: the message names
  // the URL and both numbers; nothing is cached), kNotFound (HTTP 404/410),
  // kIOError (other failures after max_attempts), kFailedPrecondition (lock
  // wait timed out or the cache is shutting down).
  Result<CachedFile> Fetch(const RemoteFile& file);

  // Queues files for download by the background threads and returns at once.
  // Files already cached are skipped. Errors are kept for WaitForPrefetch();
  // a later Fetch() of a failed file simply tries again.
  void Prefetch(const std::vector<RemoteFile>& files);
  // Waits until every queued prefetch has finished; returns the first error
  // since the previous call (then clears it), else OK.
  Status WaitForPrefetch();

  // Returns the local path where `file` is (or would be) cached, without
  // touching the network or the disk. The path is always a direct child of
  // <cache_dir>/files/.
  Result<std::string> LocalPathFor(const RemoteFile& file) const;

  struct Impl;

 private:
  explicit ShardCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks a relative name taken from an (untrusted) index: 1 to 1024 bytes of
// [A-Za-z0-9._~+=,@-] in '/'-separated segments, none empty, "." or "..".
// This rejects absolute URLs and paths, other schemes and hosts ("//h/x"),
// percent-encoding (so "%2e%2e" cannot smuggle ".."), backslashes, NUL and
// control bytes, '?', '#' and ':'. Errors: kInvalidArgument naming the name
// and the reason.
Status ValidateRelativeName(std::string_view name);

// True for names the dataset reader should fetch through a ShardCache
// ("http://", "https://" or "s3://", any case).
bool IsRemoteUrl(std::string_view location);

// The cache directory to use when the caller gives none: $TENSORSAFE_CACHE_DIR,
// else $XDG_CACHE_HOME/tensorsafe/shards, else $HOME/.cache/tensorsafe/shards,
// else <temp dir>/tensorsafe-shards.
std::string DefaultCacheDir();

}  // namespace tensorsafe::dataset
