// AWS Signature Version 4 for S3 requests, header form. The steps and names
// follow the AWS "Signature Version 4 signing process" document (canonical
// request, string to sign, derived signing key); tests/remote/sigv4_test.cc
// checks them against the worked examples AWS publishes for S3.
//
// Thread safety: free functions over values; safe from any thread.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensorsafe::internal::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
};

// Lower-case hex SHA-256 of `bytes`.
std::string Sha256Hex(std::span<const std::byte> bytes);
std::string Sha256Hex(std::string_view text);
// SHA-256 of the empty string: the payload hash of GET, HEAD and DELETE.
inline constexpr std::string_view kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// RFC 3986 percent-encoding as SigV4 wants it: unreserved bytes
// [A-Za-z0-9-._~] kept, everything else %XX (upper case); '/' kept when
// `keep_slash` (object keys in paths), encoded otherwise (query values).
std::string UriEncode(std::string_view s, bool keep_slash);

// "YYYYMMDDTHHMMSSZ" (UTC) for x-amz-date.
std::string AmzDate(std::chrono::system_clock::time_point t);

struct SigningInput {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the path as sent, already UriEncode()d
  // Query parameters, not encoded; sorted and encoded by the signer.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign (host and every x-amz-* the request sends). Names in any
  // case; values are trimmed and inner runs of spaces folded.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
  std::string amz_date;      // "YYYYMMDDTHHMMSSZ"
  std::string region;        // "us-east-1"
  std::string service = "s3";
};

struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;       // hex HMAC
  std::string authorization;   // the Authorization header's value
};

Signature SignV4(const SigningInput& in, const Credentials& creds);

// Hex of the derived key HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region),
// service), "aws4_request"); exposed for the published key-derivation example.
std::string SigningKeyHex(std::string_view secret, std::string_view date, std::string_view region,
                          std::string_view service);

// The query string in SigV4's canonical form (sorted by encoded name, then
// value; '=' always present): also what the client sends, so both agree.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

}  // namespace tensorsafe::internal::s3
