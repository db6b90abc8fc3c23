#include "util/text.h"

#include <simdjson.h>

#include <cstring>

#include <nlohmann/json.hpp>

namespace tensorsafe::internal {

bool IsValidUtf8(std::string_view s) { return simdjson::validate_utf8(s.data(), s.size()); }

bool IsAscii(std::string_view s) {
  std::uint64_t high = 0;
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    high |= w;
  }
  for (; i < s.size(); ++i) high |= static_cast<unsigned char>(s[i]);
  return (high & 0x8080808080808080u) == 0;
}

namespace {

// Validates without building a document; aborts as soon as the nesting limit
// is passed, so a hostile text costs no memory beyond the parser's own.
class Validator : public nlohmann::json::json_sax_t {
 public:
  explicit Validator(std::uint32_t max_depth) : max_depth_(max_depth) {}
  bool null() override { return Top(); }
  bool boolean(bool) override { return Top(); }
  bool number_integer(number_integer_t) override { return Top(); }
  bool number_unsigned(number_unsigned_t) override { return Top(); }
  bool number_float(number_float_t, const string_t&) override { return Top(); }
  bool string(string_t&) override { return Top(); }
  bool binary(binary_t&) override { return Top(); }
  bool start_object(std::size_t) override { return Open(true); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::json::exception& e) override {
    error_ = e.what();
    return false;
  }

  bool too_deep = false;
  bool not_object = false;
  const std::string& error() const { return error_; }

 private:
  // A scalar at the top level is not an object.
  bool Top() {
    if (depth_ == 0) {
      not_object = true;
      return false;
    }
    return true;
  }
  bool Open(bool object) {
    if (depth_ == 0 && !object) {
      not_object = true;
      return false;
    }
    if (++depth_ > max_depth_) {
      too_deep = true;
      return false;
    }
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }

  std::uint32_t max_depth_;
  std::uint32_t depth_ = 0;
  std::string error_;
};

}  // namespace

Status ValidateJsonObject(std::string_view json, std::uint32_t max_depth) {
  Validator v(max_depth);
  const bool ok =
      nlohmann::json::sax_parse(json.begin(), json.end(), &v, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (v.too_deep) return LimitExceeded("JSON nested deeper than " + std::to_string(max_depth));
  if (v.not_object) return InvalidArgument("JSON metadata must be an object");
  if (!ok) return InvalidArgument("invalid JSON: " + v.error());
  return Status::OK();
}

namespace {

class WideIntegerFinder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t& text) override {
    if (text.find_first_of(".eE") != std::string::npos) return true;
    found = WideInteger{key_, text};
    return false;  // the first is enough
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = k;
    return true;
  }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override { return false; }

  std::optional<WideInteger> found;

 private:
  int depth_ = 0;
  std::string key_;
};

}  // namespace

std::optional<WideInteger> FindWideInteger(std::string_view json) {
  WideIntegerFinder f;
  (void)nlohmann::json::sax_parse(json.begin(), json.end(), &f, nlohmann::json::input_format_t::json,
                                  /*strict=*/true);
  return f.found;
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
