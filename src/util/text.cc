#include "util/text.h"

#include <simdjson.h>

#include <nlohmann/json.hpp>

namespace tensorsafe::internal {

bool IsValidUtf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

Status ValidateJsonObject(std::string_view json, std::uint32_t max_depth) {
  bool too_deep = false;
  // The callback sees each value's depth; refusing early bounds the parser's
  // memory as well as the nesting.
  auto cb = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (static_cast<std::uint32_t>(depth) > max_depth) too_deep = true;
    return !too_deep;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json.begin(), json.end(), cb, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    if (too_deep) return LimitExceeded("JSON nested deeper than " + std::to_string(max_depth));
    return InvalidArgument(std::string("invalid JSON: ") + e.what());
  }
  if (too_deep) return LimitExceeded("JSON nested deeper than " + std::to_string(max_depth));
  if (!j.is_object()) return InvalidArgument("JSON metadata must be an object");
  return Status::OK();
}

std::string QuoteName(std::string_view name) {
  constexpr std::size_t kMax = 80;
  std::string out = "\"";
  const bool utf8 = IsValidUtf8(name);
  std::size_t n = 0;
  for (unsigned char c : name) {
    if (n++ == kMax) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f || (!utf8 && c >= 0x80)) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

}  // namespace tensorsafe::internal
