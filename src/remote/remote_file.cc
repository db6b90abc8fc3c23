#include "remote/remote_file.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "remote/s3_client.h"
#include "util/fork_local.h"

namespace tensorsafe::internal {
namespace {

constexpr std::uint64_t kTailBytes = 1ull << 20;
constexpr std::uint64_t kSmallTailBytes = 64ull << 10;
constexpr std::uint64_t kBlock = 1ull << 20;
constexpr std::size_t kMaxBlocks = 64;
constexpr std::uint64_t kDirectBytes = 4ull << 20;
constexpr std::size_t kMaxObjects = 16;

std::atomic<std::uint64_t> g_requests{0};
std::atomic<std::uint64_t> g_bytes{0};  // object bytes fetched by remote files

bool StartsWithNoCase(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  }
  return true;
}

bool EndsWithNoCase(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && StartsWithNoCase(s.substr(s.size() - suffix.size()), suffix);
}

// How much of an object's end its open fetches with the size and ETag. The
// last MiB holds a .tsafe's trailer and index, a zip's directory, most of a
// checkpoint index; a safetensors or GGUF file keeps its header at the
// start (read next, in the first block), so its end is of no use.
std::uint64_t TailBytesFor(std::string_view url) {
  std::string_view name = url.substr(0, url.find('?'));
  name = name.substr(name.rfind('/') == std::string_view::npos ? 0 : name.rfind('/') + 1);
  return EndsWithNoCase(name, ".safetensors") || EndsWithNoCase(name, ".gguf") ? kSmallTailBytes : kTailBytes;
}

// One object: its size and ETag, and how to read ranges of it.
class Source {
 public:
  virtual ~Source() = default;
  virtual Status ReadRange(std::uint64_t off, std::span<std::byte> out) const = 0;
  virtual Result<s3::S3Client::Tail> GetTail(std::uint64_t n) const = 0;
};

class S3Source final : public Source {
 public:
  S3Source(std::shared_ptr<s3::S3Client> c, s3::S3Location l) : client_(std::move(c)), loc_(std::move(l)) {}
  Status ReadRange(std::uint64_t off, std::span<std::byte> out) const override {
    return client_->ReadRange(loc_, off, out);
  }
  Result<s3::S3Client::Tail> GetTail(std::uint64_t n) const override { return client_->GetTail(loc_, n); }

 private:
  std::shared_ptr<s3::S3Client> client_;
  s3::S3Location loc_;
};

const s3::S3ClientOptions& DefaultOptions() {
  static const s3::S3ClientOptions o;
  return o;
}

// Plain http(s): the same ranged GETs and retry policy, unsigned.
class HttpSource final : public Source {
 public:
  explicit HttpSource(std::string url) : url_(std::move(url)) {}

  Status ReadRange(std::uint64_t off, std::span<std::byte> out) const override {
    const auto& o = DefaultOptions();
    const std::uint64_t chunk = o.parallel_chunk;
    const std::size_t n = static_cast<std::size_t>((out.size() + chunk - 1) / chunk);
    if (n <= 1) return One(off, out);
    std::atomic<std::size_t> next{0};
    std::mutex mu;
    Status first;
    std::vector<std::thread> threads;
    for (int t = 0; t < std::min<int>(o.parallelism, static_cast<int>(n)); ++t) {
      threads.emplace_back([&] {
        for (std::size_t i = next++; i < n; i = next++) {
          const std::uint64_t b = i * chunk;
          Status s = One(off + b, out.subspan(b, std::min<std::uint64_t>(chunk, out.size() - b)));
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first.ok()) first = s;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    return first;
  }

  Result<s3::S3Client::Tail> GetTail(std::uint64_t n) const override {
    auto r = Send("bytes=-" + std::to_string(n), {}, false, "last " + std::to_string(n) + " bytes");
    TS_RETURN_IF_ERROR(r.status());
    s3::S3Client::Tail t;
    t.etag = r->Header("etag");
    if (r->status == 200) {
      t.size = r->body.size();
    } else {
      const std::int64_t total = s3::ContentRangeTotal(r->Header("content-range"));
      if (total < 0) return Corruption("GET " + url_ + ": bad Content-Range \"" + r->Header("content-range") + "\"");
      t.size = static_cast<std::uint64_t>(total);
    }
    t.bytes = std::move(r->body);
    return t;
  }

 private:
  Status One(std::uint64_t off, std::span<std::byte> out) const {
    if (out.empty()) return Status::OK();
    const std::string range = std::to_string(off) + "-" + std::to_string(off + out.size() - 1);
    auto r = Send("bytes=" + range, out, true, "bytes " + range);
    TS_RETURN_IF_ERROR(r.status());
    if (r->status != 206 && !(r->status == 200 && off == 0)) {
      return Corruption("GET " + url_ + " bytes " + range + ": HTTP " + std::to_string(r->status) +
                        " where 206 Partial Content was expected");
    }
    return Status::OK();
  }
  Result<CurlResponse> Send(const std::string& range, std::span<std::byte> into, bool use_into,
                            const std::string& what) const {
    auto build = [&] {
      CurlRequest req;
      req.url = url_;
      req.headers = {{"Range", range}};
      req.into = into;
      req.use_into = use_into;
      return req;
    };
    return s3::SendWithRetries(pool_, DefaultOptions(), "GET " + url_ + " " + what, build, "", &g_requests);
  }

  std::string url_;
  static CurlPool pool_;
};
CurlPool HttpSource::pool_;

// Cached blocks of one object (ETag-checked on each open).
struct ObjectCache {
  std::mutex mu;
  std::string etag;
  std::uint64_t size = 0;
  std::uint64_t tail_off = 0;
  std::string tail;
  std::list<std::uint64_t> lru;  // block numbers, most recent first
  std::unordered_map<std::uint64_t, std::pair<std::shared_ptr<const std::string>, std::list<std::uint64_t>::iterator>>
      blocks;
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<s3::S3Client>> clients;             // by endpoint, region, key
  std::list<std::pair<std::string, std::shared_ptr<ObjectCache>>> objects;  // most recent first
};
Registry& Reg() {
  // Never destroyed (used from atexit paths); per process, so that a forked
  // child never waits on a lock its parent's threads held (util/fork_local.h).
  static ForkLocal<Registry>* r = new ForkLocal<Registry>();
  return **r;
}

std::mutex g_handler_mu;
std::shared_ptr<UrlHandler> g_handler;

std::shared_ptr<UrlHandler> Handler() {
  std::lock_guard<std::mutex> lock(g_handler_mu);
  return g_handler;
}

// "scheme://" with an RFC 3986 scheme other than the ones read natively.
bool IsOtherScheme(std::string_view path) {
  const std::size_t sep = path.find("://");
  if (sep == std::string_view::npos || sep == 0 || !std::isalpha(static_cast<unsigned char>(path[0]))) return false;
  for (char c : path.substr(0, sep)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  }
  return !StartsWithNoCase(path, "file://") && !StartsWithNoCase(path, "s3://") && !StartsWithNoCase(path, "http://") &&
         !StartsWithNoCase(path, "https://");
}

// A URL served by the registered UrlHandler.
class HandlerSource final : public Source {
 public:
  HandlerSource(std::shared_ptr<UrlHandler> h, std::string url) : handler_(std::move(h)), url_(std::move(url)) {}
  Status ReadRange(std::uint64_t off, std::span<std::byte> out) const override {
    if (out.empty()) return Status::OK();
    ++g_requests;
    return handler_->ReadUrl(url_, off, out);
  }
  Result<s3::S3Client::Tail> GetTail(std::uint64_t n) const override {
    ++g_requests;
    TS_ASSIGN_OR_RETURN(UrlHandler::Stat st, handler_->StatUrl(url_));
    s3::S3Client::Tail t;
    t.size = st.size;
    t.etag = st.version;
    const std::uint64_t k = std::min(n, st.size);
    t.bytes.resize(static_cast<std::size_t>(k));
    TS_RETURN_IF_ERROR(ReadRange(st.size - k, std::as_writable_bytes(std::span(t.bytes))));
    return t;
  }

 private:
  std::shared_ptr<UrlHandler> handler_;
  std::string url_;
};

Result<std::unique_ptr<Source>> MakeSource(const std::string& url) {
  if (IsOtherScheme(url)) {
    std::shared_ptr<UrlHandler> h = Handler();
    if (h == nullptr) return Unsupported(url + ": no reader for this URL scheme");
    return std::unique_ptr<Source>(std::make_unique<HandlerSource>(std::move(h), url));
  }
  if (s3::IsS3Url(url)) {
    TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
    TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
    return std::unique_ptr<Source>(std::make_unique<S3Source>(std::move(client), std::move(loc)));
  }
  return std::unique_ptr<Source>(std::make_unique<HttpSource>(url));
}

class RemoteFile final : public RandomAccessFile {
 public:
  RemoteFile(std::string url, std::unique_ptr<Source> src, std::shared_ptr<ObjectCache> cache)
      : url_(std::move(url)), src_(std::move(src)), cache_(std::move(cache)) {}

  std::uint64_t size() const override { return cache_->size; }
  const std::string& name() const override { return url_; }

  Status ReadAt(std::uint64_t off, std::span<std::byte> out) const override {
    const std::uint64_t size = cache_->size;
    if (off > size || out.size() > size - off) {
      return Corruption(url_ + ": read of " + std::to_string(out.size()) + " bytes at offset " + std::to_string(off) +
                        " passes the end of the object (" + std::to_string(size) + " bytes): truncated");
    }
    if (out.empty()) return Status::OK();
    if (off >= cache_->tail_off) {
      std::memcpy(out.data(), cache_->tail.data() + (off - cache_->tail_off), out.size());
      return Status::OK();
    }
    if (out.size() >= kDirectBytes) {
      g_bytes += out.size();
      return src_->ReadRange(off, out);
    }
    const std::uint64_t b0 = off / kBlock, b1 = (off + out.size() - 1) / kBlock;
    std::vector<std::shared_ptr<const std::string>> have(b1 - b0 + 1);
    {
      std::lock_guard<std::mutex> lock(cache_->mu);
      for (std::uint64_t b = b0; b <= b1; ++b) {
        auto it = cache_->blocks.find(b);
        if (it == cache_->blocks.end()) continue;
        cache_->lru.splice(cache_->lru.begin(), cache_->lru, it->second.second);
        have[b - b0] = it->second.first;
      }
    }
    // The missing blocks as one GET (they are contiguous between the first
    // and last missing one; a cached block in the middle is fetched again).
    std::uint64_t m0 = b1 + 1, m1 = b0;
    for (std::uint64_t b = b0; b <= b1; ++b) {
      if (have[b - b0] == nullptr) {
        m0 = std::min(m0, b);
        m1 = std::max(m1, b);
      }
    }
    if (m0 <= m1) {
      const std::uint64_t start = m0 * kBlock;
      const std::uint64_t end = std::min(size, (m1 + 1) * kBlock);
      std::string buf(end - start, '\0');
      g_bytes += buf.size();
      TS_RETURN_IF_ERROR(src_->ReadRange(start, std::as_writable_bytes(std::span(buf))));
      std::lock_guard<std::mutex> lock(cache_->mu);
      for (std::uint64_t b = m0; b <= m1; ++b) {
        const std::uint64_t bs = b * kBlock - start;
        auto block =
            std::make_shared<const std::string>(buf.substr(bs, std::min<std::uint64_t>(kBlock, buf.size() - bs)));
        have[b - b0] = block;
        auto it = cache_->blocks.find(b);
        if (it != cache_->blocks.end()) {
          cache_->lru.erase(it->second.second);
          cache_->blocks.erase(it);
        }
        cache_->lru.push_front(b);
        cache_->blocks[b] = {block, cache_->lru.begin()};
        while (cache_->blocks.size() > kMaxBlocks) {
          cache_->blocks.erase(cache_->lru.back());
          cache_->lru.pop_back();
        }
      }
    }
    std::size_t done = 0;
    for (std::uint64_t b = b0; b <= b1; ++b) {
      const std::uint64_t from = (b == b0) ? off - b0 * kBlock : 0;
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(have[b - b0]->size() - from, out.size() - done));
      std::memcpy(out.data() + done, have[b - b0]->data() + from, n);
      done += n;
    }
    return Status::OK();
  }

 private:
  std::string url_;
  std::unique_ptr<Source> src_;
  std::shared_ptr<ObjectCache> cache_;
};

// Reads over a mapping that MapRemoteFile filled (the reader's large copies).
class RegionFile final : public RandomAccessFile {
 public:
  RegionFile(std::shared_ptr<MappedRegion> r, std::string name) : r_(std::move(r)), name_(std::move(name)) {}
  Status ReadAt(std::uint64_t off, std::span<std::byte> out) const override {
    const auto b = r_->bytes();
    if (off > b.size() || out.size() > b.size() - off) return Corruption(name_ + ": read past the end: truncated");
    std::memcpy(out.data(), b.data() + off, out.size());
    return Status::OK();
  }
  std::uint64_t size() const override { return r_->bytes().size(); }
  const std::string& name() const override { return name_; }

 private:
  std::shared_ptr<MappedRegion> r_;
  std::string name_;
};

}  // namespace

Result<std::shared_ptr<s3::S3Client>> SharedS3Client() {
  TS_ASSIGN_OR_RETURN(s3::S3Config cfg, s3::S3ConfigFromEnvironment());
  const std::string key = cfg.endpoint + "|" + cfg.region + "|" + cfg.credentials.access_key_id + "|" +
                          s3::Sha256Hex(cfg.credentials.secret_access_key + cfg.credentials.session_token);
  std::lock_guard<std::mutex> lock(Reg().mu);
  auto& slot = Reg().clients[key];
  if (slot == nullptr) slot = s3::S3Client::Create(std::move(cfg));
  return slot;
}

bool IsRemotePath(std::string_view path) {
  if (StartsWithNoCase(path, "s3://") || StartsWithNoCase(path, "http://") || StartsWithNoCase(path, "https://")) {
    return true;
  }
  return IsOtherScheme(path) && Handler() != nullptr;
}

std::shared_ptr<UrlHandler> HandlerFor(std::string_view path) { return IsOtherScheme(path) ? Handler() : nullptr; }

Result<std::unique_ptr<RandomAccessFile>> OpenRemoteFile(const std::string& url) {
  TS_ASSIGN_OR_RETURN(auto src, MakeSource(url));
  TS_ASSIGN_OR_RETURN(s3::S3Client::Tail tail, src->GetTail(TailBytesFor(url)));
  g_bytes += tail.bytes.size();
  std::shared_ptr<ObjectCache> cache;
  {
    std::lock_guard<std::mutex> lock(Reg().mu);
    auto& objs = Reg().objects;
    for (auto it = objs.begin(); it != objs.end(); ++it) {
      if (it->first == url) {
        if (!tail.etag.empty() && it->second->etag == tail.etag && it->second->size == tail.size) cache = it->second;
        objs.erase(it);
        break;
      }
    }
    if (cache == nullptr) {
      cache = std::make_shared<ObjectCache>();
      cache->etag = tail.etag;
      cache->size = tail.size;
      cache->tail_off = tail.size - tail.bytes.size();
      cache->tail = std::move(tail.bytes);
    }
    objs.emplace_front(url, cache);
    while (objs.size() > kMaxObjects) objs.pop_back();
  }
  return std::unique_ptr<RandomAccessFile>(std::make_unique<RemoteFile>(url, std::move(src), std::move(cache)));
}

Result<Env::MappedFile> MapRemoteFile(const std::string& url) {
  TS_ASSIGN_OR_RETURN(auto file, OpenRemoteFile(url));
  const std::uint64_t size = file->size();
  Env::MappedFile out;
  if (size == 0) {
    out.region = std::make_shared<MappedRegion>(nullptr, 0);
  } else {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return IOError(url + ": cannot allocate " + std::to_string(size) + " bytes", errno);
    auto region = std::make_shared<MappedRegion>(p, size);  // unmaps on error too
    TS_RETURN_IF_ERROR(file->ReadAt(0, {static_cast<std::byte*>(p), size}));
    ::mprotect(p, size, PROT_READ);  // as a file mapping: read-only
    out.region = std::move(region);
  }
  out.file = std::make_unique<RegionFile>(out.region, url);
  return out;
}

std::uint64_t RemoteRequestCount() {
  std::lock_guard<std::mutex> lock(Reg().mu);
  std::uint64_t n = g_requests.load();
  for (const auto& [key, client] : Reg().clients) n += client->requests();
  return n;
}

std::uint64_t RemoteBytesFetched() { return g_bytes.load(); }

void ResetRemoteState() {
  std::lock_guard<std::mutex> lock(Reg().mu);
  Reg().clients.clear();
  Reg().objects.clear();
}

}  // namespace tensorsafe::internal

namespace tensorsafe {

void SetUrlHandler(std::shared_ptr<UrlHandler> handler) {
  std::lock_guard<std::mutex> lock(internal::g_handler_mu);
  internal::g_handler = std::move(handler);
}

std::uint64_t RemoteRequestCount() { return internal::RemoteRequestCount(); }
std::uint64_t RemoteBytesFetched() { return internal::RemoteBytesFetched(); }

}  // namespace tensorsafe
