// A JSON scanner on simdjson On-Demand for the safetensors header: number
// classes as serde reads them, and a full walk of values the schema does not
// name (On-Demand validates only what it visits).
#include "formats/safetensors/json_scan.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "util/checked_math.h"

namespace tensorsafe::safetensors::internal {
namespace {

namespace sj = simdjson::ondemand;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// True when the (valid) JSON number `t` has magnitude >= 1, from its digits
// and exponent, so an out-of-range parse can be told apart from an underflow
// (serde reads 1e-400 as 0 but rejects 1e400).
bool MagnitudeAtLeastOne(std::string_view t) {
  std::size_t i = (t[0] == '-') ? 1 : 0;
  std::int64_t power = 0;  // power of ten of the first non-zero digit
  bool found = false;
  std::int64_t int_digits = 0;
  std::size_t j = i;
  while (j < t.size() && IsDigit(t[j])) ++int_digits, ++j;
  for (std::size_t k = i; k < j; ++k) {
    if (t[k] != '0') {
      power = int_digits - 1 - static_cast<std::int64_t>(k - i);
      found = true;
      break;
    }
  }
  if (j < t.size() && t[j] == '.') {
    std::size_t k = j + 1;
    for (; k < t.size() && IsDigit(t[k]); ++k) {
      if (!found && t[k] != '0') {
        power = -static_cast<std::int64_t>(k - j);
        found = true;
      }
    }
    j = k;
  }
  if (!found) return false;  // zero
  std::int64_t exp = 0;
  if (j < t.size() && (t[j] == 'e' || t[j] == 'E')) {
    ++j;
    bool neg = false;
    if (t[j] == '+' || t[j] == '-') neg = t[j++] == '-';
    for (; j < t.size(); ++j) exp = std::min<std::int64_t>(exp * 10 + (t[j] - '0'), 1'000'000'000);
    if (neg) exp = -exp;
  }
  return power + exp >= 0;
}

}  // namespace

std::string_view TypeName(sj::json_type t) {
  switch (t) {
    case sj::json_type::array: return "an array";
    case sj::json_type::object: return "an object";
    case sj::json_type::number: return "a number";
    case sj::json_type::string: return "a string";
    case sj::json_type::boolean: return "a boolean";
    case sj::json_type::null: return "null";
  }
  return "a value";
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

NumberClass ScanNumber(std::string_view t, std::uint64_t* out) {
  std::size_t i = 0;
  const bool neg = !t.empty() && t[0] == '-';
  if (neg) ++i;
  const std::size_t int_begin = i;
  if (i >= t.size() || !IsDigit(t[i])) return NumberClass::kNotJson;
  if (t[i] == '0') {
    ++i;  // JSON forbids leading zeros
  } else {
    while (i < t.size() && IsDigit(t[i])) ++i;
  }
  const std::size_t int_end = i;
  bool real = false;
  if (i < t.size() && t[i] == '.') {
    const std::size_t s = ++i;
    while (i < t.size() && IsDigit(t[i])) ++i;
    if (i == s) return NumberClass::kNotJson;
    real = true;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    const std::size_t s = i;
    while (i < t.size() && IsDigit(t[i])) ++i;
    if (i == s) return NumberClass::kNotJson;
    real = true;
  }
  if (i != t.size()) return NumberClass::kNotJson;
  if (!neg && !real) {
    std::uint64_t v = 0;
    bool overflow = false;
    for (std::size_t k = int_begin; k < int_end && !overflow; ++k) {
      auto m = tensorsafe::internal::CheckedMul(v, 10);
      auto a = m ? tensorsafe::internal::CheckedAdd(*m, static_cast<std::uint64_t>(t[k] - '0')) : std::nullopt;
      if (a)
        v = *a;
      else
        overflow = true;
    }
    if (!overflow) {
      *out = v;
      return NumberClass::kUnsigned;
    }
  }
  double d;
  auto r = std::from_chars(t.data(), t.data() + t.size(), d);
  if (r.ec == std::errc::result_out_of_range && MagnitudeAtLeastOne(t)) {
    return NumberClass::kOutOfRange;
  }
  return NumberClass::kOther;
}

Status JsonScanner::JsonError(simdjson::error_code e) {
  std::string m = "header is not valid JSON";
  const char* loc = nullptr;
  if (doc_ != nullptr && !doc_->current_location().get(loc) && loc >= text_ && loc <= text_ + len_) {
    m += " (near byte " + std::to_string(offset_ + static_cast<std::uint64_t>(loc - text_)) + " of the file)";
  }
  m += ": ";
  m += simdjson::error_message(e);
  return Corruption(std::move(m));
}

Status JsonScanner::CheckDepth(std::uint32_t depth) {
  if (depth <= max_depth_) return Status::OK();
  return LimitExceeded("header JSON is nested deeper than " + std::to_string(max_depth_) + " levels");
}

Status JsonScanner::Skip(sj::value& v, std::uint32_t parent_depth) {
  sj::json_type t;
  if (auto e = v.type().get(t)) return JsonError(e);
  switch (t) {
    case sj::json_type::array: {
      TS_RETURN_IF_ERROR(CheckDepth(parent_depth + 1));
      sj::array arr;
      if (auto e = v.get_array().get(arr)) return JsonError(e);
      for (auto element_result : arr) {
        sj::value el;
        if (auto e = std::move(element_result).get(el)) return JsonError(e);
        TS_RETURN_IF_ERROR(Skip(el, parent_depth + 1));
      }
      return Status::OK();
    }
    case sj::json_type::object: {
      TS_RETURN_IF_ERROR(CheckDepth(parent_depth + 1));
      sj::object obj;
      if (auto e = v.get_object().get(obj)) return JsonError(e);
      for (auto field_result : obj) {
        sj::field field;
        if (auto e = std::move(field_result).get(field)) return JsonError(e);
        std::string_view key;
        if (auto e = field.unescaped_key().get(key)) return JsonError(e);
        TS_RETURN_IF_ERROR(Skip(field.value(), parent_depth + 1));
      }
      return Status::OK();
    }
    case sj::json_type::number: {
      const std::string_view tok = TrimRight(v.raw_json_token());
      std::uint64_t u;
      switch (ScanNumber(tok, &u)) {
        case NumberClass::kNotJson: return Corruption("header is not valid JSON: bad number " + std::string(tok));
        case NumberClass::kOutOfRange:
          return Corruption("header holds the number " + std::string(tok) + ", out of range of f64");
        default: return Status::OK();
      }
    }
    case sj::json_type::string: {
      std::string_view s;
      if (auto e = v.get_string().get(s)) return JsonError(e);
      return Status::OK();
    }
    case sj::json_type::boolean: {
      bool b;
      if (auto e = v.get_bool().get(b)) return JsonError(e);
      return Status::OK();
    }
    case sj::json_type::null: {
      bool is_null = false;
      if (auto e = v.is_null().get(is_null); e || !is_null) return JsonError(e ? e : simdjson::N_ATOM_ERROR);
      return Status::OK();
    }
  }
  return JsonError(simdjson::INCORRECT_TYPE);
}

}  // namespace tensorsafe::safetensors::internal
