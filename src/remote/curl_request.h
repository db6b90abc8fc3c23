// One HTTP request with libcurl, any method, for the S3 client: headers out
// and in, a body from memory, and a response body either kept (error XML,
// listings) or written straight into the caller's buffer (ranged reads).
// No retries here: the S3 client decides, since it must sign each attempt.
//
// Thread safety: a CurlPool may be used from many threads; each Perform()
// takes its own easy handle, so connections are reused (keep-alive). A
// forked child starts with no handles (util/fork_local.h): it never shares
// a connection with its parent.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "util/fork_local.h"

namespace tensorsafe::internal {

struct CurlRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::span<const std::byte> body;  // sent as is (PUT, POST)
  // When set, a 2xx body goes here and must fit (more is a transport error
  // "body longer than the buffer"); otherwise it is kept in the response.
  std::span<std::byte> into;
  bool use_into = false;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::seconds stall_timeout{30};
  std::string ca_file;
};

struct CurlResponse {
  bool transport_ok = false;    // a complete HTTP response arrived
  std::string transport_error;  // curl's reason when !transport_ok
  int os_errno = 0;
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // unless written into the request's buffer
  std::uint64_t received = 0;                  // body bytes received
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class CurlPool {
 public:
  CurlPool();
  ~CurlPool();
  CurlPool(const CurlPool&) = delete;
  CurlPool& operator=(const CurlPool&) = delete;
  CurlResponse Perform(const CurlRequest& req) const;

 private:
  struct Idle {
    std::mutex mu;
    std::vector<void*> handles;  // CURL* easy handles
    ~Idle();
  };
  ForkLocal<Idle> idle_;
};

}  // namespace tensorsafe::internal
