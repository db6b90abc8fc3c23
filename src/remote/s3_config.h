// Where an S3 client finds its credentials, region and endpoint: the same
// places, in the same order, as the AWS CLI and SDKs (docs/REMOTE.md,
// "Credentials"), and s3:// URLs.
//
// Thread safety: free functions; ResolveS3Config reads only what `env`
// returns and the files it names.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "remote/sigv4.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal::s3 {

struct S3Config {
  Credentials credentials;
  std::string region = "us-east-1";
  // "scheme://host[:port]" of an S3-compatible store; empty = AWS.
  std::string endpoint;
  // Path style (http://host/bucket/key) for custom endpoints; AWS gets
  // virtual-host style (https://bucket.s3.region.amazonaws.com/key) when the
  // bucket name allows it.
  bool path_style = false;
  std::string credentials_source;  // "environment", "profile default in /x/credentials"
};

// Looks up variables through `env` (std::getenv in production):
//   credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
//     else profile AWS_PROFILE (or "default") of AWS_SHARED_CREDENTIALS_FILE
//     (or ~/.aws/credentials), else of AWS_CONFIG_FILE (or ~/.aws/config,
//     sections "[profile NAME]" or "[default]");
//   region: AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in the
//     config file, else us-east-1;
//   endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//     `endpoint_url`, S3_ENDPOINT_URL (MosaicML streaming's name), else AWS.
// Errors: kNotFound when no credentials are found (naming every place
// looked), kInvalidArgument for a malformed endpoint or a profile that is
// named but absent.
using GetEnv = std::function<const char*(const char*)>;
Result<S3Config> ResolveS3Config(const GetEnv& env);
Result<S3Config> S3ConfigFromEnvironment();

struct S3Location {
  std::string bucket;
  std::string key;  // may be empty (a bucket, or a prefix "")
  std::string Url() const { return "s3://" + bucket + "/" + key; }
};

// Parses "s3://bucket/key". Bucket names follow S3's rules (3-63 bytes of
// [a-z0-9.-]); the key is any bytes but NUL and control characters.
// Errors: kInvalidArgument naming the URL and the reason.
Result<S3Location> ParseS3Url(std::string_view url);

// True for "s3://" (any case).
bool IsS3Url(std::string_view url);

}  // namespace tensorsafe::internal::s3
