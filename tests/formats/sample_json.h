// Samples of a ShardSource as JSON in the format of tests/golden/{mds,wds}/
// expected.jsonl (written by the real packages' readers), for comparison.
#pragma once

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorsafe/dataset/sample.h"

namespace tensorsafe::testing {

inline std::string HexOf(std::span<const std::byte> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s.push_back(d[static_cast<unsigned>(x) >> 4]);
    s.push_back(d[static_cast<unsigned>(x) & 15]);
  }
  return s;
}

// One sample's fields; `json` values are parsed, so they compare as values.
inline nlohmann::json SampleJson(const std::vector<dataset::FieldView>& views) {
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& v : views) {
    nlohmann::json j = {{"kind", std::string(dataset::FieldKindName(v.spec->kind))}};
    std::string text(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
    switch (v.spec->kind) {
      case dataset::FieldKind::kTensor:
        j["dtype"] = std::string(DTypeName(v.spec->dtype));
        j["shape"] = v.shape;
        j["hex"] = HexOf(v.bytes);
        break;
      case dataset::FieldKind::kStr: j["text"] = text; break;
      case dataset::FieldKind::kJson: j["json"] = nlohmann::json::parse(text); break;
      case dataset::FieldKind::kInt:
      case dataset::FieldKind::kFloat: {
        std::int64_t n = 0;
        if (v.bytes.size() == 8) std::memcpy(&n, v.bytes.data(), 8);
        j["value"] = n;
        break;
      }
      case dataset::FieldKind::kBytes: j["hex"] = HexOf(v.bytes); break;
    }
    fields[v.spec->name] = j;
  }
  return fields;
}

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace tensorsafe::testing
