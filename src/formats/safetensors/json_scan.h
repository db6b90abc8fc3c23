// A JSON scanner on simdjson On-Demand, the generic half of the safetensors
// header reader (parse.cc holds the format's rules): JSON numbers classified
// as serde_json reads them, and JsonScanner, which walks values in full so
// that a header is accepted only if all of it is valid JSON.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::safetensors::internal {

enum class NumberClass {
  kNotJson,     // not a JSON number at all
  kUnsigned,    // an integer in [0, 2^64): what serde reads as usize
  kOther,       // negative, fractional, exponent or too big: serde's float
  kOutOfRange,  // a float whose magnitude overflows f64: serde rejects it
};

// Classifies the JSON number token `t`; kUnsigned also stores its value.
NumberClass ScanNumber(std::string_view t, std::uint64_t* out);

// "an array", "a number", ... for messages.
std::string_view TypeName(simdjson::ondemand::json_type t);
// `s` without trailing JSON whitespace (raw number tokens carry it).
std::string_view TrimRight(std::string_view s);

// Errors and the depth guard of a walk over one JSON text, and Skip, a full
// walk of a value.
class JsonScanner {
 protected:
  // `text` is the JSON, found at byte `offset` of the file (for messages);
  // nesting past `max_depth` is kLimitExceeded.
  JsonScanner(const char* text, std::size_t len, std::uint64_t offset, std::uint32_t max_depth)
      : text_(text), len_(len), offset_(offset), max_depth_(max_depth) {}

  // kCorruption "header is not valid JSON (near byte N of the file): ...".
  Status JsonError(simdjson::error_code e);
  Status CheckDepth(std::uint32_t depth);
  // Visits every part of `v`: nested values (depth-checked), every number
  // (kCorruption for one serde rejects), every string and literal.
  Status Skip(simdjson::ondemand::value& v, std::uint32_t parent_depth);

  const char* text_;
  std::size_t len_;
  std::uint64_t offset_;
  std::uint32_t max_depth_;
  simdjson::ondemand::document* doc_ = nullptr;  // set while a document is walked, for locations
};

}  // namespace tensorsafe::safetensors::internal
