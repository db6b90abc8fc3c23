#include "metadata_view.h"

#include <fmt/core.h>

#include <algorithm>

namespace tensorsafe::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kTypesKey = "tensorsafe.gguf_types";
constexpr std::size_t kMaxStringBytes = 160;

std::string TypeName(const Json& desc) {
  if (desc.is_string()) return desc.get<std::string>();
  return "array";  // ["array", d0, d1, ...]: an array of arrays of mixed types
}

Json Summarise(const Json& v, const std::string& type) {
  if (!v.is_array()) return v;
  if (v.size() <= kSummaryItems) {
    Json out = Json::array();
    for (const Json& x : v) out.push_back(Summarise(x, "array"));
    return out;
  }
  Json first = Json::array();
  for (std::size_t i = 0; i < kSummaryItems; ++i) first.push_back(Summarise(v[i], "array"));
  return Json{{"summary", type}, {"length", v.size()}, {"first", std::move(first)}};
}

// A value's one-line text: JSON, with long arrays and strings shortened.
std::string ValueText(const Json& v, bool full) {
  if (full) return v.dump();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.size() <= kMaxStringBytes) return v.dump();
    std::size_t cut = kMaxStringBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
    return Json(s.substr(0, cut)).dump() + fmt::format("... ({} bytes)", s.size());
  }
  if (!v.is_array()) return v.dump();
  std::string out = v.size() > kSummaryItems ? fmt::format("[{} items] ", v.size()) : "[";
  const std::size_t n = std::min(v.size(), kSummaryItems);
  for (std::size_t i = 0; i < n; ++i) out += (i ? ", " : "") + ValueText(v[i], false);
  return out + (v.size() > kSummaryItems ? ", ..." : "]");
}

}  // namespace

Json SummariseMetadata(const Json& md) {
  if (!md.is_object()) return md;
  const Json types =
      md.contains(kTypesKey) && md[std::string(kTypesKey)].is_object() ? md[std::string(kTypesKey)] : Json::object();
  Json out = Json::object();
  for (auto it = md.begin(); it != md.end(); ++it) {
    if (it.key() == kTypesKey && it->is_object()) {
      Json t = Json::object();
      for (auto d = it->begin(); d != it->end(); ++d) t[d.key()] = Summarise(*d, "array");
      out[it.key()] = std::move(t);
      continue;
    }
    out[it.key()] = Summarise(*it, types.contains(it.key()) ? TypeName(types[it.key()]) : "array");
  }
  return out;
}

std::string FormatGgufKeyValues(const Json& md, bool full) {
  if (!md.is_object()) return {};
  const std::string types_key(kTypesKey);
  const Json types = md.contains(types_key) && md[types_key].is_object() ? md[types_key] : Json::object();
  std::size_t kw = 3, tw = 4;
  for (auto it = md.begin(); it != md.end(); ++it) {
    if (it.key() == types_key) continue;
    kw = std::max(kw, it.key().size());
    if (types.contains(it.key())) tw = std::max(tw, TypeName(types[it.key()]).size());
  }
  std::string out;
  for (auto it = md.begin(); it != md.end(); ++it) {
    if (it.key() == types_key) continue;
    const std::string type = types.contains(it.key()) ? TypeName(types[it.key()]) : "-";
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", it.key(), kw, type, tw, ValueText(*it, full));
  }
  return out;
}

}  // namespace tensorsafe::cli
