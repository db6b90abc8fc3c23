// An S3 client on libcurl: HEAD, ranged GET (split across parallel
// connections when large), ListObjectsV2, PUT with multipart upload above a
// threshold, DELETE. Requests are signed with SigV4 (remote/sigv4.h);
// credentials, region and endpoint come from remote/s3_config.h.
//
// Every request is retried with exponential backoff and jitter on throttling
// and server trouble (HTTP 408, 429, 5xx; S3 codes SlowDown, RequestTimeout,
// InternalError), timeouts, resets and bodies cut short. Errors name the
// s3:// URL, the HTTP status and S3 error code, and how many attempts were
// made: "S3 GET s3://b/k bytes 0-99: HTTP 503 SlowDown (Please reduce your
// request rate.); failed after 5 attempts".
//
// Thread safety: all methods may be called from several threads at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remote/curl_request.h"
#include "remote/s3_config.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal::s3 {

struct S3ClientOptions {
  int max_attempts = 5;  // per request; 1 = no retry
  // Wait before retry k: min(initial * 2^(k-1), max) plus up to 25% jitter.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5'000};
  std::chrono::milliseconds connect_timeout{10'000};
  // An attempt fails when under 1 byte/s arrives for this long.
  std::chrono::seconds stall_timeout{30};
  // PUTs larger than this use multipart upload in parts of part_size bytes
  // (S3 wants parts of 5 MiB to 5 GiB, at most 10,000 of them; part_size
  // grows to stay within that).
  std::uint64_t multipart_threshold = 64ull << 20;
  std::uint64_t part_size = 16ull << 20;
  // Server-side copies of objects larger than this go in parts this big
  // (S3 copies at most 5 GiB in one request).
  std::uint64_t copy_part_size = 5ull << 30;
  // Connections used by one large ranged read or multipart upload.
  int parallelism = 8;
  // Ranged reads larger than this are split into pieces this big.
  std::uint64_t parallel_chunk = 8ull << 20;
  // Keys per ListObjectsV2 page (S3's maximum is 1000).
  int list_page_size = 1000;
  std::string ca_file;  // PEM bundle for https; empty = system default
};

// Parses "bytes A-B/TOTAL" (or "bytes */TOTAL"): TOTAL, or -1.
std::int64_t ContentRangeTotal(const std::string& content_range);

struct ObjectInfo {
  std::uint64_t size = 0;
  std::string etag;
};

struct ListEntry {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;
};

// Sends build()'s request (called again for each attempt) with the retry
// policy above; returns the 2xx response. `auth_note` is added to 401/403
// messages; `counter` (may be null) counts attempts. Also used for plain
// http(s) objects, unsigned.
Result<CurlResponse> SendWithRetries(const CurlPool& pool, const S3ClientOptions& options, const std::string& label,
                                     const std::function<CurlRequest()>& build, const std::string& auth_note,
                                     std::atomic<std::uint64_t>* counter);

class S3Client {
 public:
  static std::unique_ptr<S3Client> Create(S3Config config, S3ClientOptions options = {});
  // ResolveS3Config from the process environment; its errors.
  static Result<std::unique_ptr<S3Client>> FromEnvironment(S3ClientOptions options = {});

  // Size and ETag. kNotFound for a missing object or bucket.
  Result<ObjectInfo> Head(const S3Location& loc) const;
  // Reads exactly out.size() bytes at `offset`, in parallel pieces when
  // large. kOutOfRange when the range passes the end (HTTP 416); kCorruption
  // when the server sends more or fewer bytes than asked for after retries.
  Status ReadRange(const S3Location& loc, std::uint64_t offset, std::span<std::byte> out) const;
  // The last min(n, size) bytes and the object's size and ETag, in one GET
  // ("Range: bytes=-n"; the size comes from Content-Range).
  struct Tail {
    std::uint64_t size = 0;
    std::string etag;
    std::string bytes;
  };
  Result<Tail> GetTail(const S3Location& loc, std::uint64_t n) const;
  // The whole object in one GET; kLimitExceeded above max_bytes.
  Result<std::string> GetObject(const S3Location& loc, std::uint64_t max_bytes = 64ull << 20) const;
  // Every key under `prefix` in the bucket, in S3's (byte) order, following
  // continuation tokens.
  Result<std::vector<ListEntry>> List(const std::string& bucket, const std::string& prefix) const;
  // Stores `bytes` at `loc` (whole, or multipart above the threshold; a
  // failed multipart upload is aborted so no parts are left billed).
  Status Put(const S3Location& loc, std::span<const std::byte> bytes) const;
  Status Delete(const S3Location& loc) const;
  // Copies the object `from` (of `size` bytes) to `to` on the server: one
  // CopyObject, or a multipart copy of copy_part_size parts (aborted on
  // failure). S3 may fail a copy with a 200 whose body is an <Error>: that
  // is an error here too.
  Status Copy(const S3Location& from, const S3Location& to, std::uint64_t size) const;
  // For tests: creates a bucket.
  Status CreateBucket(const std::string& bucket) const;

  // Attempts sent so far (every retry counts).
  std::uint64_t requests() const { return requests_.load(); }
  const S3Config& config() const { return config_; }
  const S3ClientOptions& options() const { return options_; }

 private:
  S3Client(S3Config config, S3ClientOptions options) : config_(std::move(config)), options_(std::move(options)) {}

  struct Call {
    std::string method = "GET";
    S3Location loc;
    std::vector<std::pair<std::string, std::string>> query;
    std::vector<std::pair<std::string, std::string>> headers;  // signed too
    std::span<const std::byte> body;
    std::span<std::byte> into;
    bool use_into = false;
    std::string what;  // for messages, e.g. "bytes 0-99"
  };
  // Signs and sends with retries; a 2xx response or the error.
  Result<CurlResponse> Send(const Call& call) const;
  Status GetOneRange(const S3Location& loc, std::uint64_t offset, std::span<std::byte> out) const;
  Status PutMultipart(const S3Location& loc, std::span<const std::byte> bytes) const;
  // S3's multipart protocol on `loc`: start, `parts` parts sent in parallel
  // (each Call's part fields filled by `fill`; its ETag read from the
  // response header, or from its body when `etag_in_body`), complete; an
  // abort when any step fails.
  Status Multipart(const S3Location& loc, std::size_t parts, const std::function<void(std::size_t, Call&)>& fill,
                   bool etag_in_body) const;

  S3Config config_;
  S3ClientOptions options_;
  CurlPool pool_;
  mutable std::atomic<std::uint64_t> requests_{0};
};

}  // namespace tensorsafe::internal::s3
