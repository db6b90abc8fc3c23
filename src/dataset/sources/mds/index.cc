// index.json of MDS datasets (docs/formats/mds.md, "index.json").
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <set>
#include <string>
#include <utility>

#include "dataset/sources/mds/internal.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/env.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::mds {
namespace internal {
namespace {

struct NumpyName {
  std::string_view name;
  DType dtype;
  std::uint8_t ndarray_code;  // encodings.py NDArray._value_dtype2int
};
constexpr std::array<NumpyName, 11> kNumpyNames = {{
    {"uint8", DType::kU8, 8},
    {"int8", DType::kI8, 9},
    {"uint16", DType::kU16, 16},
    {"int16", DType::kI16, 17},
    {"float16", DType::kF16, 18},
    {"uint32", DType::kU32, 32},
    {"int32", DType::kI32, 33},
    {"float32", DType::kF32, 34},
    {"uint64", DType::kU64, 64},
    {"int64", DType::kI64, 65},
    {"float64", DType::kF64, 66},
}};

// Encodings whose values we hand out as their stored bytes.
constexpr std::array<std::string_view, 8> kBytesEncodings = {"bytes",      "jpeg",      "png",       "pil",
                                                             "jpeg_array", "jpegarray", "list[pil]", "list[jpeg]"};

// One dim of an `ndarray:<dtype>:<dims>` encoding as Python's int() reads
// it (encodings.py NDArray.from_str maps int over the comma-separated dims):
// ASCII whitespace around it, an optional sign, decimal digits with single
// '_' between them, leading zeros allowed. So "2, 3", " 2", "+2", "02" and
// "1_0" are dims MDSWriter writes and StreamingDataset reads. False for
// anything else, for a negative value or one above 2^62.
bool ParsePythonDim(std::string_view s, std::uint64_t* out) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (s[i + 1] == '_') return false;  // the last char is a digit: i + 1 is in range
      continue;
    }
    if (c < '0' || c > '9') return false;
    if (v > ((1ull << 62) - static_cast<std::uint64_t>(c - '0')) / 10) return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (negative && v != 0) return false;
  *out = v;
  return true;
}

}  // namespace

bool DTypeOfNumpyName(std::string_view name, DType* out) {
  for (const NumpyName& n : kNumpyNames) {
    if (n.name == name) {
      *out = n.dtype;
      return true;
    }
  }
  return false;
}

bool DTypeOfNdarrayCode(std::uint8_t code, DType* out) {
  for (const NumpyName& n : kNumpyNames) {
    if (n.ndarray_code == code) {
      *out = n.dtype;
      return true;
    }
  }
  return false;
}

Status ParseEncoding(std::string_view enc, const Limits& limits, Column* c) {
  c->encoding = std::string(enc);
  c->size = -1;
  c->dtype_fixed = c->shape_fixed = false;
  c->shape.clear();
  const std::string q = tensorsafe::internal::QuoteName(enc);
  if (enc == "pkl") {
    return Unsupported("encoding \"pkl\" is pickle, which tensorsafe never decodes (it runs code)");
  }
  if (enc == "str" || enc == "str_int" || enc == "str_float" || enc == "str_decimal") {
    c->codec = ColumnCodec::kStr;
    return Status::OK();
  }
  if (enc == "json") {
    c->codec = ColumnCodec::kJson;
    return Status::OK();
  }
  if (enc == "int") {
    c->codec = ColumnCodec::kInt;
    c->size = 8;
    return Status::OK();
  }
  if (enc == "list[png]" || std::find(kBytesEncodings.begin(), kBytesEncodings.end(), enc) != kBytesEncodings.end()) {
    c->codec = ColumnCodec::kBytes;
    return Status::OK();
  }
  DType dt;
  if (DTypeOfNumpyName(enc, &dt)) {
    c->codec = ColumnCodec::kScalar;
    c->dtype_fixed = true;
    c->dtype = dt;
    c->size = ElementSize(dt);
    return Status::OK();
  }
  if (enc == "ndarray" || enc.starts_with("ndarray:")) {
    c->codec = ColumnCodec::kNdarray;
    // "ndarray:" is "ndarray" to MosaicML (from_str of "" has no arguments).
    if (enc == "ndarray" || enc == "ndarray:") return Status::OK();
    std::string_view rest = enc.substr(8);
    std::string_view dtype_name = rest.substr(0, rest.find(':'));
    if (!DTypeOfNumpyName(dtype_name, &dt)) {
      return Unsupported("encoding " + q + ": ndarray dtype " + tensorsafe::internal::QuoteName(dtype_name) +
                         " is not one MDS writes (uint8..uint64, int8..int64, float16/32/64)");
    }
    c->dtype_fixed = true;
    c->dtype = dt;
    if (dtype_name.size() == rest.size()) return Status::OK();
    std::string_view dims = rest.substr(dtype_name.size() + 1);
    std::uint64_t elems = 1;
    while (true) {
      std::size_t comma = dims.find(',');
      std::uint64_t d;
      // The writer asserts every fixed dim >= 1.
      if (!ParsePythonDim(dims.substr(0, comma), &d) || d == 0) {
        return Corruption("encoding " + q + ": shape must be positive decimal dims joined by ','");
      }
      if (c->shape.size() >= limits.max_rank) {
        return LimitExceeded("encoding " + q + ": rank above the limit " + std::to_string(limits.max_rank));
      }
      c->shape.push_back(static_cast<std::int64_t>(d));
      auto e = tensorsafe::internal::CheckedMul(elems, d);
      if (!e) return Corruption("encoding " + q + ": element count overflows");
      elems = *e;
      if (comma == std::string_view::npos) break;
      dims = dims.substr(comma + 1);
    }
    auto bytes = tensorsafe::internal::CheckedMul(elems, ElementSize(dt));
    if (!bytes || *bytes > (1ull << 62)) return Corruption("encoding " + q + ": byte size overflows");
    c->shape_fixed = true;
    c->size = static_cast<std::int64_t>(*bytes);
    return Status::OK();
  }
  return Unsupported("unknown encoding " + q);
}

Status CheckRelativePath(std::string_view p) {
  if (p.empty()) return Corruption("empty path");
  if (p.front() == '/') return Corruption("absolute path");
  if (p.find('\0') != std::string_view::npos) return Corruption("NUL in path");
  std::size_t start = 0;
  while (true) {
    std::size_t slash = p.find('/', start);
    std::string_view part = p.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Corruption("path component \"" + std::string(part) + "\" (empty, . or ..)");
    }
    if (slash == std::string_view::npos) return Status::OK();
    start = slash + 1;
  }
}

}  // namespace internal

namespace {

namespace dom = simdjson::dom;
using internal::CheckRelativePath;
using tensorsafe::internal::QuoteName;

// Python's json.load keeps the last of a repeated key, simdjson's lookup the
// first: such an index would name other files, sizes or hashes to MosaicML
// than to us, so a repeated key is refused (as in safetensors headers).
Status CheckUniqueKeys(dom::object obj, const std::string& what) {
  std::set<std::string_view> keys;
  for (auto field : obj) {
    if (!keys.insert(field.key).second) {
      return Corruption(what + ": key " + QuoteName(field.key) + " appears twice");
    }
  }
  return Status::OK();
}

// Reads `obj[key]` as an unsigned integer in [0, max].
Status GetUint(dom::object obj, std::string_view key, std::uint64_t max, std::uint64_t* out, const std::string& what) {
  dom::element e;
  if (obj[key].get(e)) return Corruption(what + ": missing \"" + std::string(key) + "\"");
  std::uint64_t v;
  if (e.get_uint64().get(v)) {
    return Corruption(what + ": \"" + std::string(key) + "\" is not a non-negative integer");
  }
  if (v > max) {
    return Corruption(what + ": \"" + std::string(key) + "\" = " + std::to_string(v) + " exceeds " +
                      std::to_string(max));
  }
  *out = v;
  return Status::OK();
}

Status GetString(dom::object obj, std::string_view key, std::string_view* out, const std::string& what) {
  dom::element e;
  if (obj[key].get(e)) return Corruption(what + ": missing \"" + std::string(key) + "\"");
  if (e.get_string().get(*out)) {
    return Corruption(what + ": \"" + std::string(key) + "\" is not a string");
  }
  return Status::OK();
}

Status ParseFileRef(dom::element e, const Limits& limits, FileRef* ref, const std::string& what) {
  dom::object obj;
  if (e.get_object().get(obj)) return Corruption(what + " is not an object");
  TS_RETURN_IF_ERROR(CheckUniqueKeys(obj, what));
  std::string_view basename;
  TS_RETURN_IF_ERROR(GetString(obj, "basename", &basename, what));
  if (basename.size() > limits.max_name_bytes) {
    return LimitExceeded(what + ": basename of " + std::to_string(basename.size()) + " bytes exceeds the limit " +
                         std::to_string(limits.max_name_bytes));
  }
  if (Status s = CheckRelativePath(basename); !s.ok()) {
    return Corruption(what + ": unsafe basename " + QuoteName(basename) + ": " + s.message());
  }
  ref->basename = std::string(basename);
  TS_RETURN_IF_ERROR(GetUint(obj, "bytes", limits.max_shard_bytes, &ref->bytes, what));
  dom::element h;
  if (!obj["hashes"].get(h) && !h.is_null()) {
    dom::object hashes;
    if (h.get_object().get(hashes)) return Corruption(what + ": \"hashes\" is not an object");
    TS_RETURN_IF_ERROR(CheckUniqueKeys(hashes, what + " hashes"));
    for (auto [algo, digest] : hashes) {
      std::string_view hex;
      if (digest.get_string().get(hex)) {
        return Corruption(what + ": hash " + QuoteName(algo) + " is not a string");
      }
      ref->hashes.push_back({std::string(algo), std::string(hex)});
    }
  }
  return Status::OK();
}

Status ParseShard(dom::element e, std::size_t i, const Limits& limits, ShardEntry* shard) {
  const std::string what = "shard " + std::to_string(i);
  dom::object obj;
  if (e.get_object().get(obj)) return Corruption(what + " is not an object");
  TS_RETURN_IF_ERROR(CheckUniqueKeys(obj, what));
  std::uint64_t version;
  TS_RETURN_IF_ERROR(GetUint(obj, "version", ~0ull, &version, what));
  if (version != 2) return Unsupported(what + ": version " + std::to_string(version) + " (only 2 is read)");
  std::string_view format;
  TS_RETURN_IF_ERROR(GetString(obj, "format", &format, what));
  if (format != "mds") {
    return Unsupported(what + ": format " + QuoteName(format) + " (only \"mds\" is read)");
  }
  TS_RETURN_IF_ERROR(GetUint(obj, "samples", 0xFFFFFFFFull, &shard->samples, what));

  dom::array encodings, names, sizes;
  if (obj["column_encodings"].get_array().get(encodings) || obj["column_names"].get_array().get(names) ||
      obj["column_sizes"].get_array().get(sizes)) {
    return Corruption(what + ": column_encodings, column_names and column_sizes must be arrays");
  }
  if (encodings.size() != names.size() || sizes.size() != names.size()) {
    return Corruption(what + ": " + std::to_string(encodings.size()) + " column_encodings, " +
                      std::to_string(names.size()) + " column_names, " + std::to_string(sizes.size()) +
                      " column_sizes");
  }
  if (names.size() == 0) return Corruption(what + ": no columns");
  if (names.size() > limits.max_columns) {
    return LimitExceeded(what + ": " + std::to_string(names.size()) + " columns exceed the limit " +
                         std::to_string(limits.max_columns));
  }
  std::set<std::string_view> seen;
  for (std::size_t c = 0; c < names.size(); ++c) {
    Column col;
    std::string_view name, enc;
    if (names.at(c).get_string().get(name) || encodings.at(c).get_string().get(enc)) {
      return Corruption(what + ": column " + std::to_string(c) + ": name and encoding must be strings");
    }
    const std::string cw = what + " column " + QuoteName(name);
    if (name.empty()) return Corruption(what + ": column " + std::to_string(c) + " has an empty name");
    if (name.size() > limits.max_name_bytes) {
      return LimitExceeded(what + ": column " + std::to_string(c) + " name of " + std::to_string(name.size()) +
                           " bytes exceeds the limit " + std::to_string(limits.max_name_bytes));
    }
    if (!seen.insert(name).second) return Corruption(cw + " appears twice");
    col.name = std::string(name);
    if (Status s = internal::ParseEncoding(enc, limits, &col); !s.ok()) return s.WithContext(cw);
    dom::element sz = sizes.at(c);
    std::int64_t stored = -1;
    if (!sz.is_null()) {
      std::uint64_t v;
      if (sz.get_uint64().get(v) || v > (1ull << 62)) {
        return Corruption(cw + ": column size is neither null nor a non-negative integer");
      }
      stored = static_cast<std::int64_t>(v);
    }
    if (stored != col.size) {
      return Corruption(cw + ": column size " + (stored < 0 ? "null" : std::to_string(stored)) +
                        " contradicts encoding " + QuoteName(enc) + " (" +
                        (col.size < 0 ? "variable" : std::to_string(col.size)) + ")");
    }
    shard->columns.push_back(std::move(col));
  }

  dom::element comp;
  if (obj["compression"].get(comp)) return Corruption(what + ": missing \"compression\"");
  if (!comp.is_null()) {
    std::string_view c;
    if (comp.get_string().get(c)) return Corruption(what + ": \"compression\" is not a string or null");
    if (auto codec = internal::ParseCompression(c); !codec.ok()) return codec.status().WithContext(what);
    shard->compression = std::string(c);
    shard->compressed = true;
  }
  dom::element raw;
  if (obj["raw_data"].get(raw)) return Corruption(what + ": missing \"raw_data\"");
  TS_RETURN_IF_ERROR(ParseFileRef(raw, limits, &shard->raw, what + " raw_data"));
  dom::element zip;
  bool has_zip = !obj["zip_data"].get(zip) && !zip.is_null();
  if (has_zip != shard->compressed) {
    return Corruption(
        what + (shard->compressed ? ": compressed but zip_data is null" : ": zip_data given without compression"));
  }
  if (has_zip) {
    TS_RETURN_IF_ERROR(ParseFileRef(zip, limits, &shard->zip, what + " zip_data"));
    if (shard->zip.basename == shard->raw.basename) {
      return Corruption(what + ": raw_data and zip_data name the same file");
    }
  }
  return Status::OK();
}

}  // namespace

Result<Index> ParseIndex(std::span<const std::byte> bytes, const std::string& display_name, const Limits& limits) {
  const std::string ctx = display_name + ": ";
  if (bytes.size() > limits.max_index_bytes) {
    return LimitExceeded(ctx + "index of " + std::to_string(bytes.size()) + " bytes exceeds the limit " +
                         std::to_string(limits.max_index_bytes));
  }
  dom::parser parser;
  if (parser.allocate(bytes.size() + 64, limits.max_json_depth)) {
    return Internal(ctx + "cannot allocate the JSON parser");
  }
  dom::element doc;
  auto err = parser.parse(reinterpret_cast<const char*>(bytes.data()), bytes.size(), true).get(doc);
  if (err == simdjson::DEPTH_ERROR) {
    return LimitExceeded(ctx + "JSON nested deeper than " + std::to_string(limits.max_json_depth));
  }
  if (err) return Corruption(ctx + "not JSON: " + simdjson::error_message(err));
  dom::object top;
  if (doc.get_object().get(top)) return Corruption(ctx + "not a JSON object");
  TS_RETURN_IF_ERROR(CheckUniqueKeys(top, display_name));
  std::uint64_t version;
  TS_RETURN_IF_ERROR(GetUint(top, "version", ~0ull, &version, display_name));
  if (version != 2) {
    return Unsupported(ctx + "index version " + std::to_string(version) + " (only 2 is read)");
  }
  dom::array shards;
  if (top["shards"].get_array().get(shards)) return Corruption(ctx + "\"shards\" is missing or not an array");
  if (shards.size() > limits.max_shards) {
    return LimitExceeded(ctx + std::to_string(shards.size()) + " shards exceed the limit " +
                         std::to_string(limits.max_shards));
  }
  Index ds;
  ds.shards.reserve(shards.size());
  std::set<std::string> files;
  std::size_t i = 0;
  for (dom::element e : shards) {
    ShardEntry shard;
    if (Status s = ParseShard(e, i, limits, &shard); !s.ok()) return s.WithContext(display_name);
    for (const FileRef* f : {&shard.raw, &shard.zip}) {
      if (f->basename.empty()) continue;
      if (!files.insert(f->basename).second) {
        return Corruption(ctx + "shard " + std::to_string(i) + ": file " + QuoteName(f->basename) +
                          " is named by another shard too");
      }
    }
    ds.total_samples += shard.samples;  // < 2^22 shards x 2^32 samples: no overflow
    ds.shards.push_back(std::move(shard));
    ++i;
  }
  return ds;
}

Result<Index> OpenIndex(const std::string& dir, const Limits& limits) {
  const std::string path = dir + "/index.json";
  auto* env = tensorsafe::Env::Default();
  TS_ASSIGN_OR_RETURN(auto file, env->OpenRead(path));
  if (file->size() > limits.max_index_bytes) {
    return LimitExceeded(path + ": index of " + std::to_string(file->size()) + " bytes exceeds the limit " +
                         std::to_string(limits.max_index_bytes));
  }
  std::vector<std::byte> bytes(file->size());
  TS_RETURN_IF_ERROR(file->ReadAt(0, bytes));
  TS_ASSIGN_OR_RETURN(Index ds, ParseIndex(bytes, path, limits));
  ds.root = dir;
  return ds;
}

}  // namespace tensorsafe::mds
