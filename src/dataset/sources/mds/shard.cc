// MDS shard files as dataset::ShardSource (docs/formats/mds.md, "Shard file").
#include <simdjson.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataset/sources/mds/internal.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/env.h"
#include "tensorsafe/tensor.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::mds {
namespace {

using dataset::FieldKind;
using dataset::FieldSpec;
using dataset::FieldView;
using internal::FieldOf;
using tensorsafe::internal::Load32;
using tensorsafe::internal::Load64;
using tensorsafe::internal::QuoteName;

// The encoded prefix of an ndarray value: dtype and shape, where the column
// does not fix them (encodings.py NDArray: [dtype u8] [(ndim << 2) | code u8,
// dims as uint8/16/32/64]).
struct NdPrefix {
  DType dtype = DType::kU8;
  std::uint32_t rank = 0;
  std::size_t header = 0;      // prefix bytes
  std::int64_t dims[64] = {};  // rank <= 63 (6 bits)
};

Status ParseNdPrefix(const Column& col, std::span<const std::byte> v, NdPrefix* p) {
  std::size_t pos = 0;
  if (col.dtype_fixed) {
    p->dtype = col.dtype;
  } else {
    if (v.size() < 1) return Corruption("no dtype byte");
    std::uint8_t code = static_cast<std::uint8_t>(v[0]);
    if (!internal::DTypeOfNdarrayCode(code, &p->dtype)) {
      return Corruption("unknown ndarray dtype code " + std::to_string(code));
    }
    pos = 1;
  }
  if (col.shape_fixed) {
    p->rank = static_cast<std::uint32_t>(col.shape.size());
    for (std::uint32_t i = 0; i < p->rank; ++i) p->dims[i] = col.shape[i];
  } else {
    if (v.size() < pos + 1) return Corruption("no shape byte");
    std::uint8_t b = static_cast<std::uint8_t>(v[pos++]);
    p->rank = b >> 2;
    std::size_t width = std::size_t{1} << (b & 3);
    if (v.size() - pos < p->rank * width) {
      return Corruption("shape of rank " + std::to_string(p->rank) + " needs " + std::to_string(p->rank * width) +
                        " bytes, " + std::to_string(v.size() - pos) + " remain");
    }
    for (std::uint32_t i = 0; i < p->rank; ++i) {
      const std::byte* d = v.data() + pos + i * width;
      std::uint64_t dim = width == 1   ? static_cast<std::uint8_t>(*d)
                          : width == 2 ? tensorsafe::internal::Load16(d)
                          : width == 4 ? Load32(d)
                                       : Load64(d);
      if (dim > (1ull << 62)) return Corruption("dim " + std::to_string(dim) + " too large");
      p->dims[i] = static_cast<std::int64_t>(dim);
    }
    pos += p->rank * width;
  }
  p->header = pos;
  return Status::OK();
}

class MdsShard final : public dataset::ShardSource {
 public:
  std::uint64_t num_samples() const override { return n_; }
  const dataset::Schema& schema() const override { return schema_; }

  Status Read(std::uint64_t i, std::vector<FieldView>& out) const override {
    if (i >= n_) {
      return OutOfRange(name_ + ": sample " + std::to_string(i) + " of " + std::to_string(n_));
    }
    auto bytes = region_->bytes();
    std::uint32_t begin = Load32(bytes.data() + 4 + 4 * i);
    std::uint32_t end = Load32(bytes.data() + 8 + 4 * i);  // begin <= end <= size: checked at open
    std::span<const std::byte> sample = bytes.subspan(begin, end - begin);
    out.resize(columns_.size());
    std::uint64_t pos = 4ull * num_var_;  // sample size >= this: checked at open
    std::uint64_t var_seen = 0;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const Column& col = columns_[c];
      std::uint64_t size;
      if (col.size >= 0) {
        size = static_cast<std::uint64_t>(col.size);
      } else {
        size = Load32(sample.data() + 4 * var_seen++);
      }
      if (!tensorsafe::internal::RangeWithin(pos, size, sample.size())) {
        return Corruption(Where(i, c) + "value of " + std::to_string(size) + " bytes at " + std::to_string(pos) +
                          " runs past the sample's " + std::to_string(sample.size()) + " bytes");
      }
      std::span<const std::byte> v = sample.subspan(pos, size);
      pos += size;
      FieldView& f = out[c];
      f.spec = &schema_.fields[c];
      f.shape.clear();
      switch (col.codec) {
        case ColumnCodec::kStr:
        case ColumnCodec::kJson:
          if (!tensorsafe::internal::IsValidUtf8({reinterpret_cast<const char*>(v.data()), v.size()})) {
            return Corruption(Where(i, c) + "text is not valid UTF-8");
          }
          f.bytes = v;
          break;
        case ColumnCodec::kBytes:
        case ColumnCodec::kInt:
        case ColumnCodec::kScalar: f.bytes = v; break;
        case ColumnCodec::kNdarray: {
          NdPrefix p;
          if (Status s = ParseNdPrefix(col, v, &p); !s.ok()) return Status(s.code(), Where(i, c) + s.message());
          const FieldSpec& spec = schema_.fields[c];
          if (p.dtype != spec.dtype || p.rank != spec.shape.size()) {
            return Unsupported(Where(i, c) + "ndarray of " + std::string(DTypeName(p.dtype)) + " rank " +
                               std::to_string(p.rank) + ", but the shard's field is " +
                               std::string(DTypeName(spec.dtype)) + " rank " + std::to_string(spec.shape.size()) +
                               " (fixed by sample 0; a field has one dtype and rank)");
          }
          Shape shape(p.dims, p.dims + p.rank);
          auto want = DenseByteSize(p.dtype, shape);
          std::uint64_t have = v.size() - p.header;
          if (!want.ok() || *want != have) {
            return Corruption(Where(i, c) + "ndarray " + std::string(DTypeName(p.dtype)) + " " + ShapeToString(shape) +
                              " needs " + (want.ok() ? std::to_string(*want) : std::string("too many")) +
                              " bytes, the value holds " + std::to_string(have));
          }
          f.shape.assign(p.dims, p.dims + p.rank);
          f.bytes = v.subspan(p.header);
          break;
        }
      }
    }
    if (pos != sample.size()) {
      return Corruption(name_ + ": sample " + std::to_string(i) + ": columns fill " + std::to_string(pos) + " of its " +
                        std::to_string(sample.size()) + " bytes");
    }
    return Status::OK();
  }

  // The index's xxh* hashes of the mapped raw shard (whichever copy was
  // opened: in the dataset directory or the cache), and of the zip with its
  // size when it is in the dataset directory (StreamingDataset may have
  // deleted it after decompressing), then every sample.
  Status VerifyData() const override {
    const std::string what = file_ + " (raw_data " + QuoteName(raw_.basename) + ")";
    TS_RETURN_IF_ERROR(internal::VerifyHashes(raw_, region_->bytes(), what));
    if (!zip_path_.empty() && std::filesystem::is_regular_file(std::filesystem::symlink_status(zip_path_))) {
      TS_ASSIGN_OR_RETURN(auto zip, tensorsafe::Env::Default()->Map(zip_path_));
      if (zip->bytes().size() != zip_.bytes) {
        return Corruption(zip_path_ + ": " + std::to_string(zip->bytes().size()) + " bytes, the index says " +
                          std::to_string(zip_.bytes));
      }
      TS_RETURN_IF_ERROR(internal::VerifyHashes(zip_, zip->bytes(), zip_path_));
    }
    return ShardSource::VerifyData();
  }

  // `display` names the shard in messages (default: `file`).
  static Result<std::unique_ptr<MdsShard>> Open(const std::string& file, const ShardEntry& info, const Limits& limits,
                                                const std::string& display = {});
  // The compressed shard this one came from (OpenShard), for VerifyData.
  void set_zip(std::string path, FileRef ref) {
    zip_path_ = std::move(path);
    zip_ = std::move(ref);
  }

 private:
  std::string Where(std::uint64_t i, std::size_t c) const {
    return name_ + ": sample " + std::to_string(i) + " column " + QuoteName(columns_[c].name) + ": ";
  }

  std::string name_;  // in messages
  std::string file_;  // the mapped file (a cache file when decompressed)
  std::shared_ptr<tensorsafe::MappedRegion> region_;
  FileRef raw_;
  std::string zip_path_;  // empty: not compressed
  FileRef zip_;
  std::vector<Column> columns_;
  dataset::Schema schema_;
  std::uint64_t n_ = 0;
  std::uint64_t num_var_ = 0;
};

// The shard's config must describe the same columns as the index entry.
Status CheckConfig(std::span<const std::byte> config, const ShardEntry& info, const Limits& limits,
                   const std::string& name) {
  namespace dom = simdjson::dom;
  dom::parser parser;
  if (parser.allocate(config.size() + 64, limits.max_json_depth)) return Internal(name + ": parser");
  dom::element doc;
  if (auto err = parser.parse(reinterpret_cast<const char*>(config.data()), config.size(), true).get(doc)) {
    return Corruption(name + ": config of " + std::to_string(config.size()) +
                      " bytes is not JSON: " + simdjson::error_message(err));
  }
  dom::array enc, names, sizes;
  if (doc["column_encodings"].get_array().get(enc) || doc["column_names"].get_array().get(names) ||
      doc["column_sizes"].get_array().get(sizes) || enc.size() != info.columns.size() ||
      names.size() != info.columns.size() || sizes.size() != info.columns.size()) {
    return Corruption(name + ": config's columns disagree with the index");
  }
  for (std::size_t c = 0; c < info.columns.size(); ++c) {
    const Column& col = info.columns[c];
    std::string_view e, n;
    std::uint64_t s = 0;
    bool size_ok = col.size < 0 ? sizes.at(c).is_null()
                                : (!sizes.at(c).get_uint64().get(s) && s == static_cast<std::uint64_t>(col.size));
    if (enc.at(c).get_string().get(e) || names.at(c).get_string().get(n) || e != col.encoding || n != col.name ||
        !size_ok) {
      return Corruption(name + ": config column " + std::to_string(c) + " disagrees with the index's " +
                        QuoteName(col.name) + " (" + col.encoding + ")");
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<MdsShard>> MdsShard::Open(const std::string& file, const ShardEntry& info, const Limits& limits,
                                                 const std::string& display) {
  const std::string& path = display.empty() ? file : display;
  auto* env = tensorsafe::Env::Default();
  TS_ASSIGN_OR_RETURN(auto region, env->Map(file));
  auto bytes = region->bytes();
  const std::uint64_t size = bytes.size();
  if (size != info.raw.bytes) {
    return Corruption(path + ": " + std::to_string(size) + " bytes, the index says " + std::to_string(info.raw.bytes));
  }
  if (size > limits.max_shard_bytes || size > 0xFFFFFFFFull) {
    return LimitExceeded(path + ": " + std::to_string(size) + " bytes exceed the shard limit");
  }
  if (size < 4) return Corruption(path + ": " + std::to_string(size) + " bytes, too short for the sample count");
  const std::uint64_t n = Load32(bytes.data());
  if (n != info.samples) {
    return Corruption(path + ": holds " + std::to_string(n) + " samples, the index says " +
                      std::to_string(info.samples));
  }
  const std::uint64_t table_end = 4 + 4 * (n + 1);
  if (table_end > size) {
    return Corruption(path + ": offset table of " + std::to_string(n + 1) + " entries ends at " +
                      std::to_string(table_end) + ", past the file's " + std::to_string(size) + " bytes");
  }
  auto s = std::make_unique<MdsShard>();
  s->name_ = path;
  s->file_ = file;
  s->raw_ = info.raw;
  s->columns_ = info.columns;
  s->n_ = n;
  std::uint64_t fixed = 0;
  for (const Column& c : info.columns) {
    if (c.size < 0) {
      ++s->num_var_;
    } else {
      auto sum = tensorsafe::internal::CheckedAdd(fixed, static_cast<std::uint64_t>(c.size));
      if (!sum || *sum > size) {
        return Corruption(path + ": fixed-size columns need more bytes per sample than the file has");
      }
      fixed = *sum;
    }
  }
  const std::uint64_t min_sample = fixed + 4 * s->num_var_;
  std::uint64_t prev = Load32(bytes.data() + 4);
  if (prev < table_end) {
    return Corruption(path + ": offsets[0] = " + std::to_string(prev) + " is inside the offset table (ends at " +
                      std::to_string(table_end) + ")");
  }
  if (prev > size) {
    return Corruption(path + ": offsets[0] = " + std::to_string(prev) + " is past the file's " + std::to_string(size) +
                      " bytes");
  }
  TS_RETURN_IF_ERROR(CheckConfig(bytes.subspan(table_end, prev - table_end), info, limits, path));
  for (std::uint64_t i = 1; i <= n; ++i) {
    std::uint64_t off = Load32(bytes.data() + 4 + 4 * i);
    if (off < prev) {
      return Corruption(path + ": offsets[" + std::to_string(i) + "] = " + std::to_string(off) + " is below offsets[" +
                        std::to_string(i - 1) + "] = " + std::to_string(prev));
    }
    if (off > size) {
      return Corruption(path + ": offsets[" + std::to_string(i) + "] = " + std::to_string(off) +
                        " is past the file's " + std::to_string(size) + " bytes");
    }
    if (off - prev < min_sample) {
      return Corruption(path + ": sample " + std::to_string(i - 1) + " has " + std::to_string(off - prev) +
                        " bytes, its columns need at least " + std::to_string(min_sample));
    }
    prev = off;
  }
  if (prev != size) {
    return Corruption(path + ": offsets[" + std::to_string(n) + "] = " + std::to_string(prev) +
                      " is not the file size " + std::to_string(size));
  }
  // The schema; dynamic ndarray columns take dtype and rank from sample 0.
  std::uint64_t first = n ? Load32(bytes.data() + 4) : 0;
  std::uint64_t pos = first + 4 * s->num_var_;
  std::uint64_t var_seen = 0;
  const std::uint64_t first_end = n ? Load32(bytes.data() + 8) : 0;
  for (const Column& c : info.columns) {
    std::span<const std::byte> v;
    if (n) {
      std::uint64_t len =
          c.size >= 0 ? static_cast<std::uint64_t>(c.size) : Load32(bytes.data() + first + 4 * var_seen++);
      if (!tensorsafe::internal::RangeWithin(pos, len, first_end)) {
        return Corruption(path + ": sample 0 column " + QuoteName(c.name) + ": value of " + std::to_string(len) +
                          " bytes runs past the sample");
      }
      v = bytes.subspan(pos, len);
      pos += len;
    }
    auto spec = FieldOf(c, v);
    if (!spec.ok()) return spec.status().WithContext(path + ": sample 0 column " + QuoteName(c.name));
    s->schema_.fields.push_back(std::move(*spec));
  }
  s->region_ = std::move(region);
  return s;
}

}  // namespace

Result<dataset::FieldSpec> internal::FieldOf(const Column& column, std::span<const std::byte> first) {
  FieldSpec f;
  f.name = column.name;
  switch (column.codec) {
    case ColumnCodec::kBytes: f.kind = FieldKind::kBytes; break;
    case ColumnCodec::kStr: f.kind = FieldKind::kStr; break;
    case ColumnCodec::kJson: f.kind = FieldKind::kJson; break;
    case ColumnCodec::kInt: f.kind = FieldKind::kInt; break;
    case ColumnCodec::kScalar:
      f.kind = FieldKind::kTensor;
      f.dtype = column.dtype;
      break;
    case ColumnCodec::kNdarray: {
      f.kind = FieldKind::kTensor;
      f.dtype = column.dtype;
      if (column.shape_fixed) {
        f.shape = column.shape;
        break;
      }
      if (first.empty() && !(column.dtype_fixed && column.shape_fixed)) {
        // No sample to learn from (an empty shard): nothing is ever read.
        break;
      }
      NdPrefix p;
      TS_RETURN_IF_ERROR(ParseNdPrefix(column, first, &p));
      f.dtype = p.dtype;
      f.shape.assign(p.rank, dataset::kAnyDim);
      break;
    }
  }
  return f;
}

Result<std::unique_ptr<dataset::ShardSource>> OpenShardFile(const std::string& path, const ShardEntry& info,
                                                            const Limits& limits) {
  TS_ASSIGN_OR_RETURN(auto shard, MdsShard::Open(path, info, limits));
  return std::unique_ptr<dataset::ShardSource>(std::move(shard));
}

Result<std::unique_ptr<dataset::ShardSource>> OpenShard(const Index& dataset, std::size_t index,
                                                        const ShardOptions& options) {
  if (index >= dataset.shards.size()) {
    return OutOfRange(dataset.root + ": shard " + std::to_string(index) + " of " +
                      std::to_string(dataset.shards.size()));
  }
  const ShardEntry& info = dataset.shards[index];
  TS_ASSIGN_OR_RETURN(std::string path, internal::EnsureRawShard(dataset, info, options));
  // A shard decompressed into the cache has a name the user never gave
  // (raw-xxh64-...-466.mds): messages name the .zstd file it came from too.
  std::string display;
  if (info.compressed && path != dataset.root + "/" + info.raw.basename) {
    display = dataset.root + "/" + info.zip.basename + " (decompressed as " + path + ")";
  }
  TS_ASSIGN_OR_RETURN(auto shard, MdsShard::Open(path, info, options.limits, display));
  if (info.compressed) shard->set_zip(dataset.root + "/" + info.zip.basename, info.zip);
  return std::unique_ptr<dataset::ShardSource>(std::move(shard));
}

}  // namespace tensorsafe::mds
