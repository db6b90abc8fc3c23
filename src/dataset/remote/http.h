// HTTP GET with libcurl for the shard cache: retries with backoff, size
// limits enforced while bytes arrive (never after buffering them), and no
// redirects (docs/REMOTE.md, "Downloads").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/status.h"
#include "util/fork_local.h"

namespace tensorsafe::internal {

struct HttpConfig {
  int max_attempts = 4;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{10'000};
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds transfer_timeout{0};
  std::chrono::seconds stall_timeout{30};
  std::string ca_file;
};

// Receives the body of one attempt. Reset() is called before every attempt
// (a retry starts from byte 0), Write() with each chunk in order.
class HttpSink {
 public:
  virtual ~HttpSink() = default;
  virtual Status Reset() = 0;
  virtual Status Write(std::span<const std::byte> bytes) = 0;
  // Optional, for bodies whose size is known first (s3://): memory for all
  // `size` bytes, filled by parallel ranged GETs in any order and then
  // committed with DirectDone(), instead of Write() calls. An empty span
  // (the default) means Write() it is.
  virtual Result<std::span<std::byte>> Direct(std::uint64_t size) {
    (void)size;
    return std::span<std::byte>();
  }
  virtual Status DirectDone() { return Status::OK(); }
};

// What the body must look like. Checked against Content-Length before the
// first byte is kept, and against the running count as bytes arrive.
struct HttpExpect {
  std::optional<std::uint64_t> exact_size;  // mismatch: kCorruption
  std::uint64_t max_size = 0;               // above: kLimitExceeded (0 = none)
};

// An object as a HEAD or a listing describes it.
struct HttpObject {
  std::string url;
  std::uint64_t bytes = 0;
  std::string etag;
};

// Thread-safe: Get() may run on several threads; each takes its own easy
// handle from a pool so connections are reused between requests.
class HttpClient {
 public:
  explicit HttpClient(HttpConfig config);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GETs `url` into `sink`, retrying transient failures. `cancel` (may be
  // null) aborts a transfer or a backoff wait: kFailedPrecondition.
  // Errors: kNotFound (404, 410), kIOError (other statuses, transport errors
  // after the last attempt; errno from the socket when curl has one),
  // kCorruption / kLimitExceeded (from `expect`, not retried), the sink's own.
  Status Get(const std::string& url, HttpSink& sink, const HttpExpect& expect, const std::atomic<bool>* cancel) const;

  // HEAD: the size (Content-Length) and ETag, with the same retries.
  // Errors: kNotFound (404, 410), kIOError, kCorruption (no Content-Length).
  Result<HttpObject> Head(const std::string& url) const;

  // Every object whose URL starts with `prefix_url` (s3:// only, S3's
  // ListObjectsV2); kUnsupported for http(s), which has no listing.
  Result<std::vector<HttpObject>> List(const std::string& prefix_url) const;

 private:
  void* TakeHandle() const;
  void ReturnHandle(void* handle) const;

  HttpConfig config_;
  // Per process (util/fork_local.h): a forked child never reuses a parent's
  // connection.
  struct Idle {
    std::mutex mu;
    std::vector<void*> handles;  // CURL* easy handles
    ~Idle();
  };
  ForkLocal<Idle> idle_;
};

}  // namespace tensorsafe::internal
