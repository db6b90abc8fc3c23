#include "remote/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>

namespace tensorsafe::internal::s3 {
namespace {

std::string Hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Trims and folds runs of spaces (SigV4 "Trimall").
std::string TrimAll(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  const std::string k_date = Hmac("AWS4" + std::string(secret), date);
  const std::string k_region = Hmac(k_date, region);
  const std::string k_service = Hmac(k_region, service);
  return Hmac(k_service, "aws4_request");
}

}  // namespace

std::string Sha256Hex(std::span<const std::byte> bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

std::string Sha256Hex(std::string_view text) {
  return Sha256Hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool unreserved = (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += c;
    } else {
      out += '%';
      out += kDigits[u >> 4];
      out += kDigits[u & 15];
    }
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

Signature SignV4(const SigningInput& in, const Credentials& creds) {
  Signature sig;
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(in.headers.size());
  for (const auto& [k, v] : in.headers) headers.emplace_back(Lower(k), TrimAll(v));
  std::sort(headers.begin(), headers.end());

  std::string canonical_headers;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + v + "\n";
    if (!sig.signed_headers.empty()) sig.signed_headers += ';';
    sig.signed_headers += k;
  }
  sig.canonical_request = in.method + "\n" + in.canonical_uri + "\n" + CanonicalQuery(in.query) + "\n" +
                          canonical_headers + "\n" + sig.signed_headers + "\n" + in.payload_hash;

  const std::string date = in.amz_date.substr(0, 8);
  const std::string scope = date + "/" + in.region + "/" + in.service + "/aws4_request";
  sig.string_to_sign = "AWS4-HMAC-SHA256\n" + in.amz_date + "\n" + scope + "\n" + Sha256Hex(sig.canonical_request);
  const std::string key = SigningKey(creds.secret_access_key, date, in.region, in.service);
  const std::string mac = Hmac(key, sig.string_to_sign);
  sig.signature = Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key_id + "/" + scope +
                      ", SignedHeaders=" + sig.signed_headers + ", Signature=" + sig.signature;
  return sig;
}

std::string SigningKeyHex(std::string_view secret, std::string_view date, std::string_view region,
                          std::string_view service) {
  const std::string k = SigningKey(secret, date, region, service);
  return Hex(reinterpret_cast<const unsigned char*>(k.data()), k.size());
}

}  // namespace tensorsafe::internal::s3
