// The safetensors writer: the same bytes as the reference writer
// (docs/formats/safetensors.md, "Writer rules").
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/safetensors/internal.h"
#include "io/atomic_file.h"
#include "tensorsafe/formats/safetensors.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::safetensors {
namespace {

namespace sj = simdjson::ondemand;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::QuoteName;

using tensorsafe::internal::Str;

struct Plan {
  std::string header;                // the 8-byte length and the padded JSON
  std::vector<const Tensor*> order;  // data order
  std::uint64_t data_bytes = 0;
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// TensorSet::metadata_json must be "" or an object whose values are all
// strings: anything else is refused, never stringified.
Result<std::optional<KeyValues>> ParseMetadataArg(const std::string& json) {
  if (json.empty()) return std::optional<KeyValues>();
  const simdjson::padded_string padded(json);
  sj::parser parser;
  sj::document doc;
  auto bad = [](simdjson::error_code e) {
    return InvalidArgument(std::string("metadata_json is not valid JSON: ") + simdjson::error_message(e));
  };
  if (auto e = parser.iterate(padded).get(doc)) return bad(e);
  sj::json_type t;
  if (auto e = doc.type().get(t)) return bad(e);
  if (t != sj::json_type::object) {
    return InvalidArgument("metadata_json must be a JSON object of strings for safetensors");
  }
  sj::object obj;
  if (auto e = doc.get_object().get(obj)) return bad(e);
  KeyValues kv;
  for (auto field_result : obj) {
    sj::field field;
    if (auto e = std::move(field_result).get(field)) return bad(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return bad(e);
    sj::json_type vt;
    if (auto e = field.value().type().get(vt)) return bad(e);
    if (vt != sj::json_type::string) {
      return InvalidArgument("metadata_json: the value of " + QuoteName(key) +
                             " is not a string; safetensors metadata maps strings to strings "
                             "(convert the value to a string yourself)");
    }
    std::string_view value;
    if (auto e = field.value().get_string().get(value)) return bad(e);
    kv.emplace_back(std::string(key), std::string(value));
  }
  const char* loc = nullptr;
  if (!doc.current_location().get(loc)) {
    return InvalidArgument("metadata_json has trailing characters after the object");
  }
  std::vector<std::string_view> keys;
  for (const auto& p : kv) keys.push_back(p.first);
  std::sort(keys.begin(), keys.end());
  if (auto d = std::adjacent_find(keys.begin(), keys.end()); d != keys.end()) {
    return InvalidArgument("metadata_json has the key " + QuoteName(*d) + " twice");
  }
  return std::optional<KeyValues>(std::move(kv));
}

// Checks one tensor and returns its dtype rank.
Result<int> CheckTensor(const Tensor& t) {
  const TensorInfo& info = t.info;
  auto where = [&] { return "tensor " + QuoteName(info.name) + ": "; };  // errors only
  if (!tensorsafe::internal::IsValidUtf8(info.name)) {
    return InvalidArgument(where() + "the name is not valid UTF-8");
  }
  if (info.name == "__metadata__") {
    return InvalidArgument(where() + "the name is reserved for the file metadata");
  }
  const int rank = internal::RankOfDType(info.dtype);
  if (rank < 0) {
    return Unsupported(where() + "dtype " + std::string(DTypeName(info.dtype)) +
                       " has no safetensors equivalent (the format lacks c128, i4 and u4)");
  }
  if (info.layout != Layout::kDense) {
    return Unsupported(where() + "safetensors stores dense tensors only");
  }
  if (!info.metadata_json.empty() && info.metadata_json != "{}") {
    return Unsupported(where() +
                       "safetensors has no per-tensor metadata; clear metadata_json "
                       "(or move it into the file metadata) to write this set");
  }
  const internal::StDType& st = internal::StDTypeAt(rank);
  std::optional<std::uint64_t> bits = 1;
  for (std::uint64_t d : info.shape) {
    bits = CheckedMul(*bits, d);
    if (!bits) break;
  }
  if (bits) bits = CheckedMul(*bits, st.bits);
  if (!bits) return InvalidArgument(where() + "the size of shape " + ShapeToString(info.shape) + " overflows");
  if (*bits % 8 != 0) {
    return InvalidArgument(where() + std::string(st.name) + " " + ShapeToString(info.shape) + " takes " + Str(*bits) +
                           " bits, not a whole number of bytes");
  }
  if (t.data.size() != *bits / 8) {
    return InvalidArgument(where() + "data holds " + Str(t.data.size()) + " bytes, but " + std::string(st.name) + " " +
                           ShapeToString(info.shape) + " takes " + Str(*bits / 8));
  }
  return rank;
}

void AppendUint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

Result<Plan> MakePlan(const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(std::optional<KeyValues> metadata, ParseMetadataArg(set.metadata_json));
  // The crate's order: dtype rank descending (wider types first, so they
  // stay aligned), then name by bytes. Sorted as small contiguous keys (the
  // name's first 8 bytes as a big-endian integer decide most comparisons)
  // rather than through pointers to the tensors: for 100,000 tensors the
  // sort was a fifth of a save.
  struct Key {
    int rank;
    std::uint64_t head;  // the first 8 bytes of the name, big-endian, zero-padded
    std::string_view name;
    const Tensor* t;
  };
  std::vector<Key> ranked;
  ranked.reserve(set.tensors.size());
  for (const Tensor& t : set.tensors) {
    TS_ASSIGN_OR_RETURN(int rank, CheckTensor(t));
    const std::string_view name = t.info.name;
    std::uint64_t head = 0;
    for (std::size_t i = 0; i < 8; ++i) {
      head = (head << 8) | (i < name.size() ? static_cast<unsigned char>(name[i]) : 0u);
    }
    ranked.push_back({rank, head, name, &t});
  }
  {
    std::unordered_set<std::string_view> names;
    names.reserve(ranked.size());
    for (const Tensor& t : set.tensors) {
      if (!names.insert(t.info.name).second) {
        return InvalidArgument("tensor name " + QuoteName(t.info.name) + " appears twice");
      }
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Key& a, const Key& b) {
    if (a.rank != b.rank) return a.rank > b.rank;
    if (a.head != b.head) return a.head < b.head;  // the same order as the bytes'
    return a.name < b.name;
  });

  Plan plan;
  std::string& json = plan.header;
  json.assign(8, '\0');  // the length, filled in below
  json.push_back('{');
  bool first = true;
  if (metadata) {
    json += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata->size(); ++i) {
      if (i) json.push_back(',');
      internal::AppendJsonString(json, (*metadata)[i].first);
      json.push_back(':');
      internal::AppendJsonString(json, (*metadata)[i].second);
    }
    json.push_back('}');
    first = false;
  }
  std::uint64_t offset = 0;
  plan.order.reserve(ranked.size());
  for (const Key& k : ranked) {
    const Tensor* t = k.t;
    if (!first) json.push_back(',');
    first = false;
    internal::AppendJsonString(json, t->info.name);
    json += ":{\"dtype\":\"";
    json += internal::StDTypeAt(k.rank).name;
    json += "\",\"shape\":[";
    for (std::size_t i = 0; i < t->info.shape.size(); ++i) {
      if (i) json.push_back(',');
      AppendUint(json, t->info.shape[i]);
    }
    json += "],\"data_offsets\":[";
    AppendUint(json, offset);
    json.push_back(',');
    offset += t->data.size();  // sums of sizes of real buffers cannot overflow
    AppendUint(json, offset);
    json += "]}";
    plan.order.push_back(t);
  }
  json.push_back('}');
  // Spaces up to a multiple of 8, so the data starts 8-aligned.
  while (json.size() % 8 != 0) json.push_back(' ');
  const std::uint64_t n = json.size() - 8;
  if (n > options.max_header_bytes) {
    return LimitExceeded("safetensors header would be " + Str(n) + " bytes, over the limit of " +
                         Str(options.max_header_bytes));
  }
  tensorsafe::internal::Store64(reinterpret_cast<std::byte*>(json.data()), n);
  plan.data_bytes = offset;
  return plan;
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Tensors below this size are gathered in a buffer to save system calls;
// larger ones are written straight from their memory.
constexpr std::size_t kDirectWrite = std::size_t{64} << 10;
constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

Status WriteBody(tensorsafe::WritableFile& file, const Plan& plan) {
  TS_RETURN_IF_ERROR(file.Append(AsBytes(plan.header)));
  std::string buf;
  buf.reserve(kBufferBytes);
  for (const Tensor* t : plan.order) {
    if (t->data.size() >= kDirectWrite) {
      if (!buf.empty()) TS_RETURN_IF_ERROR(file.Append(AsBytes(buf)));
      buf.clear();
      TS_RETURN_IF_ERROR(file.Append(t->data));
      continue;
    }
    if (buf.size() + t->data.size() > kBufferBytes) {
      TS_RETURN_IF_ERROR(file.Append(AsBytes(buf)));
      buf.clear();
    }
    buf.append(reinterpret_cast<const char*>(t->data.data()), t->data.size());
  }
  if (!buf.empty()) TS_RETURN_IF_ERROR(file.Append(AsBytes(buf)));
  return Status::OK();
}

}  // namespace

Result<std::string> Encode(const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(Plan plan, MakePlan(set, options));
  std::string out = std::move(plan.header);
  out.reserve(out.size() + static_cast<std::size_t>(plan.data_bytes));
  for (const Tensor* t : plan.order) {
    out.append(reinterpret_cast<const char*>(t->data.data()), t->data.size());
  }
  return out;
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(Plan plan, MakePlan(set, options));
  return tensorsafe::internal::WriteAtomically(path, options.sync, options.env,
                                               [&](WritableFile& f) { return WriteBody(f, plan); });
}

}  // namespace tensorsafe::safetensors
