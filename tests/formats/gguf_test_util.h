// Helpers of the GGUF tests: the golden manifest and a type-aware comparison
// of metadata JSON (docs/formats/gguf.md §Metadata).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "support/hex.h"
#include "support/temp_dir.h"

namespace tensorsafe::testing {

using Json = nlohmann::ordered_json;

inline std::string GoldenDir() { return std::string(TS_SOURCE_DIR) + "/tests/golden/gguf/"; }

inline Json Manifest() { return Json::parse(ReadFileBytes(GoldenDir() + "expected.json")); }

// Compares an actual value `a` with the expected `e` under type descriptor
// `d`: float32 values compare as floats (the JSON texts may differ: shortest
// float vs exact double), float64 bit for bit, the rest as JSON.
inline ::testing::AssertionResult SameValue(const Json& d, const Json& e, const Json& a, const std::string& where) {
  auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure() << where << ": " << why << " (type " << d.dump() << ", expected " << e.dump()
                                         << ", got " << a.dump() << ")";
  };
  if (d.is_array()) {
    if (!a.is_array() || a.size() != e.size() || d.size() != e.size() + 1) return fail("shape");
    for (std::size_t i = 0; i < e.size(); ++i) {
      auto r = SameValue(d[i + 1], e[i], a[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  const std::string t = d.get<std::string>();
  if (t.starts_with("array<")) {
    if (!a.is_array() || a.size() != e.size()) return fail("array size");
    const Json elem = t.substr(6, t.size() - 7);
    for (std::size_t i = 0; i < e.size(); ++i) {
      auto r = SameValue(elem, e[i], a[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  if ((t == "float32" || t == "float64") && e.is_number()) {
    if (!a.is_number_float()) return fail("not a JSON float");
    const double x = e.get<double>(), y = a.get<double>();
    const bool same = t == "float32" ? std::bit_cast<std::uint32_t>(static_cast<float>(x)) ==
                                           std::bit_cast<std::uint32_t>(static_cast<float>(y))
                                     : std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
    return same ? ::testing::AssertionSuccess() : fail("different float");
  }
  return e == a ? ::testing::AssertionSuccess() : fail("different value");
}

// `expected` is "" (no metadata) or an object in the documented mapping;
// `actual` is the decoder's JSON text. Key order matters: it is file order.
inline ::testing::AssertionResult SameMetadata(const Json& expected, const std::string& actual) {
  if (expected.is_string()) {
    if (actual == expected.get<std::string>()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "expected \"" << expected.get<std::string>() << "\", got " << actual;
  }
  Json a;
  try {
    a = Json::parse(actual);
  } catch (const std::exception& ex) {
    return ::testing::AssertionFailure() << "not JSON: " << ex.what() << ": " << actual;
  }
  std::vector<std::string> ke, ka;
  for (const auto& [k, _] : expected.items()) ke.push_back(k);
  for (const auto& [k, _] : a.items()) ka.push_back(k);
  if (ke != ka) return ::testing::AssertionFailure() << "keys differ: " << a.dump();
  const Json& types = expected.contains("tensorsafe.gguf_types") ? expected["tensorsafe.gguf_types"] : Json::object();
  if (expected.contains("tensorsafe.gguf_types") && types != a["tensorsafe.gguf_types"]) {
    return ::testing::AssertionFailure() << "types differ: " << a["tensorsafe.gguf_types"].dump();
  }
  for (const auto& [k, v] : expected.items()) {
    if (k == "tensorsafe.gguf_types") continue;
    const Json d = types.contains(k) ? types[k] : Json("json");
    auto r = SameValue(d, v, a[k], k);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tensorsafe::testing
