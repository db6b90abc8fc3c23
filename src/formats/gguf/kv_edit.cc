// Typed key/value edits (gguf_kv.h): KEY=TYPE:VALUE parsing and applying
// sets and deletions to the metadata JSON of docs/formats/gguf.md §4.
#include <charconv>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/gguf/internal.h"
#include "tensorsafe/formats/gguf_kv.h"
#include "util/text.h"

namespace tensorsafe::gguf {
namespace {

using Json = nlohmann::ordered_json;
using tensorsafe::internal::QuoteName;

constexpr std::string_view kShort[][2] = {
    {"u8", "uint8"},   {"i8", "int8"},   {"u16", "uint16"},  {"i16", "int16"},   {"u32", "uint32"}, {"i32", "int32"},
    {"u64", "uint64"}, {"i64", "int64"}, {"f32", "float32"}, {"f64", "float64"}, {"str", "string"},
};

// The spec name of a scalar type name or short form; "" when unknown.
std::string ScalarType(std::string_view name) {
  for (const auto& [s, l] : kShort) {
    if (name == s || name == l) return std::string(l);
  }
  if (name == "bool") return "bool";
  return {};
}

Status Bad(std::string_view arg, const std::string& why) { return InvalidArgument(QuoteName(arg) + ": " + why); }

// A scalar VALUE as the JSON value of its type.
Result<Json> ScalarValue(std::string_view arg, const std::string& type, std::string_view v) {
  if (type == "string") {
    if (!tensorsafe::internal::IsValidUtf8(v)) return Bad(arg, "the string is not valid UTF-8");
    return Json(std::string(v));
  }
  if (type == "bool") {
    if (v == "true" || v == "1") return Json(true);
    if (v == "false" || v == "0") return Json(false);
    return Bad(arg, "a bool is true, false, 1 or 0, not " + QuoteName(v));
  }
  if (type == "float32" || type == "float64") {
    if (v == "nan" || v == "inf" || v == "-inf") return Json(std::string(v));
    double d = 0;
    auto r = std::from_chars(v.data(), v.data() + v.size(), d);
    if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size()) {
      return Bad(arg, QuoteName(v) + " is not a number (nor nan, inf, -inf)");
    }
    return Json(d);
  }
  // Integers: exact, range-checked by the encoder later.
  if (!v.empty() && v[0] == '-') {
    std::int64_t i = 0;
    auto r = std::from_chars(v.data(), v.data() + v.size(), i);
    if (r.ec == std::errc() && r.ptr == v.data() + v.size()) return Json(i);
  } else {
    std::uint64_t u = 0;
    auto r = std::from_chars(v.data(), v.data() + v.size(), u);
    if (!v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size()) return Json(u);
  }
  return Bad(arg, QuoteName(v) + " is not a " + type + " (a decimal integer within 64 bits)");
}

// Checks that `value` encodes as `type` (ranges, element types).
Status CheckEncodes(std::string_view arg, const std::string& key, const std::string& type, const Json& value) {
  Json one = Json::object();
  one[key] = value;
  one[std::string(internal::kTypesKey)] = Json::object({{key, type}});
  auto enc = internal::EncodeKeyValues(one.dump(), WriteOptions{});
  if (!enc.ok()) return Bad(arg, enc.status().message());
  return Status::OK();
}

}  // namespace

Result<KeyValueEdit> ParseKeyValueEdit(std::string_view arg) {
  const auto eq = arg.find('=');
  if (eq == std::string_view::npos) return Bad(arg, "expected KEY=TYPE:VALUE");
  KeyValueEdit e;
  e.key = std::string(arg.substr(0, eq));
  if (e.key.empty()) return Bad(arg, "the key is empty");
  if (e.key == internal::kTypesKey) return Bad(arg, "the key is reserved for the GGUF types of the other keys");
  if (!tensorsafe::internal::IsValidUtf8(e.key)) return Bad(arg, "the key is not valid UTF-8");
  const std::string_view rest = arg.substr(eq + 1);
  const auto colon = rest.find(':');
  if (colon == std::string_view::npos) {
    return Bad(arg, "expected KEY=TYPE:VALUE (a type is needed: str, u32, f32, bool, str[], ...)");
  }
  const std::string_view type = rest.substr(0, colon);
  const std::string_view value = rest.substr(colon + 1);
  std::string elem;
  bool array = false;
  if (type.starts_with("array<") && type.ends_with(">")) {
    elem = ScalarType(type.substr(6, type.size() - 7));
    array = true;
  } else if (type.ends_with("[]")) {
    elem = ScalarType(type.substr(0, type.size() - 2));
    array = true;
  } else {
    elem = ScalarType(type);
  }
  if (elem.empty()) {
    return Bad(arg, "unknown type " + QuoteName(type) +
                        " (uint8..int64 or u8..i64, float32/f32, float64/f64, bool, string/str, array<T> or T[])");
  }
  Json v;
  if (array) {
    v = Json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!v.is_array()) return Bad(arg, "an array value is a JSON array, e.g. [1,2] or [\"a\",\"b\"]");
    e.type = "array<" + elem + ">";
  } else {
    TS_ASSIGN_OR_RETURN(v, ScalarValue(arg, elem, value));
    e.type = elem;
  }
  TS_RETURN_IF_ERROR(CheckEncodes(arg, e.key, e.type, v));
  e.value_json = v.dump();
  return e;
}

Result<std::string> EditKeyValues(std::string_view metadata_json, std::span<const KeyValueEdit> set,
                                  std::span<const std::string> del) {
  const std::string types_key(internal::kTypesKey);
  Json md = Json::object();
  if (!metadata_json.empty()) {
    md = Json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
    if (!md.is_object()) return InvalidArgument("the metadata is not a JSON object");
  }
  Json types = Json::object();
  if (auto it = md.find(types_key); it != md.end()) {
    types = it->is_string() ? Json::parse(it->get<std::string>(), nullptr, false) : *it;
    if (!types.is_object()) return InvalidArgument("\"" + types_key + "\" is not an object");
    md.erase(it);
  }
  for (const std::string& k : del) {
    if (k == types_key || !md.contains(k)) return NotFound("no key " + QuoteName(k));
    md.erase(k);
    types.erase(k);
  }
  for (const KeyValueEdit& e : set) {
    if (e.key == types_key) return InvalidArgument("the key " + QuoteName(e.key) + " is reserved");
    Json v = Json::parse(e.value_json, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) return InvalidArgument("key " + QuoteName(e.key) + ": the value is not JSON");
    md[e.key] = std::move(v);
    types[e.key] = e.type;
  }
  if (md.empty()) return std::string();
  if (!types.empty()) md[types_key] = std::move(types);
  std::string out = md.dump();
  TS_RETURN_IF_ERROR(internal::EncodeKeyValues(out, WriteOptions{}).status());
  return out;
}

}  // namespace tensorsafe::gguf

namespace tensorsafe::gguf::internal {

std::string DropRedundantTypes(const std::string& metadata_json) {
  if (metadata_json.find(kTypesKey) == std::string::npos) return metadata_json;
  Json md = Json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  const std::string types_key(kTypesKey);
  if (!md.is_object() || !md.contains(types_key)) return metadata_json;
  Json& slot = md[types_key];
  const bool text = slot.is_string();
  Json types = text ? Json::parse(slot.get<std::string>(), nullptr, false) : slot;
  if (!types.is_object()) return metadata_json;
  // A string is inferred as "string" by the writer: its type adds nothing.
  for (auto it = types.begin(); it != types.end();) {
    const auto v = md.find(it.key());
    if (*it == "string" && v != md.end() && v->is_string()) {
      it = types.erase(it);
    } else {
      ++it;
    }
  }
  if (types.empty()) {
    md.erase(types_key);
  } else {
    slot = text ? Json(types.dump()) : types;
  }
  return md.empty() ? std::string("{}") : md.dump();
}

}  // namespace tensorsafe::gguf::internal
