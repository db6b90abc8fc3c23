// Checks on untrusted text: UTF-8 validity and JSON metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

// A count, size or offset in decimal, for messages (one overload, so that
// callers need no cast from size_t, uint32_t or int).
inline std::string Str(std::uint64_t v) { return std::to_string(v); }

bool IsValidUtf8(std::string_view s);
// Whether every byte is below 0x80 (tested 8 bytes at a time: most names
// are ASCII, and this lets them skip the UTF-8 validator).
bool IsAscii(std::string_view s);
// Checks that `json` is a JSON object nested at most `max_depth` deep. The
// message says what is wrong; the caller adds the context.
Status ValidateJsonObject(std::string_view json, std::uint32_t max_depth);
// The first integer literal in the JSON text `json` too wide for int64 and
// uint64 (nlohmann reads it as a double, so a writer that re-encodes it
// would narrow it silently), with the top-level key it sits under; nullopt
// when there is none or `json` is not valid JSON.
struct WideInteger {
  std::string key;
  std::string text;
};
std::optional<WideInteger> FindWideInteger(std::string_view json);
// Quotes a name for messages: "w", with control bytes and invalid UTF-8
// escaped and long names shortened.
std::string QuoteName(std::string_view name);

}  // namespace tensorsafe::internal
