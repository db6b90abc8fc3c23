// Base URLs and relative names for the shard cache (docs/REMOTE.md, "URL
// safety").
#pragma once

#include <string>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

struct BaseUrl {
  std::string scheme;     // "http" or "https"
  std::string authority;  // lower-case host, optional ":port"
  std::string path;       // starts and ends with '/'
  std::string full;       // scheme + "://" + authority + path
};

// Parses a user-given base URL; kInvalidArgument naming it and the reason.
Result<BaseUrl> ParseBaseUrl(std::string_view url);

// base.full + name after ValidateRelativeName, then re-parsed with libcurl's
// URL parser to confirm scheme, host, port and path prefix did not change
// (a second, independent check of the same property).
Result<std::string> JoinUrl(const BaseUrl& base, std::string_view name);

}  // namespace tensorsafe::internal
