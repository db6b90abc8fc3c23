#include "dataset/remote/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "remote/curl_request.h"
#include "remote/remote_file.h"
#include "remote/s3_client.h"

namespace tensorsafe::internal {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// A size known before the first byte (a Content-Length, or a handler's
// stat) checked against the limit, then against the size the index
// promises.
Status CheckAnnouncedSize(const std::string& url, std::uint64_t size, const HttpExpect& expect, bool content_length) {
  const std::string n = std::to_string(size);
  if (expect.max_size != 0 && size > expect.max_size) {
    return LimitExceeded("GET " + url + ": " + (content_length ? "Content-Length " : "size ") + n +
                         " exceeds the limit of " + std::to_string(expect.max_size) + " bytes");
  }
  if (expect.exact_size && size != *expect.exact_size) {
    return Corruption(
        "GET " + url + ": " +
        (content_length ? "server sends " + n + " bytes (Content-Length)" : "the object has " + n + " bytes") +
        ", the index says " + std::to_string(*expect.exact_size) + "; not cached");
  }
  return Status::OK();
}

// `size` bytes read by read(offset, buffer) in pieces of `piece` bytes into
// one reused buffer, written to the sink in order; a cancel is seen
// between pieces.
template <typename Read>
Status CopyInPieces(const std::string& url, std::uint64_t size, std::uint64_t piece, HttpSink& sink,
                    const std::atomic<bool>* cancel, Read&& read) {
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min(size, piece)));
  for (std::uint64_t off = 0; off < size; off += piece) {
    if (cancel != nullptr && cancel->load()) return FailedPrecondition("GET " + url + ": cancelled");
    const std::span<std::byte> part = std::span(buf).first(static_cast<std::size_t>(std::min(piece, size - off)));
    TS_RETURN_IF_ERROR(read(off, part));
    TS_RETURN_IF_ERROR(sink.Write(part));
  }
  return Status::OK();
}

// State shared with the libcurl callbacks of one attempt.
struct Transfer {
  HttpSink* sink = nullptr;
  const HttpExpect* expect = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  CURL* curl = nullptr;
  const std::string* url = nullptr;
  std::uint64_t received = 0;
  bool started = false;
  long status = 0;      // the HTTP status when the body was refused
  Status abort_reason;  // set when a callback stopped the transfer
};

size_t OnWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (!t->started) {
    t->started = true;
    long code = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) {
      // Error pages and redirect bodies are not data: stop reading them.
      t->status = code;
      return 0;
    }
    curl_off_t length = -1;
    curl_easy_getinfo(t->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length >= 0) {
      t->abort_reason = CheckAnnouncedSize(*t->url, static_cast<std::uint64_t>(length), *t->expect, true);
      if (!t->abort_reason.ok()) return 0;
    }
  }
  t->received += n;
  if (t->expect->max_size != 0 && t->received > t->expect->max_size) {
    t->abort_reason = LimitExceeded("GET " + *t->url + ": body exceeds the limit of " +
                                    std::to_string(t->expect->max_size) + " bytes");
    return 0;
  }
  if (t->expect->exact_size && t->received > *t->expect->exact_size) {
    t->abort_reason = Corruption("GET " + *t->url + ": server sends more than the " +
                                 std::to_string(*t->expect->exact_size) + " bytes the index says; not cached");
    return 0;
  }
  Status s = t->sink->Write({reinterpret_cast<const std::byte*>(data), n});
  if (!s.ok()) {
    t->abort_reason = s;
    return 0;
  }
  return n;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return (t->cancel != nullptr && t->cancel->load(std::memory_order_relaxed)) ? 1 : 0;
}

bool RetryableStatus(long code) { return code == 408 || code == 429 || (code >= 500 && code <= 599); }

// Sleeps for the backoff before retry `attempt` (1-based), waking early when
// cancelled. Returns false when cancelled.
bool Backoff(const HttpConfig& c, int attempt, const std::atomic<bool>* cancel) {
  auto wait = c.initial_backoff;
  for (int i = 1; i < attempt && wait < c.max_backoff; ++i) wait *= 2;
  wait = std::min(wait, c.max_backoff);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  wait += std::chrono::milliseconds(std::uniform_int_distribution<std::int64_t>(0, wait.count() / 4)(rng));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cancel != nullptr && cancel->load()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(20), deadline - std::chrono::steady_clock::now()));
  }
  return !(cancel != nullptr && cancel->load());
}

// s3:// files of a dataset: signed ranged GETs (src/remote/), the same
// checks as below: the size before the first byte is kept, the limit before
// buffering an index.
Status GetS3(const std::string& url, HttpSink& sink, const HttpExpect& expect, const std::atomic<bool>* cancel) {
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  TS_RETURN_IF_ERROR(sink.Reset());
  TS_ASSIGN_OR_RETURN(s3::ObjectInfo info, client->Head(loc));
  TS_RETURN_IF_ERROR(CheckAnnouncedSize(url, info.size, expect, /*content_length=*/true));
  TS_ASSIGN_OR_RETURN(std::span<std::byte> direct, sink.Direct(info.size));
  if (!direct.empty()) {
    // Straight into the sink's memory, 64 MiB at a time (a cancel is seen
    // between pieces), each as parallel 8 MiB ranges: no copy, no ordering.
    constexpr std::uint64_t kDirectPiece = 64ull << 20;
    for (std::uint64_t off = 0; off < info.size; off += kDirectPiece) {
      if (cancel != nullptr && cancel->load()) return FailedPrecondition("GET " + url + ": cancelled");
      const std::size_t n = static_cast<std::size_t>(std::min(kDirectPiece, info.size - off));
      TS_RETURN_IF_ERROR(client->ReadRange(loc, off, direct.subspan(static_cast<std::size_t>(off), n)));
    }
    return sink.DirectDone();
  }
  // Pieces of 32 MiB, each fetched as parallel 8 MiB ranges, written in order.
  return CopyInPieces(url, info.size, 32ull << 20, sink, cancel,
                      [&](std::uint64_t off, std::span<std::byte> part) { return client->ReadRange(loc, off, part); });
}

// Files of a dataset at a URL the registered UrlHandler serves (fsspec in
// Python): its size first, checked as a Content-Length is, then pieces of
// 8 MiB in order. The handler's filesystem does its own retries.
Status GetFromHandler(UrlHandler& handler, const std::string& url, HttpSink& sink, const HttpExpect& expect,
                      const std::atomic<bool>* cancel) {
  TS_RETURN_IF_ERROR(sink.Reset());
  TS_ASSIGN_OR_RETURN(UrlHandler::Stat st, handler.StatUrl(url));
  TS_RETURN_IF_ERROR(CheckAnnouncedSize(url, st.size, expect, /*content_length=*/false));
  return CopyInPieces(url, st.size, 8ull << 20, sink, cancel,
                      [&](std::uint64_t off, std::span<std::byte> part) { return handler.ReadUrl(url, off, part); });
}

}  // namespace

Result<HttpObject> HttpClient::Head(const std::string& url) const {
  if (std::shared_ptr<UrlHandler> h = HandlerFor(url)) {
    TS_ASSIGN_OR_RETURN(UrlHandler::Stat st, h->StatUrl(url));
    return HttpObject{url, st.size, std::move(st.version)};
  }
  if (s3::IsS3Url(url)) {
    TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(url));
    TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
    TS_ASSIGN_OR_RETURN(s3::ObjectInfo info, client->Head(loc));
    return HttpObject{url, info.size, std::move(info.etag)};
  }
  static const CurlPool* pool = new CurlPool();  // never destroyed: used from atexit paths
  s3::S3ClientOptions o;
  o.max_attempts = config_.max_attempts;
  o.initial_backoff = config_.initial_backoff;
  o.max_backoff = config_.max_backoff;
  o.connect_timeout = config_.connect_timeout;
  o.stall_timeout = config_.stall_timeout;
  o.ca_file = config_.ca_file;
  auto build = [&] {
    CurlRequest r;
    r.method = "HEAD";
    r.url = url;
    return r;
  };
  TS_ASSIGN_OR_RETURN(CurlResponse r, s3::SendWithRetries(*pool, o, "HEAD " + url, build, "", nullptr));
  const std::string len = r.Header("content-length");
  if (len.empty() || len.find_first_not_of("0123456789") != std::string::npos) {
    return Corruption("HEAD " + url + ": no Content-Length in the response");
  }
  return HttpObject{url, std::strtoull(len.c_str(), nullptr, 10), r.Header("etag")};
}

Result<std::vector<HttpObject>> HttpClient::List(const std::string& prefix_url) const {
  if (std::shared_ptr<UrlHandler> h = HandlerFor(prefix_url)) {
    TS_ASSIGN_OR_RETURN(std::vector<UrlHandler::Entry> entries, h->ListUrl(prefix_url));
    std::vector<HttpObject> out;
    out.reserve(entries.size());
    for (UrlHandler::Entry& e : entries) {
      if (e.url.compare(0, prefix_url.size(), prefix_url) != 0) {
        return Internal("listing " + prefix_url + ": the URL handler returned " + e.url + ", outside the prefix");
      }
      out.push_back(HttpObject{std::move(e.url), e.size, std::move(e.version)});
    }
    std::sort(out.begin(), out.end(), [](const HttpObject& a, const HttpObject& b) { return a.url < b.url; });
    return out;
  }
  if (!s3::IsS3Url(prefix_url)) {
    return Unsupported(prefix_url + ": an http(s) server has no listing; name the files (a brace pattern such as " +
                       "shard-{0000..0099}.tar) or give the dataset an index.json");
  }
  TS_ASSIGN_OR_RETURN(s3::S3Location loc, s3::ParseS3Url(prefix_url));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<s3::S3Client> client, SharedS3Client());
  TS_ASSIGN_OR_RETURN(std::vector<s3::ListEntry> entries, client->List(loc.bucket, loc.key));
  std::vector<HttpObject> out;
  out.reserve(entries.size());
  for (s3::ListEntry& e : entries) out.push_back(HttpObject{"s3://" + loc.bucket + "/" + e.key, e.size, e.etag});
  return out;
}

HttpClient::HttpClient(HttpConfig config) : config_(std::move(config)) { GlobalInit(); }

HttpClient::~HttpClient() = default;

HttpClient::Idle::~Idle() {
  for (void* h : handles) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::TakeHandle() const {
  {
    Idle& idle = *idle_;
    std::lock_guard<std::mutex> lock(idle.mu);
    if (!idle.handles.empty()) {
      void* h = idle.handles.back();
      idle.handles.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::ReturnHandle(void* handle) const {
  Idle& idle = *idle_;
  std::lock_guard<std::mutex> lock(idle.mu);
  idle.handles.push_back(handle);
}

Status HttpClient::Get(const std::string& url, HttpSink& sink, const HttpExpect& expect,
                       const std::atomic<bool>* cancel) const {
  if (std::shared_ptr<UrlHandler> h = HandlerFor(url)) return GetFromHandler(*h, url, sink, expect, cancel);
  if (s3::IsS3Url(url)) return GetS3(url, sink, expect, cancel);
  CURL* curl = static_cast<CURL*>(TakeHandle());
  if (curl == nullptr) return Internal("GET " + url + ": curl_easy_init failed");
  struct Returner {
    const HttpClient* c;
    CURL* h;
    ~Returner() { c->ReturnHandle(h); }
  } returner{this, curl};

  std::string last_error;
  int last_errno = 0;
  int attempts = 0;
  for (int attempt = 1; attempt <= config_.max_attempts; ++attempt) {
    attempts = attempt;
    if (attempt > 1 && !Backoff(config_, attempt - 1, cancel)) {
      return FailedPrecondition("GET " + url + ": cancelled");
    }
    TS_RETURN_IF_ERROR(sink.Reset());
    Transfer t;
    t.sink = &sink;
    t.expect = &expect;
    t.cancel = cancel;
    t.curl = curl;
    t.url = &url;
    char errbuf[CURL_ERROR_SIZE] = {0};

    // Reset keeps the handle's connection cache: keep-alive across shards.
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    // Only the base URL's scheme family, and no redirects: a redirect could
    // name another host (docs/SECURITY.md, "Paths and URLs").
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnWrite);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &OnProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.connect_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.transfer_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(std::max<std::int64_t>(1, config_.stall_timeout.count())));
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "tensorsafe/0.1 (shard cache)");
    // 256 KiB receive chunks: fewer write and hash calls than the 16 KiB default.
    curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 256L << 10);
    if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());

    const CURLcode rc = curl_easy_perform(curl);
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (!t.abort_reason.ok()) return t.abort_reason;  // limits, checksum sizes, sink errors
    if (rc == CURLE_ABORTED_BY_CALLBACK) return FailedPrecondition("GET " + url + ": cancelled");

    if (code != 0 && code != 200) {
      const std::string what = "GET " + url + ": HTTP " + std::to_string(code);
      if (code == 404 || code == 410) return NotFound(what);
      if (code >= 300 && code < 400) return IOError(what + " (redirects are not followed)", 0);
      if (!RetryableStatus(code)) return IOError(what, 0);
      last_error = "HTTP " + std::to_string(code);
      last_errno = 0;
      continue;
    }
    if (rc == CURLE_OK) {
      if (expect.exact_size && t.received != *expect.exact_size) {
        // A complete response of the wrong length (no Content-Length to
        // refuse it earlier): the server holds a different file.
        return Corruption("GET " + url + ": received " + std::to_string(t.received) + " bytes, the index says " +
                          std::to_string(*expect.exact_size) + "; not cached");
      }
      return Status::OK();
    }
    // Transport failure: connection refused or reset, timeout, body cut short.
    long os_errno = 0;
    curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
    last_errno = static_cast<int>(os_errno);
    last_error = std::string(curl_easy_strerror(rc));
    if (errbuf[0] != '\0') last_error += std::string(" (") + errbuf + ")";
    last_error += "; received " + std::to_string(t.received) + " bytes";
    if (expect.exact_size) last_error += " of " + std::to_string(*expect.exact_size);
    if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT || rc == CURLE_SSL_CACERT_BADFILE ||
        rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CERTPROBLEM) {
      break;  // retrying cannot help
    }
  }
  return IOError("GET " + url + ": failed after " + std::to_string(attempts) + " attempt(s): " + last_error,
                 last_errno);
}

}  // namespace tensorsafe::internal
