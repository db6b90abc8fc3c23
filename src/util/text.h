// Checks on untrusted text: UTF-8 validity and JSON metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

bool IsValidUtf8(std::string_view s);
// Checks that `json` is a JSON object nested at most `max_depth` deep. The
// message says what is wrong; the caller adds the context.
Status ValidateJsonObject(std::string_view json, std::uint32_t max_depth);
// Quotes a name for messages: "w", with control bytes and invalid UTF-8
// escaped and long names shortened.
std::string QuoteName(std::string_view name);

}  // namespace tensorsafe::internal
