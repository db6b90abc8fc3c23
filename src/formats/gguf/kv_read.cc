// GGUF key/value section -> metadata JSON (docs/formats/gguf.md §Metadata).
// The JSON text is written directly rather than through a DOM: a tokenizer
// array of a million strings would otherwise cost tens of bytes per element.
#include <bit>
#include <charconv>
#include <cmath>
#include <string>
#include <unordered_map>

#include "formats/gguf/internal.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::gguf::internal {
namespace {

using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::IsPowerOfTwo;
using tensorsafe::internal::IsValidUtf8;
using tensorsafe::internal::QuoteName;

constexpr std::string_view kTypeNames[] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64",
};
constexpr std::uint32_t kTypeSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

using tensorsafe::internal::Str;

template <typename T>
void AppendInt(std::string& out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Finite floats always carry a '.' or an exponent so that JSON readers keep
// them floats and -0.0 keeps its sign.
void AppendFinite(std::string& out, const char* b, const char* e) {
  out.append(b, e);
  for (const char* p = b; p != e; ++p) {
    if (*p == '.' || *p == 'e') return;
  }
  out += ".0";
}

void AppendHex(std::string& out, std::uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out += kHex[(v >> (4 * i)) & 15];
}

// Non-finite values are strings; a NaN other than the canonical quiet NaN
// keeps its bits ("nan:0x7fc00001").
bool AppendNonFinite(std::string& out, bool nan, bool negative, std::uint64_t bits, std::uint64_t canonical_nan,
                     int hex_digits) {
  if (nan) {
    if (bits == canonical_nan) {
      out += "\"nan\"";
    } else {
      out += "\"nan:0x";
      AppendHex(out, bits, hex_digits);
      out += '"';
    }
    return true;
  }
  out += negative ? "\"-inf\"" : "\"inf\"";
  return true;
}

}  // namespace

std::string_view ValueTypeName(ValueType t) { return kTypeNames[static_cast<std::uint32_t>(t)]; }

std::optional<ValueType> ParseValueTypeName(std::string_view name) {
  for (std::uint32_t i = 0; i <= kMaxValueType; ++i) {
    if (kTypeNames[i] == name) return static_cast<ValueType>(i);
  }
  return std::nullopt;
}

std::uint32_t ValueTypeSize(ValueType t) { return kTypeSizes[static_cast<std::uint32_t>(t)]; }

Status Cursor::Need(std::uint64_t n, std::string_view what) const {
  if (Fits(n)) return Status::OK();
  return Corruption(file_ + ": " + std::string(what) + " at offset " + Str(pos_) + " needs " + Str(n) + " bytes, " +
                    Str(remaining()) + " remain");
}

Result<std::string_view> Cursor::String(std::string_view what, std::uint64_t max_bytes) {
  TS_RETURN_IF_ERROR(Need(8, std::string(what) + " length"));
  const std::uint64_t at = pos_;
  const std::uint64_t len = Load64();
  if (!Fits(len)) {
    return Corruption(file_ + ": " + std::string(what) + ": length " + Str(len) + " at offset " + Str(at) +
                      " exceeds the " + Str(remaining()) + " bytes remaining");
  }
  if (len > max_bytes) {
    return LimitExceeded(file_ + ": " + std::string(what) + ": length " + Str(len) + " exceeds the limit of " +
                         Str(max_bytes) + " bytes");
  }
  return std::string_view(reinterpret_cast<const char*>(Take(len)), len);
}

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          AppendHex(out, c, 2);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void AppendF32(std::string& out, float v) {
  const auto bits = std::bit_cast<std::uint32_t>(v);
  if (!std::isfinite(v)) {
    AppendNonFinite(out, std::isnan(v), v < 0, bits, 0x7fc00000u, 8);
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  // JSON readers parse the text as a double and then round to float; for a
  // few values the shortest float text lands on a float midpoint that way.
  // Then the exact double text is used instead.
  double d = 0;
  std::from_chars(buf, r.ptr, d);
  if (std::bit_cast<std::uint32_t>(static_cast<float>(d)) != bits) {
    r = std::to_chars(buf, buf + sizeof buf, static_cast<double>(v));
  }
  AppendFinite(out, buf, r.ptr);
}

void AppendF64(std::string& out, double v) {
  if (!std::isfinite(v)) {
    AppendNonFinite(out, std::isnan(v), v < 0, std::bit_cast<std::uint64_t>(v), 0x7ff8000000000000ull, 16);
    return;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  AppendFinite(out, buf, r.ptr);
}

namespace {

class KvReader {
 public:
  KvReader(Cursor& c, const ReadOptions& opt) : c_(c), opt_(opt) {}

  Result<KeyValues> Run(std::uint64_t count) {
    KeyValues out;
    if (count == 0) return out;
    std::unordered_map<std::string_view, std::uint64_t> seen;
    json_ = "{";
    types_ = "{";
    for (std::uint64_t i = 0; i < count; ++i) {
      TS_ASSIGN_OR_RETURN(std::string_view key, c_.String("key " + Str(i), opt_.max_string_bytes));
      if (key.empty()) return Fail(Corruption, "key " + Str(i) + " is empty");
      ctx_ = "key " + Str(i) + " " + QuoteName(key);
      ctx_string_ = ctx_ + " string";  // built once, not per array element
      if (!IsValidUtf8(key)) return Fail(Corruption, ctx_ + " is not valid UTF-8");
      if (key == kTypesKey) {
        return Fail(Unsupported, ctx_ +
                                     " is reserved by tensorsafe for the GGUF types of the "
                                     "other keys");
      }
      auto [it, inserted] = seen.emplace(key, i);
      if (!inserted) {
        return Fail(Corruption, ctx_ + " duplicates key " + Str(it->second));
      }
      TS_RETURN_IF_ERROR(c_.Need(4, ctx_ + " type"));
      const std::uint32_t t = c_.Load32();
      if (t > kMaxValueType) {
        return Fail(Corruption, ctx_ + ": unknown value type " + Str(t));
      }
      if (i != 0) {
        json_ += ',';
        types_ += ',';
      }
      AppendJsonString(json_, key);
      json_ += ':';
      AppendJsonString(types_, key);
      types_ += ':';
      const std::uint64_t value_pos = c_.pos();
      TS_RETURN_IF_ERROR(Value(static_cast<ValueType>(t), 0, &types_));
      if (key == kAlignmentKey) {
        // ggml's rule: a u32 power of two (the spec's "multiple of 8" is not
        // enforced by any reader).
        if (static_cast<ValueType>(t) != ValueType::kU32) {
          return Fail(Corruption, ctx_ + " has type " + std::string(ValueTypeName(static_cast<ValueType>(t))) +
                                      "; it must be uint32");
        }
        const std::uint32_t a = tensorsafe::internal::Load32(c_.bytes().data() + value_pos);
        if (!IsPowerOfTwo(a)) {
          return Fail(Corruption, ctx_ + ": alignment " + Str(a) + " is not a power of two");
        }
        out.alignment = a;
      }
    }
    json_ += ",\"";
    json_ += kTypesKey;
    json_ += "\":";
    json_ += types_;
    json_ += "}}";
    TS_RETURN_IF_ERROR(CheckSize());
    out.json = std::move(json_);
    return out;
  }

 private:
  Status Fail(Status (*make)(std::string), const std::string& msg) const { return make(c_.file() + ": " + msg); }

  Status CheckSize() const {
    const std::uint64_t n = json_.size() + types_.size() + pending_;
    if (n <= opt_.max_metadata_bytes) return Status::OK();
    return Fail(LimitExceeded,
                ctx_ + ": the metadata JSON grows past the limit of " + Str(opt_.max_metadata_bytes) + " bytes");
  }

  void Scalar(ValueType t) {
    switch (t) {
      case ValueType::kU8: AppendInt(json_, c_.Load8()); break;
      case ValueType::kI8: AppendInt(json_, static_cast<std::int8_t>(c_.Load8())); break;
      case ValueType::kU16: AppendInt(json_, tensorsafe::internal::Load16(c_.Take(2))); break;
      case ValueType::kI16:
        AppendInt(json_, static_cast<std::int16_t>(tensorsafe::internal::Load16(c_.Take(2))));
        break;
      case ValueType::kU32: AppendInt(json_, c_.Load32()); break;
      case ValueType::kI32: AppendInt(json_, static_cast<std::int32_t>(c_.Load32())); break;
      case ValueType::kU64: AppendInt(json_, c_.Load64()); break;
      case ValueType::kI64: AppendInt(json_, static_cast<std::int64_t>(c_.Load64())); break;
      case ValueType::kF32: AppendF32(json_, std::bit_cast<float>(c_.Load32())); break;
      case ValueType::kF64: AppendF64(json_, std::bit_cast<double>(c_.Load64())); break;
      default: break;  // bool, string and array are handled by Value()
    }
  }

  // Appends the value's JSON to json_ and its type descriptor to *desc.
  // `depth` counts the arrays around this value.
  Status Value(ValueType t, std::uint32_t depth, std::string* desc) {
    if (t == ValueType::kString) {
      TS_ASSIGN_OR_RETURN(std::string_view s, c_.String(ctx_string_, opt_.max_string_bytes));
      if (IsValidUtf8(s)) {
        AppendJsonString(json_, s);
      } else {
        // Lossless: GGUF strings should be UTF-8 but ggml does not check.
        json_ += "{\"hex\":\"";
        for (char ch : s) AppendHex(json_, static_cast<unsigned char>(ch), 2);
        json_ += "\"}";
      }
      *desc += "\"string\"";
      return CheckSize();
    }
    if (t == ValueType::kBool) {
      TS_RETURN_IF_ERROR(c_.Need(1, ctx_ + " bool"));
      TS_RETURN_IF_ERROR(Bool());
      *desc += "\"bool\"";
      return Status::OK();
    }
    if (t != ValueType::kArray) {
      TS_RETURN_IF_ERROR(c_.Need(ValueTypeSize(t), ctx_ + " " + std::string(ValueTypeName(t))));
      Scalar(t);
      *desc += '"';
      *desc += ValueTypeName(t);
      *desc += '"';
      return Status::OK();
    }
    return Array(depth, desc);
  }

  Status Bool() {
    const std::uint64_t at = c_.pos();
    const std::uint8_t b = c_.Load8();
    // 0/1 only, so that the value round-trips through a JSON bool.
    if (b > 1) {
      return Fail(Corruption, ctx_ + ": bool value " + Str(b) + " at offset " + Str(at) + " is neither 0 nor 1");
    }
    json_ += b ? "true" : "false";
    return Status::OK();
  }

  Status Array(std::uint32_t depth, std::string* desc) {
    TS_RETURN_IF_ERROR(c_.Need(12, ctx_ + " array header"));
    const std::uint32_t et = c_.Load32();
    const std::uint64_t count = c_.Load64();
    if (et > kMaxValueType) {
      return Fail(Corruption, ctx_ + ": unknown array element type " + Str(et));
    }
    const auto e = static_cast<ValueType>(et);
    if (e == ValueType::kArray && depth + 2 > opt_.max_array_depth) {
      return Fail(LimitExceeded, ctx_ + ": arrays nested deeper than the limit of " + Str(opt_.max_array_depth));
    }
    // Every element takes at least this many bytes: a count the file cannot
    // hold is refused before any work or allocation.
    const std::uint64_t min = e == ValueType::kString ? 8 : e == ValueType::kArray ? 12 : ValueTypeSize(e);
    auto need = CheckedMul(count, min);
    if (!c_.Fits(need)) {
      return Fail(Corruption, ctx_ + ": array of " + Str(count) + " " + std::string(ValueTypeName(e)) + " at offset " +
                                  Str(c_.pos() - 12) + " cannot fit in the " + Str(c_.remaining()) +
                                  " bytes remaining");
    }
    if (count > opt_.max_array_elems) {
      return Fail(LimitExceeded,
                  ctx_ + ": array of " + Str(count) + " elements exceeds the limit of " + Str(opt_.max_array_elems));
    }
    json_ += '[';
    // Element descriptors of an array of arrays: kept as one list text, with
    // a flag telling whether they are all the same simple descriptor.
    std::string list;
    std::string first;
    bool same = true;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (i != 0) json_ += ',';
      if (e == ValueType::kBool) {
        TS_RETURN_IF_ERROR(Bool());
      } else if (e == ValueType::kString || e == ValueType::kArray) {
        std::string d;
        TS_RETURN_IF_ERROR(Value(e, depth + 1, &d));
        if (e == ValueType::kArray) {
          if (i == 0) first = d;
          same = same && d == first;
          list += ',';
          list += d;
          pending_ += d.size() + 1;
        }
      } else {
        Scalar(e);
      }
      TS_RETURN_IF_ERROR(CheckSize());
    }
    json_ += ']';
    pending_ -= list.size();
    if (e != ValueType::kArray) {
      *desc += "\"array<";
      *desc += ValueTypeName(e);
      *desc += ">\"";
    } else if (count == 0) {
      *desc += "\"array<array>\"";
    } else if (same && first.front() == '"') {
      *desc += "\"array<" + first.substr(1, first.size() - 2) + ">\"";
    } else {
      *desc += "[\"array\"" + list + "]";
    }
    return CheckSize();
  }

  Cursor& c_;
  const ReadOptions& opt_;
  std::string json_;
  std::string types_;
  std::string ctx_;
  std::string ctx_string_;
  std::uint64_t pending_ = 0;  // bytes of descriptors not yet in types_
};

}  // namespace

Result<KeyValues> ReadKeyValues(Cursor& c, std::uint64_t count, const ReadOptions& options) {
  return KvReader(c, options).Run(count);
}

}  // namespace tensorsafe::gguf::internal
