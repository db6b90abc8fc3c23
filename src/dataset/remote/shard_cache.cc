// The shard cache: layout, locking protocol and eviction are described in
// docs/REMOTE.md; section names below refer to it.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "dataset/remote/cache_files.h"
#include "dataset/remote/http.h"
#include "dataset/remote/lock.h"
#include "dataset/remote/url.h"
#include "tensorsafe/dataset/remote.h"
#include "util/fork_local.h"
#include "util/hash.h"

namespace tensorsafe::dataset {

using cache_files::DirEntry;
using cache_files::Errno;
using cache_files::FileSink;
using cache_files::FlockRetry;
using cache_files::HashFd;
using cache_files::ListDir;
using cache_files::StringSink;
using cache_files::Touch;
using tensorsafe::internal::BaseUrl;
using tensorsafe::internal::HttpClient;
using tensorsafe::internal::HttpConfig;
using tensorsafe::internal::HttpExpect;
using tensorsafe::internal::HttpSink;
using tensorsafe::internal::PathLock;

namespace {

constexpr std::size_t kKeyChars = 33;  // 16 hex "-" 16 hex
constexpr std::size_t kMaxTailChars = 64;

std::string Hex16(std::uint64_t v) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = hex[v & 15];
  return s;
}

// The readable end of a local name: the last segment of a validated name,
// whose bytes are all in [A-Za-z0-9._~+=,@-], cut to 64 of them.
std::string Tail(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  std::string_view last = slash == std::string_view::npos ? name : name.substr(slash + 1);
  if (last.size() > kMaxTailChars) last = last.substr(last.size() - kMaxTailChars);
  return std::string(last);
}

// tmp/<key>.<bytes>.XXXXXX -> key and reserved bytes.
bool ParseTempName(const std::string& name, std::string* key, std::uint64_t* bytes) {
  if (name.size() < kKeyChars + 3 || name[kKeyChars] != '.') return false;
  const std::size_t dot = name.find('.', kKeyChars + 1);
  if (dot == std::string::npos || dot == kKeyChars + 1 || dot - kKeyChars - 1 > 20) return false;
  std::uint64_t v = 0;
  for (std::size_t i = kKeyChars + 1; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const std::uint64_t digit = static_cast<std::uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *key = name.substr(0, kKeyChars);
  *bytes = v;
  return true;
}

}  // namespace

CachedFile::CachedFile(CachedFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }

CachedFile& CachedFile::operator=(CachedFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

CachedFile::~CachedFile() {
  if (fd_ >= 0) ::close(fd_);  // releases the shared flock: the pin
}

struct ShardCache::Impl {
  BaseUrl base;
  ShardCacheOptions opt;
  std::string files_dir, tmp_dir, locks_dir, unverified_dir, decompressed_dir, global_lock_path, boot_path;
  bool sync_files = false;  // no boot id: fsync every file before its rename
  std::unique_ptr<HttpClient> http;
  std::atomic<bool> stopping{false};

  // The background downloads of this process: a forked child starts with
  // none (util/fork_local.h) rather than with the parent's queue, threads it
  // does not have and a mutex one of them may have held.
  struct Downloads {
    std::mutex mu;
    std::condition_variable cv_work, cv_idle;
    std::deque<std::pair<RemoteFile, std::string>> queue;  // file, key
    std::set<std::string> queued;                          // keys queued or running
    int active = 0;
    Status first_error;
    std::vector<std::thread> workers;
  };
  tensorsafe::internal::ForkLocal<Downloads> downloads;

  std::string Key(const RemoteFile& f) const {
    return Hex16(tensorsafe::internal::Hash64(base.full + '\n' + f.name)) + "-" + Hex16(f.xxh3);
  }
  std::string FinalPath(const RemoteFile& f, const std::string& key) const {
    return files_dir + "/" + key + "-" + Tail(f.name);
  }
  std::string LockPath(const std::string& key) const { return locks_dir + "/" + key + ".lock"; }

  Status CheckFile(const RemoteFile& f) const {
    TS_RETURN_IF_ERROR(ValidateRelativeName(f.name));
    if (f.bytes > opt.max_file_bytes) {
      return LimitExceeded("remote file \"" + f.name + "\": " + std::to_string(f.bytes) +
                           " bytes exceeds max_file_bytes " + std::to_string(opt.max_file_bytes));
    }
    if (opt.cache_limit_bytes != 0 && f.bytes > opt.cache_limit_bytes) {
      return LimitExceeded("remote file \"" + f.name + "\": " + std::to_string(f.bytes) +
                           " bytes exceeds the cache limit of " + std::to_string(opt.cache_limit_bytes) + " bytes");
    }
    return Status::OK();
  }

  // "Cache hit": a pinned handle, or nullopt when the file is not there.
  // With `own_key_lock`, a file of the wrong size or hash (changed behind
  // our back) is removed so the caller downloads it again.
  Result<std::optional<CachedFile>> TryHit(const RemoteFile& f, const std::string& path, bool own_key_lock) {
    for (int round = 0; round < 10; ++round) {
      // O_NOFOLLOW: only Fetch creates names in files/, never symlinks.
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) {
        if (errno == ENOENT) return std::optional<CachedFile>();
        if (errno == ELOOP) return IOError(path + ": a symlink in the cache directory", errno);
        return IOError(path + ": open: " + Errno(errno), errno);
      }
      CachedFile handle(path, fd, f.bytes);
      // The shared lock is the pin; an evictor holds its exclusive lock only
      // for the instant of the unlink.
      if (FlockRetry(fd, LOCK_SH) != 0) return IOError(path + ": flock: " + Errno(errno), errno);
      if (!tensorsafe::internal::SameInode(fd, path)) continue;  // evicted between open and flock
      struct stat st;
      if (::fstat(fd, &st) != 0) return IOError(path + ": fstat: " + Errno(errno), errno);
      bool good = static_cast<std::uint64_t>(st.st_size) == f.bytes;
      if (good && opt.verify_on_hit && f.check_xxh3) {
        TS_ASSIGN_OR_RETURN(std::uint64_t h, HashFd(fd, f.bytes, path));
        good = h == f.xxh3;
      }
      if (!good) {
        if (own_key_lock) ::unlink(path.c_str());
        return std::optional<CachedFile>();
      }
      Touch(fd);
      return std::optional<CachedFile>(std::move(handle));
    }
    return Internal(path + ": keeps being replaced while opening it");
  }

  // "Durability": under the cache lock at open. When the boot id differs
  // from the recorded one, files renamed in (unsynced) before a crash may
  // hold unwritten blocks: all of them move to unverified/ until Reverify.
  Status CheckBoot() {
    std::string id = opt.boot_id;
    if (id.empty()) {
      const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
      char buf[64] = {0};
      if (fd >= 0) {
        const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
        ::close(fd);
        id.assign(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
        while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
      }
    }
    if (id.empty()) {
      sync_files = true;
      return Status::OK();
    }
    std::string recorded;
    if (const int fd = ::open(boot_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW); fd >= 0) {
      char buf[128] = {0};
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      ::close(fd);
      recorded.assign(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    }
    if (recorded == id) return Status::OK();
    TS_ASSIGN_OR_RETURN(std::vector<DirEntry> files, ListDir(files_dir));
    for (const DirEntry& e : files) {
      const std::string from = files_dir + "/" + e.name, to = unverified_dir + "/" + e.name;
      if (::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
        return IOError(from + ": rename to " + to + ": " + Errno(errno), errno);
      }
    }
    // Decompressed copies (sources/open_remote.cc) are written unsynced too,
    // and reused by name: dropped, to be made again from checked files.
    std::error_code ec;
    std::filesystem::remove_all(decompressed_dir, ec);
    if (ec) return IOError(decompressed_dir + ": cannot remove: " + ec.message(), ec.value());
    // The new id, durably, after the moves (a crash before this redoes them).
    const std::string tmp = boot_path + ".new";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return IOError(tmp + ": open: " + Errno(errno), errno);
    const bool ok = ::write(fd, id.data(), id.size()) == static_cast<ssize_t>(id.size()) && ::fsync(fd) == 0;
    const int err = errno;
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), boot_path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return IOError(boot_path + ": write: " + Errno(ok ? errno : err), ok ? errno : err);
    }
    return Status::OK();
  }

  // A file left in unverified/ by CheckBoot: back into files/ when its size
  // and XXH3-64 are right (no download), else removed. Needs the key lock.
  Result<bool> Reverify(const RemoteFile& f, const std::string& final_path) {
    const std::string path = unverified_dir + "/" + final_path.substr(files_dir.size() + 1);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st;
    bool good = f.check_xxh3 && ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == f.bytes;
    if (good) {
      Result<std::uint64_t> h = HashFd(fd, f.bytes, path);
      good = h.ok() && *h == f.xxh3;
    }
    ::close(fd);
    if (!good) {
      ::unlink(path.c_str());
      return false;
    }
    return ::rename(path.c_str(), final_path.c_str()) == 0;  // else evicted meanwhile: a miss
  }

  // Removes tmp files whose download lock is free: their writer died.
  // `only_key`: the caller holds that key's lock, so all of its temps are
  // stale. Returns the bytes reserved by live downloads.
  Result<std::uint64_t> CleanTemps(const std::string* only_key) {
    TS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ListDir(tmp_dir));
    std::uint64_t reserved = 0;
    for (const DirEntry& e : entries) {
      std::string key;
      std::uint64_t bytes = 0;
      const std::string path = tmp_dir + "/" + e.name;
      if (!ParseTempName(e.name, &key, &bytes)) {
        if (only_key == nullptr) reserved += static_cast<std::uint64_t>(e.st.st_size);  // not ours: count it
        continue;
      }
      if (only_key != nullptr) {
        if (key == *only_key) ::unlink(path.c_str());
        continue;
      }
      TS_ASSIGN_OR_RETURN(std::optional<PathLock> lock, PathLock::TryAcquire(LockPath(key)));
      if (lock) {
        ::unlink(path.c_str());
        lock->RemoveAndRelease();
      } else {
        reserved += std::max<std::uint64_t>(bytes, static_cast<std::uint64_t>(e.st.st_size));
      }
    }
    return reserved;
  }

  // Removes lock files nobody holds (left by killed processes).
  Status CleanLocks() {
    TS_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, ListDir(locks_dir));
    for (const DirEntry& e : entries) {
      if (e.name.size() < 5 || e.name.compare(e.name.size() - 5, 5, ".lock") != 0) continue;
      TS_ASSIGN_OR_RETURN(std::optional<PathLock> lock, PathLock::TryAcquire(locks_dir + "/" + e.name));
      if (lock) lock->RemoveAndRelease();
    }
    return Status::OK();
  }

  // "Eviction": under the cache lock, makes room for `bytes` and creates the
  // temporary file whose name reserves them. Returns its fd and path.
  Result<std::pair<int, std::string>> Reserve(const std::string& key, std::uint64_t bytes, const std::string& url) {
    TS_ASSIGN_OR_RETURN(PathLock cache_lock, PathLock::Acquire(global_lock_path, opt.lock_timeout, &stopping));
    if (opt.cache_limit_bytes != 0) {
      TS_ASSIGN_OR_RETURN(std::uint64_t usage, CleanTemps(nullptr));
      TS_ASSIGN_OR_RETURN(std::vector<DirEntry> files, ListDir(files_dir));
      for (const DirEntry& e : files) usage += static_cast<std::uint64_t>(e.st.st_size);
      // Files not yet checked since a reboot go first: nothing pins them.
      TS_ASSIGN_OR_RETURN(std::vector<DirEntry> unchecked, ListDir(unverified_dir));
      for (const DirEntry& e : unchecked) {
        const auto size = static_cast<std::uint64_t>(e.st.st_size);
        if (usage + bytes > opt.cache_limit_bytes) {
          if (::unlink((unverified_dir + "/" + e.name).c_str()) == 0) continue;
        }
        usage += size;
      }
      std::sort(files.begin(), files.end(), [](const DirEntry& a, const DirEntry& b) {
        if (a.st.st_mtim.tv_sec != b.st.st_mtim.tv_sec) return a.st.st_mtim.tv_sec < b.st.st_mtim.tv_sec;
        if (a.st.st_mtim.tv_nsec != b.st.st_mtim.tv_nsec) return a.st.st_mtim.tv_nsec < b.st.st_mtim.tv_nsec;
        return a.name < b.name;
      });
      std::uint64_t pinned = 0;
      for (const DirEntry& e : files) {
        if (usage + bytes <= opt.cache_limit_bytes) break;
        const std::string path = files_dir + "/" + e.name;
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        const auto size = static_cast<std::uint64_t>(e.st.st_size);
        if (FlockRetry(fd, LOCK_EX | LOCK_NB) != 0) {
          pinned += size;  // a live CachedFile somewhere
        } else if (tensorsafe::internal::SameInode(fd, path) && ::unlink(path.c_str()) == 0) {
          usage -= std::min(usage, size);
        }
        ::close(fd);
      }
      if (usage + bytes > opt.cache_limit_bytes) {
        return LimitExceeded("GET " + url + ": cache limit of " + std::to_string(opt.cache_limit_bytes) +
                             " bytes leaves no room for " + std::to_string(bytes) + " bytes: " + std::to_string(usage) +
                             " bytes in use, of which " + std::to_string(pinned) +
                             " pinned by open files and the rest by downloads in progress");
      }
    }
    std::string tmpl = tmp_dir + "/" + key + "." + std::to_string(bytes) + ".XXXXXX";
    const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) return IOError(tmpl + ": mkostemp: " + Errno(errno), errno);
    return std::make_pair(fd, tmpl);
  }

  Result<CachedFile> Fetch(const RemoteFile& f) {
    if (stopping.load()) return FailedPrecondition("shard cache for " + base.full + " is shutting down");
    TS_RETURN_IF_ERROR(CheckFile(f));
    TS_ASSIGN_OR_RETURN(std::string url, tensorsafe::internal::JoinUrl(base, f.name));
    const std::string key = Key(f);
    const std::string final_path = FinalPath(f, key);
    {
      TS_ASSIGN_OR_RETURN(std::optional<CachedFile> hit, TryHit(f, final_path, false));
      if (hit) return std::move(*hit);
    }
    // "Locking protocol": one downloader per file; the others wait here and
    // then find the file.
    TS_ASSIGN_OR_RETURN(PathLock key_lock, PathLock::Acquire(LockPath(key), opt.lock_timeout, &stopping));
    struct Release {
      PathLock* l;
      ~Release() { l->RemoveAndRelease(); }
    } release{&key_lock};
    {
      TS_ASSIGN_OR_RETURN(std::optional<CachedFile> hit, TryHit(f, final_path, true));
      if (hit) return std::move(*hit);
      TS_ASSIGN_OR_RETURN(bool restored, Reverify(f, final_path));
      if (restored) {
        TS_ASSIGN_OR_RETURN(hit, TryHit(f, final_path, true));
        if (hit) return std::move(*hit);
      }
    }
    TS_RETURN_IF_ERROR(CleanTemps(&key).status());
    TS_ASSIGN_OR_RETURN(auto reserved, Reserve(key, f.bytes, url));
    const int fd = reserved.first;
    const std::string& tmp_path = reserved.second;
    auto fail = [&](Status s) {
      ::close(fd);
      ::unlink(tmp_path.c_str());
      return s;
    };

    FileSink sink(fd, tmp_path);
    HttpExpect expect;
    expect.exact_size = f.bytes;
    Status s = http->Get(url, sink, expect, &stopping);
    if (!s.ok()) return fail(s);
    if (sink.size() != f.bytes) {
      return fail(Corruption("GET " + url + ": received " + std::to_string(sink.size()) + " bytes, the index says " +
                             std::to_string(f.bytes) + "; not cached"));
    }
    if (f.check_xxh3 && sink.digest() != f.xxh3) {
      return fail(Corruption("GET " + url + ": XXH3-64 of the " + std::to_string(f.bytes) + " bytes received is 0x" +
                             Hex16(sink.digest()) + ", the index says 0x" + Hex16(f.xxh3) + "; not cached"));
    }
    // "Durability": without a boot id, durable before visible. With one, a
    // crash shows as a new boot id, and CheckBoot has every file checked.
    if (sync_files && ::fsync(fd) != 0) return fail(IOError(tmp_path + ": fsync: " + Errno(errno), errno));
    (void)::fchmod(fd, 0644);
    // Pinned before it gets its final name, so no evictor can take it.
    if (FlockRetry(fd, LOCK_SH) != 0) return fail(IOError(tmp_path + ": flock: " + Errno(errno), errno));
    if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
      return fail(IOError(tmp_path + ": rename to " + final_path + ": " + Errno(errno), errno));
    }
    // Hand out a read-only descriptor, pinned before the writable one closes.
    const int ro = ::open(final_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ro < 0 || FlockRetry(ro, LOCK_SH) != 0) {
      const int err = errno;
      if (ro >= 0) ::close(ro);
      ::close(fd);
      return IOError(final_path + ": reopen: " + Errno(err), err);
    }
    ::close(fd);
    Touch(ro);
    return CachedFile(final_path, ro, f.bytes);
  }

  void Worker(Downloads& d) {
    while (true) {
      std::pair<RemoteFile, std::string> item;
      {
        std::unique_lock<std::mutex> lock(d.mu);
        d.cv_work.wait(lock, [&] { return stopping.load() || !d.queue.empty(); });
        if (stopping.load()) return;
        item = std::move(d.queue.front());
        d.queue.pop_front();
        ++d.active;
      }
      Result<CachedFile> r = Fetch(item.first);
      std::lock_guard<std::mutex> lock(d.mu);
      --d.active;
      d.queued.erase(item.second);
      if (!r.ok() && d.first_error.ok() && !stopping.load()) d.first_error = r.status();
      if (d.queue.empty() && d.active == 0) d.cv_idle.notify_all();
    }
  }
};

std::string DefaultCacheDir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  if (std::string d = env("TENSORSAFE_CACHE_DIR"); !d.empty()) return d;
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/tensorsafe/shards";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/tensorsafe/shards";
  std::error_code ec;
  return (std::filesystem::temp_directory_path(ec) / "tensorsafe-shards").string();
}

ShardCache::ShardCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShardCache::~ShardCache() {
  {
    std::lock_guard<std::mutex> lock(impl_->downloads->mu);
    impl_->stopping.store(true);
  }
  impl_->downloads->cv_work.notify_all();
  for (std::thread& t : impl_->downloads->workers) t.join();
}

Result<std::unique_ptr<ShardCache>> ShardCache::Open(std::string_view base_url, ShardCacheOptions options) {
  if (options.cache_dir.empty()) return InvalidArgument("shard cache: options.cache_dir is empty");
  if (options.max_attempts < 1 || options.max_attempts > 100) {
    return InvalidArgument("shard cache: max_attempts " + std::to_string(options.max_attempts) + " is not in 1..100");
  }
  if (options.max_concurrent_downloads < 1 || options.max_concurrent_downloads > 256) {
    return InvalidArgument("shard cache: max_concurrent_downloads " + std::to_string(options.max_concurrent_downloads) +
                           " is not in 1..256");
  }
  if (options.initial_backoff.count() < 0 || options.max_backoff.count() < 0 || options.connect_timeout.count() < 0 ||
      options.transfer_timeout.count() < 0 || options.lock_timeout.count() < 0) {
    return InvalidArgument("shard cache: negative timeout or backoff");
  }
  auto impl = std::make_unique<Impl>();
  TS_ASSIGN_OR_RETURN(impl->base, tensorsafe::internal::ParseBaseUrl(base_url));
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(options.cache_dir, ec);
  if (ec) return IOError(options.cache_dir + ": " + ec.message(), ec.value());
  impl->files_dir = (dir / "files").string();
  impl->tmp_dir = (dir / "tmp").string();
  impl->locks_dir = (dir / "locks").string();
  impl->unverified_dir = (dir / "unverified").string();
  impl->global_lock_path = (dir / "cache.lock").string();
  impl->boot_path = (dir / "boot").string();
  impl->decompressed_dir = (dir / "decompressed").string();
  for (const std::string& d : {impl->files_dir, impl->tmp_dir, impl->locks_dir, impl->unverified_dir}) {
    std::filesystem::create_directories(d, ec);
    if (ec) return IOError(d + ": cannot create: " + ec.message(), ec.value());
  }
  // Backup tools skip directories with this tag (https://bford.info/cachedir/).
  const std::string tag = (dir / "CACHEDIR.TAG").string();
  if (::access(tag.c_str(), F_OK) != 0) {
    const int fd = ::open(tag.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      static const char kTag[] =
          "Signature: 8a477f597d28d172789f06886806bc55\n# tensorsafe shard cache (docs/REMOTE.md)\n";
      (void)!::write(fd, kTag, sizeof(kTag) - 1);
      ::close(fd);
    }
  }
  impl->opt = std::move(options);
  HttpConfig hc;
  hc.max_attempts = impl->opt.max_attempts;
  hc.initial_backoff = impl->opt.initial_backoff;
  hc.max_backoff = impl->opt.max_backoff;
  hc.connect_timeout = impl->opt.connect_timeout;
  hc.transfer_timeout = impl->opt.transfer_timeout;
  hc.stall_timeout = impl->opt.stall_timeout;
  hc.ca_file = impl->opt.ca_file;
  impl->http = std::make_unique<HttpClient>(std::move(hc));
  {
    // Leftovers of killed processes: temps and locks nobody holds.
    TS_ASSIGN_OR_RETURN(PathLock cache_lock,
                        PathLock::Acquire(impl->global_lock_path, impl->opt.lock_timeout, nullptr));
    TS_RETURN_IF_ERROR(impl->CleanTemps(nullptr).status());
    TS_RETURN_IF_ERROR(impl->CleanLocks());
    TS_RETURN_IF_ERROR(impl->CheckBoot());
  }
  return std::unique_ptr<ShardCache>(new ShardCache(std::move(impl)));
}

const std::string& ShardCache::base_url() const { return impl_->base.full; }

Result<std::string> ShardCache::UrlFor(std::string_view name) const {
  return tensorsafe::internal::JoinUrl(impl_->base, name);
}

Result<std::string> ShardCache::LocalPathFor(const RemoteFile& file) const {
  TS_RETURN_IF_ERROR(ValidateRelativeName(file.name));
  return impl_->FinalPath(file, impl_->Key(file));
}

Result<std::string> ShardCache::FetchBytes(std::string_view name) const {
  TS_ASSIGN_OR_RETURN(std::string url, tensorsafe::internal::JoinUrl(impl_->base, name));
  StringSink sink;
  HttpExpect expect;
  expect.max_size = impl_->opt.max_index_bytes;
  TS_RETURN_IF_ERROR(impl_->http->Get(url, sink, expect, &impl_->stopping));
  return std::move(sink.data);
}

Result<RemoteObject> ShardCache::Stat(std::string_view name) const {
  TS_ASSIGN_OR_RETURN(std::string url, tensorsafe::internal::JoinUrl(impl_->base, name));
  TS_ASSIGN_OR_RETURN(tensorsafe::internal::HttpObject o, impl_->http->Head(url));
  return RemoteObject{std::string(name), o.bytes, std::move(o.etag)};
}

Result<std::vector<RemoteObject>> ShardCache::List() const {
  const std::string& base = impl_->base.full;
  TS_ASSIGN_OR_RETURN(std::vector<tensorsafe::internal::HttpObject> found, impl_->http->List(base));
  std::vector<RemoteObject> out;
  for (tensorsafe::internal::HttpObject& o : found) {
    std::string rest = o.url.substr(base.size());
    if (rest.empty() || rest.find('/') != std::string::npos) continue;
    out.push_back(RemoteObject{std::move(rest), o.bytes, std::move(o.etag)});
  }
  std::sort(out.begin(), out.end(), [](const RemoteObject& a, const RemoteObject& b) { return a.name < b.name; });
  return out;
}

Result<CachedFile> ShardCache::Fetch(const RemoteFile& file) { return impl_->Fetch(file); }

void ShardCache::Prefetch(const std::vector<RemoteFile>& files) {
  Impl& m = *impl_;
  Impl::Downloads& d = *m.downloads;
  std::lock_guard<std::mutex> lock(d.mu);
  if (m.stopping.load()) return;
  for (const RemoteFile& f : files) {
    Status s = m.CheckFile(f);
    if (!s.ok()) {
      if (d.first_error.ok()) d.first_error = s;
      continue;
    }
    std::string key = m.Key(f);
    if (d.queued.count(key) != 0) continue;
    struct stat st;
    if (::stat(m.FinalPath(f, key).c_str(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) == f.bytes) continue;
    d.queued.insert(key);
    d.queue.emplace_back(f, std::move(key));
  }
  const std::size_t want = std::min<std::size_t>(static_cast<std::size_t>(m.opt.max_concurrent_downloads),
                                                 d.queue.size() + static_cast<std::size_t>(d.active));
  while (d.workers.size() < want) d.workers.emplace_back([&m, &d] { m.Worker(d); });
  d.cv_work.notify_all();
}

Status ShardCache::WaitForPrefetch() {
  Impl& m = *impl_;
  Impl::Downloads& d = *m.downloads;
  std::unique_lock<std::mutex> lock(d.mu);
  d.cv_idle.wait(lock, [&] { return (d.queue.empty() && d.active == 0) || m.stopping.load(); });
  Status s = d.first_error;
  d.first_error = Status::OK();
  return s;
}

}  // namespace tensorsafe::dataset
