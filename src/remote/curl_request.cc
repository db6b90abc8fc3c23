#include "remote/curl_request.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>

namespace tensorsafe::internal {
namespace {

struct State {
  const CurlRequest* req = nullptr;
  CurlResponse* resp = nullptr;
  CURL* curl = nullptr;
  std::size_t sent = 0;
  bool overflow = false;
};

// Error bodies are XML of a few hundred bytes; keep at most this much.
constexpr std::size_t kMaxKeptBody = 64ull << 20;

size_t OnWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* s = static_cast<State*>(user);
  const size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
  if (s->req->use_into && code >= 200 && code < 300) {
    if (s->resp->received + n > s->req->into.size()) {
      s->overflow = true;
      return 0;
    }
    std::memcpy(s->req->into.data() + s->resp->received, data, n);
  } else {
    if (s->resp->body.size() + n > kMaxKeptBody) return 0;
    s->resp->body.append(data, n);
  }
  s->resp->received += n;
  return n;
}

size_t OnHeader(char* data, size_t size, size_t nmemb, void* user) {
  auto* s = static_cast<State*>(user);
  const size_t n = size * nmemb;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    s->resp->headers.clear();  // a 100 Continue precedes the real response
    return n;
  }
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  s->resp->headers[name] = std::string(v);
  return n;
}

size_t OnRead(char* buf, size_t size, size_t nitems, void* user) {
  auto* s = static_cast<State*>(user);
  const size_t n = std::min(size * nitems, s->req->body.size() - s->sent);
  std::memcpy(buf, s->req->body.data() + s->sent, n);
  s->sent += n;
  return n;
}

int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* s = static_cast<State*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<std::size_t>(offset) > s->req->body.size()) {
    return CURL_SEEKFUNC_FAIL;
  }
  s->sent = static_cast<std::size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

}  // namespace

CurlPool::CurlPool() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CurlPool::~CurlPool() = default;

CurlPool::Idle::~Idle() {
  for (void* h : handles) curl_easy_cleanup(static_cast<CURL*>(h));
}

CurlResponse CurlPool::Perform(const CurlRequest& req) const {
  CURL* curl = nullptr;
  {
    Idle& idle = *idle_;
    std::lock_guard<std::mutex> lock(idle.mu);
    if (!idle.handles.empty()) {
      curl = static_cast<CURL*>(idle.handles.back());
      idle.handles.pop_back();
    }
  }
  if (curl == nullptr) curl = curl_easy_init();
  CurlResponse resp;
  if (curl == nullptr) {
    resp.transport_error = "curl_easy_init failed";
    return resp;
  }
  State st{&req, &resp, curl};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_reset(curl);  // keeps the connection cache
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnWrite);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &st);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::max<long>(1, req.stall_timeout.count())));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "tensorsafe/0.1 (s3)");
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 256L << 10);
  if (!req.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, req.ca_file.c_str());

  if (req.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, &OnRead);
    curl_easy_setopt(curl, CURLOPT_READDATA, &st);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, &OnSeek);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &st);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  curl_slist* hdrs = nullptr;
  for (const auto& [k, v] : req.headers) hdrs = curl_slist_append(hdrs, (k + ": " + v).c_str());
  // No "Expect: 100-continue" round trip before each part.
  hdrs = curl_slist_append(hdrs, "Expect:");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);

  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(hdrs);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc == CURLE_OK) {
    resp.transport_ok = true;
  } else {
    long os_errno = 0;
    curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
    resp.os_errno = static_cast<int>(os_errno);
    resp.transport_error =
        st.overflow ? std::string("body longer than the ") + std::to_string(req.into.size()) + " bytes asked for"
                    : std::string(curl_easy_strerror(rc));
    if (errbuf[0] != '\0' && !st.overflow) resp.transport_error += std::string(" (") + errbuf + ")";
  }
  {
    Idle& idle = *idle_;
    std::lock_guard<std::mutex> lock(idle.mu);
    idle.handles.push_back(curl);
  }
  return resp;
}

}  // namespace tensorsafe::internal
