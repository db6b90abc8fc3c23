// WebDataset tar shards as dataset::ShardSource (docs/formats/wds.md).
#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataset/sources/wds/internal.h"
#include "tensorsafe/dataset/wds.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/tenbin.h"
#include "util/text.h"

namespace tensorsafe::wds {
namespace {

using internal::IsMetaMember;
using internal::Member;
using internal::ScanTar;
using internal::SplitKey;

using dataset::FieldKind;
using dataset::FieldSpec;
using dataset::FieldView;
using tensorsafe::internal::QuoteName;

enum class Decoder { kBytes, kStr, kInt, kJson, kTenbin, kNpy };

// webdataset.autodecode.decoders, by the text after the suffix's last dot.
// pickle, torch, msgpack, npz and cbor stay bytes: we decode no code-running
// or foreign container formats.
Decoder DecoderOf(std::string_view suffix) {
  std::string_view ext = suffix.substr(suffix.rfind('.') + 1);  // npos + 1 == 0
  if (ext == "txt" || ext == "text" || ext == "transcript") return Decoder::kStr;
  if (ext == "cls" || ext == "cls2" || ext == "index" || ext == "inx" || ext == "id") return Decoder::kInt;
  if (ext == "json" || ext == "jsn") return Decoder::kJson;
  if (ext == "ten" || ext == "tb" || ext == "tenbin") return Decoder::kTenbin;
  if (ext == "npy") return Decoder::kNpy;
  return Decoder::kBytes;
}

// Python's int(bytes): ASCII whitespace around, an optional sign, decimal
// digits with single underscores between them. int64 only.
bool ParseInt(std::string_view s, std::int64_t* out, std::string* why) {
  auto ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.front() == '_' || s.back() == '_') {
    *why = "not an integer";
    return false;
  }
  unsigned __int128 v = 0;
  char prev = 0;
  for (char c : s) {
    if (c == '_') {
      if (prev == '_') {
        *why = "not an integer";
        return false;
      }
    } else if (c >= '0' && c <= '9') {
      v = v * 10 + static_cast<unsigned>(c - '0');
      if (v > (static_cast<unsigned __int128>(1) << 63)) {
        *why = "integer outside int64";
        return false;
      }
    } else {
      *why = "not an integer";
      return false;
    }
    prev = c;
  }
  if (!neg && v > static_cast<unsigned __int128>(INT64_MAX)) {
    *why = "integer outside int64";
    return false;
  }
  *out = neg ? static_cast<std::int64_t>(-static_cast<__int128>(v)) : static_cast<std::int64_t>(v);
  return true;
}

// One decoded value of a sample, before it is placed under the schema.
struct Value {
  std::string name;
  FieldKind kind = FieldKind::kBytes;
  DType dtype = DType::kU8;
  Shape shape;
  const std::byte* ptr = nullptr;  // into the tar, or an owned buffer; resolved later for ints/keys
  std::uint64_t size = 0;
  std::int64_t int_value = 0;  // kInt
};

struct Entry {
  const std::byte* ptr = nullptr;
  std::uint64_t size = 0;
  std::uint32_t dims_off = 0;  // into dims_
};

class WdsShard final : public dataset::ShardSource {
 public:
  std::uint64_t num_samples() const override { return keys_.size(); }
  const dataset::Schema& schema() const override { return schema_; }

  Status Read(std::uint64_t i, std::vector<FieldView>& out) const override {
    if (i >= keys_.size()) {
      return OutOfRange(name_ + ": sample " + std::to_string(i) + " of " + std::to_string(keys_.size()));
    }
    if (auto it = errors_.find(i); it != errors_.end()) return it->second;
    const std::size_t nf = schema_.fields.size();
    out.resize(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      const Entry& e = entries_[i * nf + f];
      FieldView& v = out[f];
      v.spec = &schema_.fields[f];
      v.bytes = {e.ptr, e.size};
      const std::size_t rank = v.spec->kind == FieldKind::kTensor ? v.spec->shape.size() : 0;
      v.shape.assign(dims_.begin() + e.dims_off, dims_.begin() + e.dims_off + rank);
    }
    return Status::OK();
  }

  static Result<std::unique_ptr<dataset::ShardSource>> Open(std::span<const std::byte> tar,
                                                            std::shared_ptr<const void> owner, const std::string& name,
                                                            const ReadOptions& options);

 private:
  Status DecodeMember(const Member& m, std::string_view suffix, std::vector<Value>& values, const ReadOptions& options);

  std::string name_;
  std::span<const std::byte> tar_;
  std::shared_ptr<const void> owner_;
  dataset::Schema schema_;
  std::vector<std::string> keys_;
  std::vector<std::int64_t> ints_;
  std::vector<Entry> entries_;  // num_samples x fields
  std::vector<std::int64_t> dims_;
  std::vector<Tensor> owned_;  // decoded arrays that could not view the tar
  std::map<std::uint64_t, Status> errors_;
};

Status WdsShard::DecodeMember(const Member& m, std::string_view suffix, std::vector<Value>& values,
                              const ReadOptions& options) {
  std::span<const std::byte> data = tar_.subspan(m.offset, m.size);
  std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  const std::string what = "member " + QuoteName(m.path);
  Value v;
  v.name = std::string(suffix);
  v.ptr = data.data();
  v.size = data.size();
  switch (DecoderOf(suffix)) {
    case Decoder::kBytes: values.push_back(std::move(v)); return Status::OK();
    case Decoder::kStr:
    case Decoder::kJson:
      if (!tensorsafe::internal::IsValidUtf8(text)) return Corruption(what + ": text is not valid UTF-8");
      v.kind = DecoderOf(suffix) == Decoder::kStr ? FieldKind::kStr : FieldKind::kJson;
      values.push_back(std::move(v));
      return Status::OK();
    case Decoder::kInt: {
      std::string why;
      if (!ParseInt(text, &v.int_value, &why)) {
        return Corruption(what + ": " + why + ": " + QuoteName(text.substr(0, 40)));
      }
      v.kind = FieldKind::kInt;
      values.push_back(std::move(v));
      return Status::OK();
    }
    case Decoder::kTenbin:
    case Decoder::kNpy: {
      TensorSet set;
      if (DecoderOf(suffix) == Decoder::kTenbin) {
        tenbin::ReadOptions ro;
        ro.limits.max_rank = options.max_rank;
        ro.limits.max_tensor_count = options.max_arrays_per_member;
        TS_ASSIGN_OR_RETURN(set, tenbin::Decode(data, owner_, m.path, ro));
      } else {
        npy::ReadOptions ro;
        ro.max_rank = options.max_rank;
        TS_ASSIGN_OR_RETURN(set, npy::Decode(data, owner_, m.path, ro));
      }
      const std::size_t k = set.tensors.size();
      for (std::size_t j = 0; j < k; ++j) {
        Tensor& t = set.tensors[j];
        Value a;
        // One field per array: "x.ten" for a single array, "x.ten[0]", ... for several.
        a.name = k == 1 ? std::string(suffix) : std::string(suffix) + "[" + std::to_string(j) + "]";
        a.kind = FieldKind::kTensor;
        a.dtype = t.info.dtype;
        a.shape = t.info.shape;
        a.ptr = t.data.data();
        a.size = t.data.size();
        const bool inside = t.data.data() >= tar_.data() && t.data.data() + t.data.size() <= tar_.data() + tar_.size();
        if (!inside) owned_.push_back(std::move(t));  // byte-swapped or transposed: keep it
        values.push_back(std::move(a));
      }
      return Status::OK();
    }
  }
  return Internal("unreachable");
}

Result<std::unique_ptr<dataset::ShardSource>> WdsShard::Open(std::span<const std::byte> tar,
                                                             std::shared_ptr<const void> owner, const std::string& name,
                                                             const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<Member> members, ScanTar(tar, name, options));
  auto s = std::make_unique<WdsShard>();
  s->name_ = name;
  s->tar_ = tar;
  s->owner_ = std::move(owner);

  // Group adjacent members by key (tariterators.group_by_keys).
  struct Raw {
    std::string key;
    std::vector<std::pair<std::string, const Member*>> members;  // lower-cased suffix
  };
  std::vector<Raw> samples;
  for (const Member& m : members) {
    if (IsMetaMember(m.path)) continue;
    std::string_view key, suffix;
    if (!SplitKey(m.path, &key, &suffix)) continue;
    std::string lower(suffix);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (samples.empty() || samples.back().key != key) samples.push_back({std::string(key), {}});
    Raw& r = samples.back();
    for (const auto& [sfx, _] : r.members) {
      if (sfx == lower) {
        return Corruption(name + ": member " + QuoteName(m.path) + ": duplicate suffix " + QuoteName(lower) +
                          " in sample " + QuoteName(r.key) + " (sample " + std::to_string(samples.size() - 1) + ")");
      }
    }
    if (r.members.size() >= options.max_fields) {
      return LimitExceeded(name + ": sample " + QuoteName(r.key) + " has more than " +
                           std::to_string(options.max_fields) + " members");
    }
    r.members.emplace_back(std::move(lower), &m);
  }

  // Decode every sample; the first that decodes fixes the schema.
  std::vector<std::vector<Value>> decoded(samples.size());
  std::vector<Status> status(samples.size());
  std::size_t schema_from = samples.size();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    for (const auto& [suffix, m] : samples[i].members) {
      Status st = s->DecodeMember(*m, suffix, decoded[i], options);
      if (!st.ok()) {
        status[i] = st.WithContext(name + ": sample " + std::to_string(i) + " (key " + QuoteName(samples[i].key) + ")");
        break;
      }
    }
    if (status[i].ok() && schema_from == samples.size()) schema_from = i;
  }
  if (options.key_field) s->schema_.fields.push_back({"__key__", FieldKind::kStr, DType::kU8, {}});
  const std::size_t first_value_field = s->schema_.fields.size();
  if (schema_from < samples.size()) {
    for (const Value& v : decoded[schema_from]) {
      FieldSpec f;
      f.name = v.name;
      f.kind = v.kind;
      if (v.kind == FieldKind::kTensor) {
        f.dtype = v.dtype;
        for (std::uint64_t d : v.shape) f.shape.push_back(static_cast<std::int64_t>(d));
      }
      s->schema_.fields.push_back(std::move(f));
    }
  }
  const std::size_t nf = s->schema_.fields.size();

  // Place each sample's values under the schema.
  s->keys_.reserve(samples.size());
  s->entries_.resize(samples.size() * nf);
  std::vector<std::size_t> int_slot(samples.size() * nf, SIZE_MAX);
  std::string fields_text;
  for (std::size_t f = first_value_field; f < nf; ++f) {
    fields_text += (f > first_value_field ? ", " : "") + s->schema_.fields[f].name;
  }
  for (std::size_t i = 0; i < samples.size(); ++i) {
    s->keys_.push_back(samples[i].key);
    const std::string ctx = name + ": sample " + std::to_string(i) + " (key " + QuoteName(samples[i].key) + "): ";
    if (status[i].ok() && decoded[i].size() != nf - first_value_field) {
      std::string have;
      for (const Value& v : decoded[i]) have += (have.empty() ? "" : ", ") + v.name;
      status[i] = Unsupported(ctx + "fields {" + have + "} differ from the shard's {" + fields_text +
                              "} (fixed by sample " + std::to_string(schema_from) + ")");
    }
    for (std::size_t j = 0; status[i].ok() && j < decoded[i].size(); ++j) {
      const Value& v = decoded[i][j];
      const FieldSpec* spec = s->schema_.Find(v.name);
      if (spec == nullptr || spec->kind != v.kind) {
        status[i] = Unsupported(ctx + "field " + QuoteName(v.name) + " is not among the shard's {" + fields_text + "}");
        break;
      }
      const std::size_t f = static_cast<std::size_t>(spec - s->schema_.fields.data());
      Entry& e = s->entries_[i * nf + f];
      e.ptr = v.ptr;
      e.size = v.size;
      if (v.kind == FieldKind::kInt) {
        int_slot[i * nf + f] = s->ints_.size();
        s->ints_.push_back(v.int_value);
      }
      if (v.kind == FieldKind::kTensor) {
        FieldSpec& fs = s->schema_.fields[f];
        if (v.dtype != fs.dtype || v.shape.size() != fs.shape.size()) {
          status[i] = Unsupported(ctx + "field " + QuoteName(v.name) + " is " + std::string(DTypeName(v.dtype)) + " " +
                                  ShapeToString(v.shape) + ", the shard's field is " +
                                  std::string(DTypeName(fs.dtype)) + " of rank " + std::to_string(fs.shape.size()));
          break;
        }
        e.dims_off = static_cast<std::uint32_t>(s->dims_.size());
        for (std::size_t d = 0; d < v.shape.size(); ++d) {
          const auto dim = static_cast<std::int64_t>(v.shape[d]);
          s->dims_.push_back(dim);
          if (fs.shape[d] != dim) fs.shape[d] = dataset::kAnyDim;
        }
      }
    }
    if (!status[i].ok()) s->errors_.emplace(i, status[i]);
  }
  // Keys and ints live in vectors that no longer grow: point into them.
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (options.key_field) {
      Entry& e = s->entries_[i * nf];
      e.ptr = reinterpret_cast<const std::byte*>(s->keys_[i].data());
      e.size = s->keys_[i].size();
    }
    for (std::size_t f = 0; f < nf; ++f) {
      if (int_slot[i * nf + f] != SIZE_MAX) {
        s->entries_[i * nf + f].ptr = reinterpret_cast<const std::byte*>(&s->ints_[int_slot[i * nf + f]]);
        s->entries_[i * nf + f].size = 8;
      }
    }
  }
  return std::unique_ptr<dataset::ShardSource>(std::move(s));
}

}  // namespace

Result<std::unique_ptr<dataset::ShardSource>> OpenShardBytes(std::span<const std::byte> tar,
                                                             std::shared_ptr<const void> owner,
                                                             const std::string& display_name,
                                                             const ReadOptions& options) {
  return WdsShard::Open(tar, std::move(owner), display_name, options);
}

Result<std::unique_ptr<dataset::ShardSource>> OpenShard(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(auto region, tensorsafe::Env::Default()->Map(path));
  auto bytes = region->bytes();
  return WdsShard::Open(bytes, std::shared_ptr<const void>(std::move(region)), path, options);
}

}  // namespace tensorsafe::wds
