#include "remote/s3_client.h"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <random>
#include <thread>

#include "util/parallel_for.h"

namespace tensorsafe::internal::s3 {
namespace {

// XML text with the five entities and numeric references decoded (S3
// escapes keys in listings).
std::string XmlDecode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const std::size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s.substr(i);
      break;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      const bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
      unsigned long cp = std::strtoul(std::string(ent.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

// Finds <tag>text</tag> at or after *pos; advances *pos past it.
bool NextTag(std::string_view xml, std::string_view tag, std::size_t* pos, std::string_view* text) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const std::size_t b = xml.find(open, *pos);
  if (b == std::string_view::npos) return false;
  const std::size_t e = xml.find(close, b + open.size());
  if (e == std::string_view::npos) return false;
  *text = xml.substr(b + open.size(), e - b - open.size());
  *pos = e + close.size();
  return true;
}

// The decoded text of the first <tag>...</tag>; empty when absent.
std::string Tag(std::string_view xml, std::string_view tag) {
  std::size_t pos = 0;
  std::string_view t;
  return NextTag(xml, tag, &pos, &t) ? XmlDecode(t) : std::string();
}

bool RetryableCode(const std::string& code) {
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable" ||
         code == "RequestTimeTooSkewed";
}

void Backoff(const S3ClientOptions& o, int retry) {
  auto wait = o.initial_backoff;
  for (int i = 1; i < retry && wait < o.max_backoff; ++i) wait *= 2;
  wait = std::min(wait, o.max_backoff);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  wait += std::chrono::milliseconds(std::uniform_int_distribution<std::int64_t>(0, wait.count() / 4)(rng));
  std::this_thread::sleep_for(wait);
}

std::string Authority(const std::string& endpoint) {
  const std::size_t sep = endpoint.find("://");
  std::string scheme = endpoint.substr(0, sep);
  std::string auth = endpoint.substr(sep + 3);
  // curl sends the Host header without a default port: sign what it sends.
  if (scheme == "http" && auth.ends_with(":80")) auth.resize(auth.size() - 3);
  if (scheme == "https" && auth.ends_with(":443")) auth.resize(auth.size() - 4);
  return auth;
}

}  // namespace

Result<CurlResponse> SendWithRetries(const CurlPool& pool, const S3ClientOptions& options, const std::string& label,
                                     const std::function<CurlRequest()>& build, const std::string& auth_note,
                                     std::atomic<std::uint64_t>* counter) {
  std::string last;
  int last_errno = 0;
  for (int attempt = 1; attempt <= options.max_attempts; ++attempt) {
    if (attempt > 1) Backoff(options, attempt - 1);
    CurlRequest req = build();  // signed afresh: x-amz-date moves on
    req.connect_timeout = options.connect_timeout;
    req.stall_timeout = options.stall_timeout;
    req.ca_file = options.ca_file;
    if (counter != nullptr) ++*counter;
    CurlResponse resp = pool.Perform(req);

    if (!resp.transport_ok) {
      if (resp.transport_error.starts_with("body longer")) return Corruption(label + ": " + resp.transport_error);
      last = resp.transport_error + " after " + std::to_string(resp.received) + " body bytes";
      last_errno = resp.os_errno;
      continue;
    }
    if (resp.status >= 200 && resp.status < 300) {
      // CompleteMultipartUpload may answer 200 and put an error in the body.
      if (req.method == "POST" && resp.body.find("<Error>") != std::string::npos) {
        const std::string code = Tag(resp.body, "Code");
        last = "HTTP " + std::to_string(resp.status) + " " + code + " (" + Tag(resp.body, "Message") + ")";
        if (RetryableCode(code)) continue;
        return IOError(label + ": " + last, 0);
      }
      if (req.use_into && resp.received != req.into.size()) {
        last = "body cut short: " + std::to_string(resp.received) + " of " + std::to_string(req.into.size()) + " bytes";
        continue;
      }
      return resp;
    }
    const std::string code = Tag(resp.body, "Code");
    const std::string message = Tag(resp.body, "Message");
    std::string what = "HTTP " + std::to_string(resp.status);
    if (!code.empty()) what += " " + code;
    if (!message.empty()) what += " (" + message + ")";
    if (resp.status == 408 || resp.status == 429 || resp.status >= 500 || RetryableCode(code)) {
      last = what;
      last_errno = 0;
      continue;
    }
    const std::string tries = attempt > 1 ? "; after " + std::to_string(attempt) + " attempts" : "";
    if (resp.status == 404 || resp.status == 410) return NotFound(label + ": " + what + tries);
    if (resp.status == 416) return OutOfRange(label + ": " + what + tries);
    if (resp.status == 401 || resp.status == 403) return IOError(label + ": " + what + auth_note + tries, EACCES);
    if (resp.status >= 300 && resp.status < 400) {
      return IOError(label + ": " + what + " (redirects are not followed)" + tries, 0);
    }
    return IOError(label + ": " + what + tries, 0);
  }
  return IOError(label + ": " + last + "; failed after " + std::to_string(options.max_attempts) + " attempts (" +
                     std::to_string(options.max_attempts - 1) + " retries)",
                 last_errno);
}

std::unique_ptr<S3Client> S3Client::Create(S3Config config, S3ClientOptions options) {
  return std::unique_ptr<S3Client>(new S3Client(std::move(config), std::move(options)));
}

Result<std::unique_ptr<S3Client>> S3Client::FromEnvironment(S3ClientOptions options) {
  TS_ASSIGN_OR_RETURN(S3Config cfg, S3ConfigFromEnvironment());
  return Create(std::move(cfg), std::move(options));
}

Result<CurlResponse> S3Client::Send(const Call& call) const {
  // Where the request goes: path style for custom endpoints and buckets with
  // dots (TLS wildcard certificates cover one label), else virtual host.
  std::string scheme = "https", host, path;
  const std::string key_path = UriEncode(call.loc.key, true);
  if (!config_.endpoint.empty()) {
    scheme = config_.endpoint.substr(0, config_.endpoint.find("://"));
    host = Authority(config_.endpoint);
  }
  if (config_.path_style || call.loc.bucket.find('.') != std::string::npos) {
    if (host.empty()) host = "s3." + config_.region + ".amazonaws.com";
    path = "/" + call.loc.bucket + (call.loc.key.empty() ? "" : "/" + key_path);
  } else {
    if (host.empty())
      host = call.loc.bucket + ".s3." + config_.region + ".amazonaws.com";
    else
      host = call.loc.bucket + "." + host;
    path = "/" + key_path;
  }
  const std::string query = CanonicalQuery(call.query);
  const std::string url = scheme + "://" + host + path + (query.empty() ? "" : "?" + query);
  const std::string payload_hash = call.body.empty() ? std::string(kEmptySha256) : Sha256Hex(call.body);
  const std::string label = "S3 " + call.method + " " + call.loc.Url() + (call.what.empty() ? "" : " " + call.what);

  auto build = [&]() {
    SigningInput in;
    in.method = call.method;
    in.canonical_uri = path;
    in.query = call.query;
    in.headers = call.headers;
    in.headers.emplace_back("host", host);
    in.headers.emplace_back("x-amz-content-sha256", payload_hash);
    in.headers.emplace_back("x-amz-date", AmzDate(std::chrono::system_clock::now()));
    if (!config_.credentials.session_token.empty()) {
      in.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
    }
    in.payload_hash = payload_hash;
    in.region = config_.region;
    const Signature sig = SignV4(in, config_.credentials);
    CurlRequest req;
    req.method = call.method;
    req.url = url;
    req.headers = in.headers;
    req.headers.emplace_back("Authorization", sig.authorization);
    req.body = call.body;
    req.into = call.into;
    req.use_into = call.use_into;
    return req;
  };
  return SendWithRetries(pool_, options_, label, build, " (credentials: " + config_.credentials_source + ")",
                         &requests_);
}

Result<ObjectInfo> S3Client::Head(const S3Location& loc) const {
  Call c;
  c.method = "HEAD";
  c.loc = loc;
  TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
  const std::string len = r.Header("content-length");
  if (len.empty()) return Corruption("S3 HEAD " + loc.Url() + ": no Content-Length in the response");
  ObjectInfo info;
  info.size = std::strtoull(len.c_str(), nullptr, 10);
  info.etag = r.Header("etag");
  return info;
}

Status S3Client::GetOneRange(const S3Location& loc, std::uint64_t offset, std::span<std::byte> out) const {
  if (out.empty()) return Status::OK();
  Call c;
  c.loc = loc;
  const std::string range = std::to_string(offset) + "-" + std::to_string(offset + out.size() - 1);
  c.headers.emplace_back("range", "bytes=" + range);
  c.what = "bytes " + range;
  c.into = out;
  c.use_into = true;
  TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
  if (r.status != 206 && !(r.status == 200 && offset == 0)) {
    return Corruption("S3 GET " + loc.Url() + " bytes " + range + ": HTTP " + std::to_string(r.status) +
                      " where 206 Partial Content was expected");
  }
  return Status::OK();
}

Status S3Client::ReadRange(const S3Location& loc, std::uint64_t offset, std::span<std::byte> out) const {
  const std::uint64_t chunk = std::max<std::uint64_t>(options_.parallel_chunk, 1);
  if (out.size() <= chunk || options_.parallelism <= 1) return GetOneRange(loc, offset, out);
  const std::size_t n = static_cast<std::size_t>((out.size() + chunk - 1) / chunk);
  return ForEachItemOrError(n, static_cast<unsigned>(std::max(1, options_.parallelism)), [&](std::size_t i) {
    const std::uint64_t b = i * chunk;
    const std::uint64_t len = std::min<std::uint64_t>(chunk, out.size() - b);
    return GetOneRange(loc, offset + b, out.subspan(b, len));
  });
}

std::int64_t ContentRangeTotal(const std::string& cr) {
  const std::size_t slash = cr.rfind('/');
  if (!cr.starts_with("bytes ") || slash == std::string::npos || slash + 1 >= cr.size()) return -1;
  std::int64_t v = 0;
  for (std::size_t i = slash + 1; i < cr.size(); ++i) {
    if (cr[i] < '0' || cr[i] > '9' || v > (std::int64_t{1} << 56)) return -1;
    v = v * 10 + (cr[i] - '0');
  }
  return v;
}

Result<S3Client::Tail> S3Client::GetTail(const S3Location& loc, std::uint64_t n) const {
  Call c;
  c.loc = loc;
  c.headers.emplace_back("range", "bytes=-" + std::to_string(n));
  c.what = "last " + std::to_string(n) + " bytes";
  auto r = Send(c);
  if (!r.ok() && r.status().code() == StatusCode::kOutOfRange) {
    // An empty object has no last bytes.
    TS_ASSIGN_OR_RETURN(ObjectInfo info, Head(loc));
    return Tail{info.size, info.etag, {}};
  }
  TS_RETURN_IF_ERROR(r.status());
  Tail t;
  t.etag = r->Header("etag");
  if (r->status == 200) {
    t.size = r->body.size();  // the server ignored the range: this is all of it
  } else {
    const std::int64_t total = ContentRangeTotal(r->Header("content-range"));
    if (total < 0 || static_cast<std::uint64_t>(total) < r->body.size()) {
      return Corruption("S3 GET " + loc.Url() + " " + c.what + ": bad Content-Range \"" + r->Header("content-range") +
                        "\"");
    }
    t.size = static_cast<std::uint64_t>(total);
  }
  t.bytes = std::move(r->body);
  return t;
}

Result<std::string> S3Client::GetObject(const S3Location& loc, std::uint64_t max_bytes) const {
  Call c;
  c.loc = loc;
  TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
  if (r.body.size() > max_bytes) {
    return LimitExceeded("S3 GET " + loc.Url() + ": " + std::to_string(r.body.size()) + " bytes exceed the limit of " +
                         std::to_string(max_bytes));
  }
  return std::move(r.body);
}

Result<std::vector<ListEntry>> S3Client::List(const std::string& bucket, const std::string& prefix) const {
  std::vector<ListEntry> out;
  std::string token;
  for (;;) {
    Call c;
    c.loc = {bucket, ""};
    c.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(options_.list_page_size)}};
    if (!token.empty()) c.query.emplace_back("continuation-token", token);
    c.what = "list prefix \"" + prefix + "\"";
    TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
    std::size_t pos = 0;
    std::string_view item;
    while (NextTag(r.body, "Contents", &pos, &item)) {
      ListEntry e;
      e.key = Tag(item, "Key");
      e.size = std::strtoull(Tag(item, "Size").c_str(), nullptr, 10);
      e.etag = Tag(item, "ETag");
      out.push_back(std::move(e));
    }
    if (Tag(r.body, "IsTruncated") != "true") break;
    token = Tag(r.body, "NextContinuationToken");
    if (token.empty()) {
      return Corruption("S3 LIST s3://" + bucket + "/" + prefix + ": truncated page without a continuation token");
    }
  }
  return out;
}

Status S3Client::Put(const S3Location& loc, std::span<const std::byte> bytes) const {
  if (bytes.size() > options_.multipart_threshold) return PutMultipart(loc, bytes);
  Call c;
  c.method = "PUT";
  c.loc = loc;
  c.body = bytes;
  return Send(c).status();
}

Status S3Client::PutMultipart(const S3Location& loc, std::span<const std::byte> bytes) const {
  // S3's limits: parts of at least 5 MiB (but the last), at most 10,000.
  std::uint64_t part = std::max<std::uint64_t>(options_.part_size, 5ull << 20);
  while ((bytes.size() + part - 1) / part > 10'000) part *= 2;
  const std::size_t parts = static_cast<std::size_t>((bytes.size() + part - 1) / part);
  return Multipart(
      loc, parts,
      [&](std::size_t i, Call& c) {
        c.body = bytes.subspan(i * part, std::min<std::uint64_t>(part, bytes.size() - i * part));
      },
      /*etag_in_body=*/false);
}

Status S3Client::Copy(const S3Location& from, const S3Location& to, std::uint64_t size) const {
  const std::string source = "/" + from.bucket + "/" + UriEncode(from.key, true);
  std::uint64_t part = std::max<std::uint64_t>(options_.copy_part_size, 5ull << 20);
  if (size <= part) {
    Call c;
    c.method = "PUT";
    c.loc = to;
    c.headers = {{"x-amz-copy-source", source}};
    c.what = "(copy of " + from.Url() + ")";
    TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
    if (r.body.find("<Error>") != std::string::npos) {
      return IOError("S3 PUT " + to.Url() + " " + c.what + ": " + Tag(r.body, "Code") + ": " + Tag(r.body, "Message"),
                     0);
    }
    return Status::OK();
  }
  while ((size + part - 1) / part > 10'000) part *= 2;
  const std::size_t parts = static_cast<std::size_t>((size + part - 1) / part);
  return Multipart(
      to, parts,
      [&](std::size_t i, Call& c) {
        const std::uint64_t first = i * part, last = std::min(size, first + part) - 1;
        c.headers = {{"x-amz-copy-source", source},
                     {"x-amz-copy-source-range", "bytes=" + std::to_string(first) + "-" + std::to_string(last)}};
      },
      /*etag_in_body=*/true);
}

Status S3Client::Multipart(const S3Location& loc, std::size_t parts,
                           const std::function<void(std::size_t, Call&)>& fill, bool etag_in_body) const {
  Call start;
  start.method = "POST";
  start.loc = loc;
  start.query = {{"uploads", ""}};
  start.what = "(start multipart upload)";
  TS_ASSIGN_OR_RETURN(CurlResponse sr, Send(start));
  const std::string upload_id = Tag(sr.body, "UploadId");
  if (upload_id.empty()) return Corruption("S3 POST " + loc.Url() + ": no UploadId in the response");

  std::vector<std::string> etags(parts);
  Status s =
      ForEachItemOrError(parts, static_cast<unsigned>(std::max(1, options_.parallelism)), [&](std::size_t i) -> Status {
        Call c;
        c.method = "PUT";
        c.loc = loc;
        c.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
        c.what = "part " + std::to_string(i + 1) + " of " + std::to_string(parts);
        fill(i, c);
        TS_ASSIGN_OR_RETURN(CurlResponse r, Send(c));
        etags[i] = etag_in_body ? Tag(r.body, "ETag") : r.Header("etag");
        if (etags[i].empty()) return Corruption("S3 PUT " + loc.Url() + " " + c.what + ": no ETag in the response");
        return Status::OK();
      });
  if (s.ok()) {
    std::string xml = "<CompleteMultipartUpload>";
    for (std::size_t i = 0; i < parts; ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    Call done;
    done.method = "POST";
    done.loc = loc;
    done.query = {{"uploadId", upload_id}};
    done.body = std::as_bytes(std::span<const char>(xml.data(), xml.size()));
    done.what = "(complete multipart upload of " + std::to_string(parts) + " parts)";
    Result<CurlResponse> r = Send(done);
    s = r.status();
    // Like a copy, a completion can fail with a 200 whose body is an <Error>.
    if (s.ok() && r->body.find("<Error>") != std::string::npos) {
      s = IOError(
          "S3 POST " + loc.Url() + " " + done.what + ": " + Tag(r->body, "Code") + ": " + Tag(r->body, "Message"), 0);
    }
  }
  if (!s.ok()) {
    // Abort so the parts do not linger (and cost) on the server.
    Call abort;
    abort.method = "DELETE";
    abort.loc = loc;
    abort.query = {{"uploadId", upload_id}};
    (void)Send(abort);
  }
  return s;
}

Status S3Client::Delete(const S3Location& loc) const {
  Call c;
  c.method = "DELETE";
  c.loc = loc;
  return Send(c).status();
}

Status S3Client::CreateBucket(const std::string& bucket) const {
  Call c;
  c.method = "PUT";
  c.loc = {bucket, ""};
  return Send(c).status();
}

}  // namespace tensorsafe::internal::s3
