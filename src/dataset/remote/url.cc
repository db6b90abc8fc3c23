#include "dataset/remote/url.h"

#include <curl/curl.h>

#include <memory>

#include "remote/remote_file.h"
#include "tensorsafe/dataset/remote.h"

namespace tensorsafe {
namespace {

constexpr std::size_t kMaxNameBytes = 1024;

bool NameByteAllowed(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '.':
    case '_':
    case '~':
    case '+':
    case '=':
    case ',':
    case '@':
    case '-':
    case '/': return true;
    default: return false;
  }
}

// Printable form of an untrusted name for messages (no raw control bytes).
std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

namespace dataset {

Status ValidateRelativeName(std::string_view name) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("remote file name \"" + Printable(name) + "\": " + why);
  };
  if (name.empty()) return bad("empty");
  if (name.size() > kMaxNameBytes) {
    return bad(std::to_string(name.size()) + " bytes, more than the limit of " + std::to_string(kMaxNameBytes));
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (NameByteAllowed(c)) continue;
    const std::string at = " at byte " + std::to_string(i);
    if (c == 0) return bad("NUL byte" + at);
    if (c == '%') return bad("percent-encoding is not allowed" + at + " (it could hide \"..\" or '/')");
    if (c == '\\') return bad("backslash" + at);
    if (c == ':') return bad("':'" + at + " (absolute URLs and schemes are not allowed)");
    if (c == '?' || c == '#') return bad("query or fragment" + at);
    if (c < 0x20 || c == 0x7f) return bad("control byte" + at);
    static const char* hex = "0123456789abcdef";
    return bad(std::string("byte 0x") + hex[c >> 4] + hex[c & 15] + at + " is outside [A-Za-z0-9._~+=,@-/]");
  }
  if (name.front() == '/') return bad("absolute path (names are relative to the base URL)");
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view seg = name.substr(start, end - start);
    if (seg.empty()) return bad("empty path segment at byte " + std::to_string(start));
    if (seg == "." || seg == "..") return bad("\"" + std::string(seg) + "\" segment at byte " + std::to_string(start));
    start = end + 1;
  }
  return Status::OK();
}

bool IsRemoteUrl(std::string_view location) {
  auto starts = [&](std::string_view p) {
    if (location.size() < p.size()) return false;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (Lower(location[i]) != p[i]) return false;
    }
    return true;
  };
  return starts("http://") || starts("https://") || starts("s3://") ||
         tensorsafe::internal::HandlerFor(location) != nullptr;
}

}  // namespace dataset

namespace internal {

Result<BaseUrl> ParseBaseUrl(std::string_view url) {
  auto bad = [&](const std::string& why) { return InvalidArgument("base URL \"" + Printable(url) + "\": " + why); };
  BaseUrl b;
  std::string_view rest;
  if (dataset::IsRemoteUrl(url)) {
    const std::size_t colon = url.find(':');
    for (char c : url.substr(0, colon)) b.scheme += Lower(c);
    rest = url.substr(colon + 3);
  } else {
    return bad("only http://, https://, s3:// and, with a URL handler (fsspec), other schemes are supported");
  }
  // Host names are case-insensitive; other schemes' first part (a bucket,
  // a container, a directory of fsspec's memory://) may not be.
  const bool host = b.scheme == "http" || b.scheme == "https" || b.scheme == "s3";
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
  if (authority.empty()) return bad("no host");
  for (char c : authority) {
    const auto u = static_cast<unsigned char>(c);
    const bool ok = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || c == '.' ||
                    c == '-' || c == ':' || c == '[' || c == ']' || (!host && c == '_');
    if (c == '@') return bad("credentials in the URL are not supported");
    if (!ok) return bad("invalid character in host \"" + Printable(authority) + "\"");
    b.authority += host ? Lower(c) : c;
  }
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '?' || c == '#') return bad("a query or fragment is not allowed");
    if (c == '\\' || u <= 0x20 || u >= 0x7f) return bad("invalid character in path");
  }
  std::size_t start = 1;
  while (start < path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    if (seg == "." || seg == "..") return bad("\".\" and \"..\" segments are not allowed");
    start = end + 1;
  }
  b.path = std::string(path);
  if (b.path.back() != '/') b.path += '/';
  b.full = b.scheme + "://" + b.authority + b.path;

  // Let libcurl parse it too, so the host we check against later is the one
  // libcurl will connect to.
  std::unique_ptr<CURLU, void (*)(CURLU*)> u(curl_url(), curl_url_cleanup);
  if (!u || curl_url_set(u.get(), CURLUPART_URL, b.full.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
    return bad("libcurl cannot parse it");
  }
  return b;
}

Result<std::string> JoinUrl(const BaseUrl& base, std::string_view name) {
  TS_RETURN_IF_ERROR(dataset::ValidateRelativeName(name));
  std::string url = base.full + std::string(name);
  auto part = [](CURLU* h, CURLUPart p) {
    char* out = nullptr;
    std::string s;
    if (curl_url_get(h, p, &out, 0) == CURLUE_OK && out != nullptr) s = out;
    curl_free(out);
    return s;
  };
  std::unique_ptr<CURLU, void (*)(CURLU*)> a(curl_url(), curl_url_cleanup), j(curl_url(), curl_url_cleanup);
  if (!a || !j || curl_url_set(a.get(), CURLUPART_URL, base.full.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
      curl_url_set(j.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
    return InvalidArgument("remote file name \"" + Printable(name) + "\": libcurl cannot parse " + url);
  }
  const std::string base_path = part(a.get(), CURLUPART_PATH);
  if (part(a.get(), CURLUPART_SCHEME) != part(j.get(), CURLUPART_SCHEME) ||
      part(a.get(), CURLUPART_HOST) != part(j.get(), CURLUPART_HOST) ||
      part(a.get(), CURLUPART_PORT) != part(j.get(), CURLUPART_PORT) ||
      part(j.get(), CURLUPART_PATH).rfind(base_path, 0) != 0) {
    return InvalidArgument("remote file name \"" + Printable(name) + "\": " + url + " leaves the base URL " +
                           base.full);
  }
  return url;
}

}  // namespace internal
}  // namespace tensorsafe
