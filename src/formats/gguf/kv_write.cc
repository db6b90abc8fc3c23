// Metadata JSON -> GGUF key/value section (docs/formats/gguf.md §Metadata).
// The inverse of kv_read.cc: values with the type from
// "tensorsafe.gguf_types", or an inferred type when the key has none.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/gguf/internal.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::gguf::internal {
namespace {

using Json = nlohmann::ordered_json;  // keeps the key order: it is the file order
using tensorsafe::internal::Put16;
using tensorsafe::internal::Put32;
using tensorsafe::internal::Put64;
using tensorsafe::internal::Put8;

class KvWriter {
 public:
  explicit KvWriter(std::string& out) : out_(out) {}

  // The key that messages name from now on.
  void SetKey(const std::string& key) { ctx_ = "key \"" + key + "\""; }

  // Writes the value type code and the value of `key`.
  Status KeyValue(const std::string& key, const Json& desc, const Json& v) {
    SetKey(key);
    TS_ASSIGN_OR_RETURN(ValueType t, TypeOf(desc));
    Put32(out_, static_cast<std::uint32_t>(t));
    return Payload(desc, t, v);
  }

  // The inferred descriptor of a value that has no type given.
  Result<Json> Infer(const Json& v) const {
    switch (v.type()) {
      case Json::value_t::string: return Json("string");
      case Json::value_t::boolean: return Json("bool");
      case Json::value_t::number_float: return Json("float64");
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned: {
        std::int64_t mn = 0;
        std::uint64_t mx = 0;
        Bounds(v, mn, mx);
        return Json(IntType(mn, mx));
      }
      case Json::value_t::object:
        if (IsHexString(v)) return Json("string");
        break;
      case Json::value_t::array: return InferArray(v);
      default: break;
    }
    return Bad("value " + v.dump() + " has no GGUF type (give one in tensorsafe.gguf_types)");
  }

 private:
  Status Bad(const std::string& msg) const { return InvalidArgument(ctx_ + ": " + msg); }

  static bool IsHexString(const Json& v) {
    return v.is_object() && v.size() == 1 && v.contains("hex") && v["hex"].is_string();
  }

  // The narrowest of int32 / int64 / uint64 holding [mn, mx]; "" if none.
  static std::string IntType(std::int64_t mn, std::uint64_t mx) {
    if (mn >= INT32_MIN && mx <= INT32_MAX) return "int32";
    if (mx <= INT64_MAX) return "int64";
    return mn < 0 ? "" : "uint64";
  }

  // Folds an integer into the running [mn, mx].
  static void Bounds(const Json& x, std::int64_t& mn, std::uint64_t& mx) {
    if (x.is_number_unsigned()) {
      mx = std::max(mx, x.get<std::uint64_t>());
    } else if (auto i = x.get<std::int64_t>(); i < 0) {
      mn = std::min(mn, i);
    } else {
      mx = std::max(mx, static_cast<std::uint64_t>(i));
    }
  }

  Result<Json> InferArray(const Json& v) const {
    if (v.empty()) return Bad("cannot infer the element type of an empty array");
    const Json& f = v.front();
    if (f.is_array()) {
      Json descs = Json::array();
      for (const Json& e : v) {
        if (!e.is_array()) return Bad("array mixes arrays and other values");
        TS_ASSIGN_OR_RETURN(Json d, InferArray(e));
        descs.push_back(std::move(d));
      }
      bool same = descs.front().is_string();
      for (const Json& d : descs) same = same && d == descs.front();
      if (same) return Json("array<" + descs.front().get<std::string>() + ">");
      Json list = Json::array({"array"});
      for (Json& d : descs) list.push_back(std::move(d));
      return list;
    }
    if (f.is_number()) {
      bool any_float = false;
      std::int64_t mn = 0;
      std::uint64_t mx = 0;
      for (const Json& e : v) {
        if (!e.is_number()) return Bad("array mixes numbers and other values");
        if (e.is_number_float()) {
          any_float = true;
        } else {
          Bounds(e, mn, mx);
        }
      }
      if (any_float) return Json("array<float64>");
      const std::string t = IntType(mn, mx);
      if (t.empty()) return Bad("no integer type holds both negative values and values above INT64_MAX");
      return Json("array<" + t + ">");
    }
    TS_ASSIGN_OR_RETURN(Json d, Infer(f));
    if (!d.is_string()) return Bad("cannot infer the element type of " + v.dump());
    for (const Json& e : v) {
      TS_ASSIGN_OR_RETURN(Json de, Infer(e));
      if (de != d) return Bad("array mixes " + d.get<std::string>() + " and other values");
    }
    return Json("array<" + d.get<std::string>() + ">");
  }

  // The GGUF value type a descriptor names.
  Result<ValueType> TypeOf(const Json& desc) const {
    if (desc.is_array()) {
      if (!desc.empty() && desc.front() == "array") return ValueType::kArray;
    } else if (desc.is_string()) {
      const auto& s = desc.get_ref<const std::string&>();
      if (s.starts_with("array<") && s.ends_with(">")) return ValueType::kArray;
      if (auto t = ParseValueTypeName(s); t && *t != ValueType::kArray) return *t;
    }
    return Bad("bad GGUF type " + desc.dump());
  }

  Status Payload(const Json& desc, ValueType t, const Json& v) {
    switch (t) {
      case ValueType::kString: return String(v);
      case ValueType::kBool:
        if (!v.is_boolean()) return Bad("expected a bool, got " + v.dump());
        Put8(out_, v.get<bool>() ? 1 : 0);
        return Status::OK();
      case ValueType::kF32:
      case ValueType::kF64: return Float(t, v);
      case ValueType::kArray: return Array(desc, v);
      default: return Int(t, v);
    }
  }

  Status String(const Json& v) {
    if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      Put64(out_, s.size());
      out_ += s;
      return Status::OK();
    }
    if (!IsHexString(v)) return Bad("expected a string or {\"hex\": ...}, got " + v.dump());
    const auto& h = v["hex"].get_ref<const std::string&>();
    if (h.size() % 2 != 0) return Bad("odd number of hex digits in " + v.dump());
    Put64(out_, h.size() / 2);
    for (std::size_t i = 0; i < h.size(); i += 2) {
      unsigned byte = 0;
      auto r = std::from_chars(h.data() + i, h.data() + i + 2, byte, 16);
      if (r.ec != std::errc() || r.ptr != h.data() + i + 2) return Bad("bad hex in " + v.dump());
      Put8(out_, static_cast<std::uint8_t>(byte));
    }
    return Status::OK();
  }

  Status Int(ValueType t, const Json& v) {
    if (!v.is_number_integer()) return Bad("expected an integer, got " + v.dump());
    // Range check on the exact value: [lo, hi] of the type.
    std::int64_t lo = 0;
    std::uint64_t hi = 0;
    switch (t) {
      case ValueType::kU8: hi = UINT8_MAX; break;
      case ValueType::kI8:
        lo = INT8_MIN;
        hi = INT8_MAX;
        break;
      case ValueType::kU16: hi = UINT16_MAX; break;
      case ValueType::kI16:
        lo = INT16_MIN;
        hi = INT16_MAX;
        break;
      case ValueType::kU32: hi = UINT32_MAX; break;
      case ValueType::kI32:
        lo = INT32_MIN;
        hi = INT32_MAX;
        break;
      case ValueType::kU64: hi = UINT64_MAX; break;
      default:
        lo = INT64_MIN;
        hi = INT64_MAX;
        break;  // kI64
    }
    std::uint64_t bits;
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > hi) return Bad(std::to_string(u) + " is out of range for " + Name(t));
      bits = u;
    } else {
      const auto i = v.get<std::int64_t>();
      if (i < lo || (i >= 0 && static_cast<std::uint64_t>(i) > hi)) {
        return Bad(std::to_string(i) + " is out of range for " + Name(t));
      }
      bits = static_cast<std::uint64_t>(i);
    }
    switch (ValueTypeSize(t)) {
      case 1: Put8(out_, static_cast<std::uint8_t>(bits)); break;
      case 2: Put16(out_, static_cast<std::uint16_t>(bits)); break;
      case 4: Put32(out_, static_cast<std::uint32_t>(bits)); break;
      default: Put64(out_, bits); break;
    }
    return Status::OK();
  }

  static std::string Name(ValueType t) { return std::string(ValueTypeName(t)); }

  Status Float(ValueType t, const Json& v) {
    const bool f32 = t == ValueType::kF32;
    std::uint64_t bits = 0;
    if (v.is_number()) {
      const double d = v.get<double>();
      if (f32) {
        const auto f = static_cast<float>(d);
        if (std::isinf(f) && std::isfinite(d)) return Bad(v.dump() + " is out of range for float32");
        bits = std::bit_cast<std::uint32_t>(f);
      } else {
        bits = std::bit_cast<std::uint64_t>(d);
      }
    } else if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      if (s == "nan") {
        bits = f32 ? 0x7fc00000u : 0x7ff8000000000000ull;
      } else if (s == "inf" || s == "-inf") {
        bits = f32 ? 0x7f800000u : 0x7ff0000000000000ull;
        if (s[0] == '-') bits |= f32 ? 0x80000000u : 0x8000000000000000ull;
      } else if (s.starts_with("nan:0x") && s.size() == (f32 ? 14u : 22u)) {
        auto r = std::from_chars(s.data() + 6, s.data() + s.size(), bits, 16);
        const bool nan = f32 ? std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(bits)))
                             : std::isnan(std::bit_cast<double>(bits));
        if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !nan) {
          return Bad("bad NaN " + v.dump());
        }
      } else {
        return Bad("expected a number, \"nan\", \"inf\" or \"-inf\", got " + v.dump());
      }
    } else {
      return Bad("expected a number, got " + v.dump());
    }
    if (f32) {
      Put32(out_, static_cast<std::uint32_t>(bits));
    } else {
      Put64(out_, bits);
    }
    return Status::OK();
  }

  Status Array(const Json& desc, const Json& v) {
    if (!v.is_array()) return Bad("expected an array for type " + desc.dump() + ", got " + v.dump());
    if (depth_ >= kMaxArrayDepth) return Bad("arrays nested too deep");
    ++depth_;
    Status s = ArrayBody(desc, v);
    --depth_;
    return s;
  }

  Status ArrayBody(const Json& desc, const Json& v) {
    if (desc.is_array()) {  // ["array", d0, d1, ...]: one descriptor per element
      if (desc.size() != v.size() + 1) {
        return Bad("type " + desc.dump() + " lists " + std::to_string(desc.size() - 1) + " element types for " +
                   std::to_string(v.size()) + " elements");
      }
      Put32(out_, static_cast<std::uint32_t>(ValueType::kArray));
      Put64(out_, v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        TS_ASSIGN_OR_RETURN(ValueType t, TypeOf(desc[i + 1]));
        if (t != ValueType::kArray) return Bad("element type " + desc[i + 1].dump() + " is not an array");
        TS_RETURN_IF_ERROR(Array(desc[i + 1], v[i]));
      }
      return Status::OK();
    }
    const auto& s = desc.get_ref<const std::string&>();
    const Json elem(s.substr(6, s.size() - 7));  // "array<X>" -> "X"
    if (elem == "array") {                       // an empty array of arrays: no element to describe
      if (!v.empty()) return Bad("type \"array<array>\" needs an empty array");
      Put32(out_, static_cast<std::uint32_t>(ValueType::kArray));
      Put64(out_, 0);
      return Status::OK();
    }
    TS_ASSIGN_OR_RETURN(ValueType et, TypeOf(elem));
    Put32(out_, static_cast<std::uint32_t>(et));
    Put64(out_, v.size());
    for (const Json& e : v) TS_RETURN_IF_ERROR(Payload(elem, et, e));
    return Status::OK();
  }

  static constexpr int kMaxArrayDepth = 64;
  std::string& out_;
  std::string ctx_;
  int depth_ = 0;
};

}  // namespace

Result<EncodedKeyValues> EncodeKeyValues(std::string_view metadata_json, const WriteOptions& options) {
  EncodedKeyValues out;
  if (metadata_json.empty()) return out;
  bool too_deep = false;
  auto cb = [&](int depth, Json::parse_event_t, Json&) {
    if (static_cast<std::uint32_t>(depth) > options.max_json_depth) too_deep = true;
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(metadata_json.begin(), metadata_json.end(), cb);
  } catch (const Json::exception& e) {
    if (too_deep) {
      return LimitExceeded("metadata JSON nested deeper than " + std::to_string(options.max_json_depth));
    }
    return InvalidArgument(std::string("metadata is not valid JSON: ") + e.what());
  }
  if (too_deep) {
    return LimitExceeded("metadata JSON nested deeper than " + std::to_string(options.max_json_depth));
  }
  if (!j.is_object()) return InvalidArgument("metadata JSON must be an object");
  if (auto w = tensorsafe::internal::FindWideInteger(metadata_json)) {
    return InvalidArgument("key \"" + w->key + "\": the integer " + w->text +
                           " does not fit in 64 bits, GGUF's widest integer types (store it as a string)");
  }
  const std::string types_key(kTypesKey);
  Json types = Json::object();
  // Its JSON text is taken too: safetensors' --stringify-metadata stores it
  // so, with every value that is not a string as its JSON text; those are
  // then read back from their text, so gguf -> safetensors -> gguf keeps
  // the bytes.
  bool stringified = false;
  if (auto it = j.find(types_key); it != j.end()) {
    if (it->is_string()) {
      Json parsed = Json::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) {
        *it = std::move(parsed);
        stringified = true;
      }
    }
    if (!it->is_object()) {
      return InvalidArgument("key \"" + types_key + "\" (reserved: the GGUF value types of the other keys) must be " +
                             "an object or its JSON text, not " + it->dump().substr(0, 60));
    }
    types = *it;
    for (const auto& [k, _] : types.items()) {
      if (!j.contains(k) || k == types_key) {
        return InvalidArgument(types_key + " gives a type for \"" + k + "\", which has no value");
      }
    }
  }
  KvWriter w(out.bytes);
  for (const auto& [key, value] : j.items()) {
    if (key == types_key) continue;
    if (key.empty()) return InvalidArgument("metadata key \"\" is empty; GGUF keys must not be");
    Json desc;
    w.SetKey(key);  // before Infer, whose errors name the key
    Json unstringified;
    if (auto it = types.find(key); it != types.end()) {
      desc = *it;
      if (stringified && value.is_string() && desc != "string") {
        unstringified = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (unstringified.is_discarded()) unstringified = Json();
      }
    } else {
      TS_ASSIGN_OR_RETURN(desc, w.Infer(value));
    }
    Put64(out.bytes, key.size());
    out.bytes += key;
    const std::size_t value_at = out.bytes.size() + 4;
    TS_RETURN_IF_ERROR(w.KeyValue(key, desc, unstringified.is_null() ? value : unstringified));
    if (key == kAlignmentKey) {
      if (desc != "uint32") {
        return InvalidArgument("general.alignment must have type uint32, not " + desc.dump());
      }
      const std::uint32_t a =
          tensorsafe::internal::Load32(reinterpret_cast<const std::byte*>(out.bytes.data() + value_at));
      if (!tensorsafe::internal::IsPowerOfTwo(a)) {
        return InvalidArgument("general.alignment " + std::to_string(a) + " is not a power of two");
      }
      out.alignment = a;
    }
    ++out.count;
  }
  return out;
}

}  // namespace tensorsafe::gguf::internal
