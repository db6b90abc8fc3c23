// index.json and the schema's JSON form (docs/DATASET.md §2.1, §3, §5).
#include "tensorsafe/dataset/index.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "tensorsafe/tensor.h"

#include "dataset/internal.h"
#include "io/atomic_file.h"
#include "tensorsafe/env.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::dataset {

using nlohmann::json;
using tensorsafe::internal::QuoteName;
namespace fs = std::filesystem;

std::string HashHex(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

std::string FieldLabel(std::size_t k, const std::string& name) {
  return "field " + std::to_string(k) + " " + QuoteName(name);
}

// Rules shared by the writer's declared schema and parsed schemas; the
// caller picks the code.
std::string SchemaProblem(const Schema& schema, std::uint32_t max_rank, std::uint32_t max_fields) {
  if (schema.fields.empty()) return "the schema has no fields";
  if (schema.fields.size() > max_fields) {
    return "the schema has " + std::to_string(schema.fields.size()) + " fields, more than the limit " +
           std::to_string(max_fields);
  }
  std::unordered_set<std::string_view> names;
  for (std::size_t k = 0; k < schema.fields.size(); ++k) {
    const FieldSpec& f = schema.fields[k];
    if (!tensorsafe::internal::IsValidUtf8(f.name)) return FieldLabel(k, f.name) + ": name is not valid UTF-8";
    if (f.name.empty()) return "field " + std::to_string(k) + ": empty name";
    if (!names.insert(f.name).second) return FieldLabel(k, f.name) + ": duplicate name";
    if (f.kind != FieldKind::kTensor) continue;
    if (!LookupDType(static_cast<std::uint8_t>(f.dtype))) {
      return FieldLabel(k, f.name) + ": undefined dtype code " + std::to_string(static_cast<int>(f.dtype));
    }
    if (f.shape.size() > max_rank) {
      return FieldLabel(k, f.name) + ": rank " + std::to_string(f.shape.size()) + " exceeds the limit " +
             std::to_string(max_rank);
    }
    for (std::int64_t d : f.shape) {
      if (d < 0 && d != kAnyDim) return FieldLabel(k, f.name) + ": dimension " + std::to_string(d) + " is negative";
    }
    if (f.fixed_size()) {
      Shape s(f.shape.begin(), f.shape.end());
      auto size = DenseByteSize(f.dtype, s);
      if (!size.ok()) return FieldLabel(k, f.name) + ": shape " + ShapeToString(s) + ": " + size.status().message();
    }
  }
  return {};
}

Result<std::uint64_t> GetUnsigned(const json& obj, const char* key, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) return Corruption(std::string(what) + ": missing \"" + key + "\"");
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    return Corruption(std::string(what) + ": \"" + key + "\" is not a non-negative integer");
  }
  return it->get<std::uint64_t>();
}

Result<std::string> GetString(const json& obj, const char* key, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) return Corruption(std::string(what) + ": missing \"" + key + "\"");
  if (!it->is_string()) return Corruption(std::string(what) + ": \"" + key + "\" is not a string");
  return it->get<std::string>();
}

Status CheckHex(const std::string& hex, std::string_view what) {
  bool ok = hex.size() == 16;
  for (char c : hex) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok) return Corruption(std::string(what) + ": \"xxh3\" is not 16 lower-case hex digits: " + QuoteName(hex));
  return Status::OK();
}

Result<json> ParseJsonText(std::string_view text, std::string_view what) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Corruption(std::string(what) + ": not valid JSON");
  return j;
}

Result<Schema> SchemaFromJsonValue(const json& arr, std::string_view what, const IndexLimits& limits) {
  if (!arr.is_array()) return Corruption(std::string(what) + ": \"schema\" is not an array");
  if (arr.size() > limits.max_fields) {
    return LimitExceeded(std::string(what) + ": the schema has " + std::to_string(arr.size()) +
                         " fields, more than the limit " + std::to_string(limits.max_fields));
  }
  Schema schema;
  for (std::size_t k = 0; k < arr.size(); ++k) {
    const json& f = arr[k];
    const std::string label = std::string(what) + ": schema field " + std::to_string(k);
    if (!f.is_object()) return Corruption(label + " is not an object");
    FieldSpec spec;
    TS_ASSIGN_OR_RETURN(spec.name, GetString(f, "name", label));
    TS_ASSIGN_OR_RETURN(std::string kind, GetString(f, "kind", label));
    auto parsed = ParseFieldKind(kind);
    if (!parsed.ok()) return Corruption(label + ": " + parsed.status().message());
    spec.kind = *parsed;
    if (spec.kind == FieldKind::kTensor) {
      TS_ASSIGN_OR_RETURN(std::string dt, GetString(f, "dtype", label));
      auto dtype = ParseDType(dt);
      if (!dtype || std::string(DTypeName(*dtype)) != dt) {
        return Corruption(label + ": unknown dtype " + QuoteName(dt) + " (canonical names such as \"f32\")");
      }
      spec.dtype = *dtype;
      auto sh = f.find("shape");
      if (sh == f.end() || !sh->is_array()) return Corruption(label + ": \"shape\" is missing or not an array");
      if (sh->size() > limits.max_rank) {
        return LimitExceeded(label + ": rank " + std::to_string(sh->size()) + " exceeds the limit " +
                             std::to_string(limits.max_rank));
      }
      for (const json& d : *sh) {
        if (d.is_null()) {
          spec.shape.push_back(kAnyDim);
        } else if (d.is_number_unsigned() && d.get<std::uint64_t>() <= (std::uint64_t{1} << 62)) {
          spec.shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
        } else {
          return Corruption(label + ": a dimension is neither null nor an integer in [0, 2^62]");
        }
      }
    }
    schema.fields.push_back(std::move(spec));
  }
  std::string problem = SchemaProblem(schema, limits.max_rank, limits.max_fields);
  if (!problem.empty()) return Corruption(std::string(what) + ": " + problem);
  return schema;
}

json SchemaToJsonValue(const Schema& schema) {
  json arr = json::array();
  for (const FieldSpec& f : schema.fields) {
    json o = json::object();
    o["name"] = f.name;
    o["kind"] = std::string(FieldKindName(f.kind));
    if (f.kind == FieldKind::kTensor) {
      o["dtype"] = std::string(DTypeName(f.dtype));
      json sh = json::array();
      for (std::int64_t d : f.shape) sh.push_back(d == kAnyDim ? json(nullptr) : json(d));
      o["shape"] = sh;
    }
    arr.push_back(std::move(o));
  }
  return arr;
}

// Keys in a fixed order (nlohmann sorts object keys), so the same index
// gives the same bytes.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

json StoredFileJson(const std::string& name, std::uint64_t samples, bool with_samples, std::uint64_t bytes,
                    const std::string& xxh3) {
  json o = json::object();
  o["name"] = name;
  if (with_samples) o["samples"] = samples;
  o["bytes"] = bytes;
  o["xxh3"] = xxh3;
  return o;
}

}  // namespace

std::string SchemaToJson(const Schema& schema) { return Dump(SchemaToJsonValue(schema)); }

Result<Schema> SchemaFromJson(std::string_view text, std::string_view what, const IndexLimits& limits) {
  TS_ASSIGN_OR_RETURN(json j, ParseJsonText(text, what));
  return SchemaFromJsonValue(j, what, limits);
}

namespace internal {
Result<Schema> SchemaFromJsonNode(const void* node, std::string_view what, const IndexLimits& limits) {
  return SchemaFromJsonValue(*static_cast<const json*>(node), what, limits);
}
}  // namespace internal

Status ValidateSchema(const Schema& schema) {
  std::string problem = SchemaProblem(schema, 255, 1u << 20);
  if (!problem.empty()) return InvalidArgument("schema: " + problem);
  return Status::OK();
}

bool SameSchema(const Schema& a, const Schema& b, std::string* why) {
  auto describe = [](const FieldSpec& f) {
    std::string s = QuoteName(f.name) + " " + std::string(FieldKindName(f.kind));
    if (f.kind == FieldKind::kTensor) {
      s += " " + std::string(DTypeName(f.dtype)) + " [";
      for (std::size_t i = 0; i < f.shape.size(); ++i) {
        if (i) s += ", ";
        s += f.shape[i] == kAnyDim ? "*" : std::to_string(f.shape[i]);
      }
      s += "]";
    }
    return s;
  };
  if (a.fields.size() != b.fields.size()) {
    if (why) *why = std::to_string(a.fields.size()) + " fields vs " + std::to_string(b.fields.size());
    return false;
  }
  for (std::size_t k = 0; k < a.fields.size(); ++k) {
    const FieldSpec& x = a.fields[k];
    const FieldSpec& y = b.fields[k];
    bool same = x.name == y.name && x.kind == y.kind;
    if (same && x.kind == FieldKind::kTensor) same = x.dtype == y.dtype && x.shape == y.shape;
    if (!same) {
      if (why) *why = "field " + std::to_string(k) + ": " + describe(x) + " vs " + describe(y);
      return false;
    }
  }
  return true;
}

Status ValidateShardName(std::string_view name, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Corruption(std::string(what) + ": shard name " + QuoteName(name) + " " + why);
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > 4096) return bad("is longer than 4096 bytes");
  if (!tensorsafe::internal::IsValidUtf8(name)) return bad("is not valid UTF-8");
  if (name.front() == '/') return bad("is absolute (names are relative to the dataset root)");
  if (name.find('\\') != std::string_view::npos) return bad("contains a backslash");
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(start, end - start);
    if (part.empty()) return bad("has an empty path component");
    if (part == "." || part == "..") return bad("has a \"" + std::string(part) + "\" component (escapes are refused)");
    start = end + 1;
  }
  return Status::OK();
}

Result<DatasetIndex> ParseIndex(std::string_view text, std::string_view what, const IndexLimits& limits) {
  const std::string w(what);
  if (text.size() > limits.max_index_bytes) {  // I1
    return LimitExceeded(w + ": index of " + std::to_string(text.size()) + " bytes exceeds the limit " +
                         std::to_string(limits.max_index_bytes));
  }
  TS_ASSIGN_OR_RETURN(json j, ParseJsonText(text, what));
  if (!j.is_object()) return Corruption(w + ": not a JSON object");
  auto fmt = j.find("format");  // I2
  if (fmt == j.end() || !fmt->is_string() || fmt->get<std::string>() != kIndexFormatName) {
    return Corruption(w + ": \"format\" is not \"" + std::string(kIndexFormatName) + "\"");
  }
  auto ver = j.find("version");  // I3
  if (ver == j.end() || !ver->is_number_integer()) return Corruption(w + ": \"version\" is missing or not an integer");
  if (ver->get<std::int64_t>() > kIndexVersion) {
    return Unsupported(w + ": index version " + std::to_string(ver->get<std::int64_t>()) +
                       " is newer than the supported " + std::to_string(kIndexVersion));
  }
  if (ver->get<std::int64_t>() < 1) return Corruption(w + ": index version " + ver->dump() + " is not valid");
  DatasetIndex index;
  auto sch = j.find("schema");  // I4
  if (sch == j.end()) return Corruption(w + ": missing \"schema\"");
  TS_ASSIGN_OR_RETURN(index.schema, SchemaFromJsonValue(*sch, what, limits));
  TS_ASSIGN_OR_RETURN(index.samples, GetUnsigned(j, "samples", what));
  auto shards = j.find("shards");  // I5
  if (shards == j.end() || !shards->is_array()) return Corruption(w + ": \"shards\" is missing or not an array");
  if (shards->size() > limits.max_shards) {
    return LimitExceeded(w + ": " + std::to_string(shards->size()) + " shards exceed the limit " +
                         std::to_string(limits.max_shards));
  }
  std::set<std::string> names;
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < shards->size(); ++s) {
    const json& o = (*shards)[s];
    const std::string label = w + ": shard " + std::to_string(s);
    if (!o.is_object()) return Corruption(label + " is not an object");
    ShardInfo info;
    TS_ASSIGN_OR_RETURN(info.name, GetString(o, "name", label));
    TS_RETURN_IF_ERROR(ValidateShardName(info.name, label));  // I6
    TS_ASSIGN_OR_RETURN(info.samples, GetUnsigned(o, "samples", label));
    if (info.samples == 0)
      return Corruption(label + " " + QuoteName(info.name) + ": 0 samples (shards are never empty)");
    TS_ASSIGN_OR_RETURN(info.bytes, GetUnsigned(o, "bytes", label));
    TS_ASSIGN_OR_RETURN(info.xxh3, GetString(o, "xxh3", label));
    TS_RETURN_IF_ERROR(CheckHex(info.xxh3, label));
    if (auto z = o.find("zstd"); z != o.end() && !z->is_null()) {  // I7
      const std::string zl = label + " zstd";
      if (!z->is_object()) return Corruption(zl + " is not an object");
      StoredFile f;
      TS_ASSIGN_OR_RETURN(f.name, GetString(*z, "name", zl));
      TS_RETURN_IF_ERROR(ValidateShardName(f.name, zl));
      TS_ASSIGN_OR_RETURN(f.bytes, GetUnsigned(*z, "bytes", zl));
      TS_ASSIGN_OR_RETURN(f.xxh3, GetString(*z, "xxh3", zl));
      TS_RETURN_IF_ERROR(CheckHex(f.xxh3, zl));
      if (!names.insert(f.name).second) return Corruption(zl + ": name " + QuoteName(f.name) + " is listed twice");
      info.zstd = std::move(f);
    }
    if (!names.insert(info.name).second) {  // I8
      return Corruption(label + ": name " + QuoteName(info.name) + " is listed twice");
    }
    auto sum = tensorsafe::internal::CheckedAdd(total, info.samples);
    if (!sum) return Corruption(label + ": the sample total overflows 64 bits");
    total = *sum;
    index.shards.push_back(std::move(info));
  }
  if (total != index.samples) {  // I9
    return Corruption(w + ": \"samples\" is " + std::to_string(index.samples) + " but the shards hold " +
                      std::to_string(total));
  }
  if (auto m = j.find("metadata"); m != j.end() && !m->is_null()) {  // I10
    if (!m->is_object()) return Corruption(w + ": \"metadata\" is not an object");
    index.metadata_json = Dump(*m);
    Status s = tensorsafe::internal::ValidateJsonObject(index.metadata_json, limits.max_json_depth);
    if (!s.ok())
      return Status(s.code() == StatusCode::kLimitExceeded ? s.code() : StatusCode::kCorruption,
                    w + ": \"metadata\": " + s.message());
  }
  return index;
}

std::string EncodeIndex(const DatasetIndex& index) {
  // One shard per line keeps diffs and `head` readable for big datasets.
  std::string out = "{\"format\": " + json(std::string(kIndexFormatName)).dump() +
                    ",\n \"version\": " + std::to_string(kIndexVersion) +
                    ",\n \"samples\": " + std::to_string(index.samples) +
                    ",\n \"schema\": " + SchemaToJson(index.schema) + ",\n \"shards\": [";
  for (std::size_t s = 0; s < index.shards.size(); ++s) {
    const ShardInfo& sh = index.shards[s];
    json o = StoredFileJson(sh.name, sh.samples, true, sh.bytes, sh.xxh3);
    if (sh.zstd) o["zstd"] = StoredFileJson(sh.zstd->name, 0, false, sh.zstd->bytes, sh.zstd->xxh3);
    out += s ? ",\n  " : "\n  ";
    out += Dump(o);
  }
  out += index.shards.empty() ? "]" : "\n ]";
  if (!index.metadata_json.empty()) {
    json m = json::parse(index.metadata_json, nullptr, false);
    out += ",\n \"metadata\": " + (m.is_discarded() ? std::string("{}") : Dump(m));
  }
  out += "}\n";
  return out;
}

Result<DatasetIndex> ReadIndexFile(const std::string& dir, const IndexLimits& limits) {
  const std::string path = (fs::path(dir) / kIndexFileName).string();
  auto* env = Env::Default();
  TS_ASSIGN_OR_RETURN(auto file, env->OpenRead(path));
  if (file->size() > limits.max_index_bytes) {
    return LimitExceeded(path + ": index of " + std::to_string(file->size()) + " bytes exceeds the limit " +
                         std::to_string(limits.max_index_bytes));
  }
  std::string text(file->size(), '\0');
  TS_RETURN_IF_ERROR(file->ReadAt(0, std::as_writable_bytes(std::span(text.data(), text.size()))));
  return ParseIndex(text, path, limits);
}

Status WriteIndexFile(const std::string& dir, const DatasetIndex& index, bool sync) {
  const std::string path = (fs::path(dir) / kIndexFileName).string();
  const std::string text = EncodeIndex(index);
  return tensorsafe::internal::WriteFileAtomically(path, std::as_bytes(std::span(text)), sync);
}

namespace internal {

Result<std::string> ContainedRealPath(const std::string& root_real, const std::string& path, std::string_view what) {
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (ec) return IOError(std::string(what) + ": " + path + ": " + ec.message(), ec.value());
  fs::path rel = real.lexically_relative(root_real);
  if (rel.empty() || *rel.begin() == "..") {
    return Corruption(std::string(what) + ": " + path + " resolves to " + real.string() +
                      ", outside the dataset directory " + root_real);
  }
  return real.string();
}

}  // namespace internal

Result<DatasetIndex> Merge(const std::string& out_dir, const std::vector<std::string>& parts,
                           const MergeOptions& options) {
  if (parts.empty()) return InvalidArgument("merge: no parts given");
  std::error_code ec;
  fs::path root = fs::canonical(out_dir, ec);
  if (ec) return IOError("merge: " + out_dir + ": " + ec.message(), ec.value());
  const std::string index_path = (root / kIndexFileName).string();
  if (!options.overwrite && fs::exists(index_path)) {
    return FailedPrecondition("merge: " + index_path + " already exists (pass overwrite to replace it)");
  }
  if (!options.metadata_json.empty()) {
    Status s = tensorsafe::internal::ValidateJsonObject(options.metadata_json, 64);
    if (!s.ok()) return InvalidArgument("merge: metadata: " + s.message());
  }
  DatasetIndex merged;
  merged.metadata_json = options.metadata_json;
  std::set<std::string> seen;
  std::string first_part;
  for (const std::string& part : parts) {
    fs::path p = fs::path(part).is_absolute() ? fs::path(part) : root / part;
    fs::path real = fs::canonical(p, ec);
    if (ec) return IOError("merge: part " + part + ": " + ec.message(), ec.value());
    fs::path rel = real.lexically_relative(root);
    if (rel.empty() || rel == "." || *rel.begin() == "..") {
      return InvalidArgument("merge: part " + part + " resolves to " + real.string() +
                             ", which is not a subdirectory of " + root.string());
    }
    const std::string rel_s = rel.generic_string();
    if (!seen.insert(rel_s).second) return InvalidArgument("merge: part " + rel_s + " is listed twice");
    TS_ASSIGN_OR_RETURN(DatasetIndex idx, ReadIndexFile(real.string()));
    if (first_part.empty()) {
      merged.schema = idx.schema;
      first_part = rel_s;
    } else {
      std::string why;
      if (!SameSchema(merged.schema, idx.schema, &why)) {
        return FailedPrecondition("merge: the schema of part " + rel_s + " differs from that of part " + first_part +
                                  ": " + why);
      }
    }
    for (ShardInfo& sh : idx.shards) {
      // Every stored file must exist inside the dataset, symlinks included.
      for (std::string* name : {&sh.name, sh.zstd ? &sh.zstd->name : nullptr}) {
        if (name == nullptr) continue;
        const std::string joined = rel_s + "/" + *name;
        TS_RETURN_IF_ERROR(ValidateShardName(joined, "merge: part " + rel_s));
        if (!(sh.zstd && name == &sh.name)) {  // a compressed shard's raw file may be absent
          auto contained = internal::ContainedRealPath(root.string(), (root / joined).string(), "merge: part " + rel_s);
          if (!contained.ok()) {
            return Status(contained.status().code() == StatusCode::kCorruption ? StatusCode::kInvalidArgument
                                                                               : contained.status().code(),
                          contained.status().message(), contained.status().error_number());
          }
        }
        *name = joined;
      }
      auto sum = tensorsafe::internal::CheckedAdd(merged.samples, sh.samples);
      if (!sum) return InvalidArgument("merge: the sample total overflows 64 bits");
      merged.samples = *sum;
      merged.shards.push_back(std::move(sh));
    }
  }
  TS_RETURN_IF_ERROR(WriteIndexFile(root.string(), merged, options.sync));
  return merged;
}

}  // namespace tensorsafe::dataset
