// DatasetWriter: buffers one shard's columns, writes it as a .tsafe file
// (DATASET.md §2, writer rules §7), optionally zstd-compresses it, and writes
// index.json last.
#include "tensorsafe/dataset/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "dataset/internal.h"
#include "dataset/remote/upload.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/dataset/shard.h"
#include "tensorsafe/env.h"
#include "tensorsafe/writer.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::dataset {

namespace fs = std::filesystem;
using tensorsafe::internal::QuoteName;

FieldValue FieldValue::Tensor(DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes) {
  FieldValue v;
  v.kind = FieldKind::kTensor;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.bytes = bytes;
  return v;
}
FieldValue FieldValue::Bytes(std::span<const std::byte> bytes) {
  FieldValue v;
  v.kind = FieldKind::kBytes;
  v.bytes = bytes;
  return v;
}
FieldValue FieldValue::Str(std::string_view text) {
  FieldValue v;
  v.kind = FieldKind::kStr;
  v.bytes = std::as_bytes(std::span(text.data(), text.size()));
  return v;
}
FieldValue FieldValue::Json(std::string_view text) {
  FieldValue v = Str(text);
  v.kind = FieldKind::kJson;
  return v;
}
FieldValue FieldValue::Int(std::int64_t x) {
  FieldValue v;
  v.kind = FieldKind::kInt;
  v.int_value = x;
  return v;
}
FieldValue FieldValue::Float(double x) {
  FieldValue v;
  v.kind = FieldKind::kFloat;
  v.float_value = x;
  return v;
}
FieldValue FieldValue::FromView(const FieldView& view) {
  FieldValue v;
  if (view.spec == nullptr) return v;
  v.kind = view.spec->kind;
  v.dtype = view.spec->dtype;
  v.shape = view.shape;
  v.bytes = view.bytes;
  if (v.kind == FieldKind::kInt && view.bytes.size() == 8) {
    v.int_value = static_cast<std::int64_t>(tensorsafe::internal::Load64(view.bytes.data()));
  }
  if (v.kind == FieldKind::kFloat && view.bytes.size() == 8)
    v.float_value = tensorsafe::internal::LoadLE<double>(view.bytes.data());
  return v;
}

namespace {

// One field's buffered column for the open shard.
struct ColumnBuf {
  bool fixed = false;
  std::uint64_t sample_bytes = 0;  // fixed
  std::uint64_t align = 1;         // variable tensors: element size
  std::vector<std::byte> data;     // fixed values, or variable data
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::int64_t> shapes;
};

void AppendBytes(std::vector<std::byte>& v, std::span<const std::byte> b) {
  if (!b.empty()) v.insert(v.end(), b.begin(), b.end());
}

}  // namespace

class DatasetWriter::Impl {
 public:
  std::string dir;      // where shards are built: the dataset, or the upload's staging directory
  std::string display;  // the dataset's location, for messages
  std::unique_ptr<internal::DatasetUploader> upload;  // an s3:// dataset
  DatasetWriterOptions opt;
  Schema schema;
  bool schema_fixed = false;
  std::vector<ColumnBuf> cols;
  std::unordered_map<std::string_view, std::size_t> by_name;  // for wide schemas
  std::vector<std::uint32_t> seen;                            // per field: sample stamp
  std::uint32_t stamp = 0;
  std::vector<const FieldValue*> slot;

  std::uint64_t samples = 0;        // written, all shards
  std::uint64_t shard_samples = 0;  // in the open shard
  std::uint64_t shard_payload = 0;  // bytes buffered for it
  std::uint64_t next_shard = 0;
  std::uint64_t stored_bytes = 0;
  std::vector<ShardInfo> shards;
  std::vector<std::string> written;  // files to remove on abandon
  bool done = false;
  bool failed = false;

  Status SetSchema(Schema s) {
    TS_RETURN_IF_ERROR(ValidateSchema(s));
    schema = std::move(s);
    schema_fixed = true;
    cols.assign(schema.fields.size(), ColumnBuf{});
    seen.assign(schema.fields.size(), 0);
    slot.assign(schema.fields.size(), nullptr);
    by_name.clear();
    for (std::size_t k = 0; k < schema.fields.size(); ++k) {
      const FieldSpec& f = schema.fields[k];
      by_name.emplace(f.name, k);
      ColumnBuf& c = cols[k];
      c.fixed = f.fixed_size();
      if (f.kind == FieldKind::kInt || f.kind == FieldKind::kFloat) {
        c.sample_bytes = 8;
      } else if (c.fixed) {
        c.sample_bytes = *DenseByteSize(f.dtype, Shape(f.shape.begin(), f.shape.end()));  // validated
      }
      if (f.kind == FieldKind::kTensor && ElementSize(f.dtype) > 1) c.align = ElementSize(f.dtype);
    }
    return Status::OK();
  }

  std::string Label(std::uint64_t sample, std::string_view field) const {
    return "sample " + std::to_string(sample) + ": field " + QuoteName(field);
  }

  Status CheckValue(const FieldSpec& f, const FieldValue& v, std::uint64_t sample_no) const {
    const std::string label = Label(sample_no, f.name);
    if (v.kind != f.kind) {
      return InvalidArgument(label + ": value is " + std::string(FieldKindName(v.kind)) + ", the schema says " +
                             std::string(FieldKindName(f.kind)));
    }
    switch (f.kind) {
      case FieldKind::kTensor: {
        if (v.dtype != f.dtype) {
          return InvalidArgument(label + ": dtype " + std::string(DTypeName(v.dtype)) + ", the schema says " +
                                 std::string(DTypeName(f.dtype)));
        }
        if (v.shape.size() != f.shape.size()) {
          return InvalidArgument(label + ": rank " + std::to_string(v.shape.size()) + ", the schema says " +
                                 std::to_string(f.shape.size()));
        }
        Shape shape(v.shape.size());
        for (std::size_t d = 0; d < v.shape.size(); ++d) {
          if (v.shape[d] < 0) return InvalidArgument(label + ": dimension " + std::to_string(d) + " is negative");
          if (f.shape[d] != kAnyDim && f.shape[d] != v.shape[d]) {
            return InvalidArgument(label + ": dimension " + std::to_string(d) + " is " + std::to_string(v.shape[d]) +
                                   ", the schema says " + std::to_string(f.shape[d]) +
                                   " (declare it as any-size to allow it to vary)");
          }
          shape[d] = static_cast<std::uint64_t>(v.shape[d]);
        }
        auto size = DenseByteSize(f.dtype, shape);
        if (!size.ok())
          return InvalidArgument(label + ": shape " + ShapeToString(shape) + ": " + size.status().message());
        if (*size != v.bytes.size()) {
          return InvalidArgument(label + ": " + std::to_string(v.bytes.size()) + " bytes for a " +
                                 std::string(DTypeName(f.dtype)) + " " + ShapeToString(shape) + " tensor of " +
                                 std::to_string(*size) + " bytes");
        }
        if (v.bytes.data() == nullptr && !v.bytes.empty()) return InvalidArgument(label + ": null data");
        return Status::OK();
      }
      case FieldKind::kStr: {
        std::string_view t(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
        if (!tensorsafe::internal::IsValidUtf8(t)) return InvalidArgument(label + ": str value is not valid UTF-8");
        return Status::OK();
      }
      case FieldKind::kJson: {
        std::string_view t(reinterpret_cast<const char*>(v.bytes.data()), v.bytes.size());
        if (!tensorsafe::internal::IsValidUtf8(t) || !nlohmann::json::accept(t)) {
          return InvalidArgument(label + ": json value is not valid JSON text");
        }
        return Status::OK();
      }
      default: return Status::OK();
    }
  }

  Status Add(std::span<const NamedValue> sample) {
    if (done) return FailedPrecondition(display + ": the dataset writer is finished");
    if (failed) return FailedPrecondition(display + ": the dataset writer failed earlier and was abandoned");
    const std::uint64_t no = samples;
    if (!schema_fixed) {
      Schema s;
      for (const NamedValue& nv : sample) {
        FieldSpec f;
        f.name = std::string(nv.name);
        f.kind = nv.value.kind;
        if (f.kind == FieldKind::kTensor) {
          f.dtype = nv.value.dtype;
          f.shape = nv.value.shape;
        }
        s.fields.push_back(std::move(f));
      }
      Status st = ValidateSchema(s);
      if (!st.ok()) return InvalidArgument("sample " + std::to_string(no) + " (fixes the schema): " + st.message());
      TS_RETURN_IF_ERROR(SetSchema(std::move(s)));
    }
    // Match values to fields; every field exactly once.
    if (++stamp == 0) {
      std::fill(seen.begin(), seen.end(), 0);
      stamp = 1;
    }
    for (const NamedValue& nv : sample) {
      auto it = by_name.find(nv.name);
      if (it == by_name.end()) {
        return InvalidArgument("sample " + std::to_string(no) + ": field " + QuoteName(nv.name) +
                               " is not in the schema");
      }
      if (seen[it->second] == stamp) return InvalidArgument(Label(no, nv.name) + ": given twice");
      seen[it->second] = stamp;
      slot[it->second] = &nv.value;
    }
    std::uint64_t payload = 0;
    for (std::size_t k = 0; k < schema.fields.size(); ++k) {
      const FieldSpec& f = schema.fields[k];
      if (seen[k] != stamp) return InvalidArgument(Label(no, f.name) + ": missing");
      TS_RETURN_IF_ERROR(CheckValue(f, *slot[k], no));
      const ColumnBuf& c = cols[k];
      payload += c.fixed ? c.sample_bytes : slot[k]->bytes.size() + (c.align - 1) + 8 + 8 * f.shape.size();
    }
    // DATASET.md §7 W3: close before a sample that would pass the byte limit
    // (never leaving an empty shard), and right after reaching a limit.
    if (shard_samples > 0 && opt.max_shard_bytes != 0 && shard_payload + payload > opt.max_shard_bytes) {
      TS_RETURN_IF_ERROR(FlushOrFail());
    }
    for (std::size_t k = 0; k < schema.fields.size(); ++k) Append(k, *slot[k]);
    ++shard_samples;
    ++samples;
    shard_payload += payload;
    if ((opt.max_shard_samples != 0 && shard_samples >= opt.max_shard_samples) ||
        (opt.max_shard_bytes != 0 && shard_payload >= opt.max_shard_bytes)) {
      TS_RETURN_IF_ERROR(FlushOrFail());
    }
    return Status::OK();
  }

  void Append(std::size_t k, const FieldValue& v) {
    ColumnBuf& c = cols[k];
    const FieldSpec& f = schema.fields[k];
    if (f.kind == FieldKind::kInt || f.kind == FieldKind::kFloat) {
      std::byte b[8];
      if (f.kind == FieldKind::kInt) {
        tensorsafe::internal::Store64(b, static_cast<std::uint64_t>(v.int_value));
      } else {
        std::memcpy(b, &v.float_value, 8);
      }
      AppendBytes(c.data, b);
      return;
    }
    if (c.fixed) {
      AppendBytes(c.data, v.bytes);
      return;
    }
    // Zero padding up to the value's alignment (W2), then the value.
    const std::uint64_t start = (c.data.size() + c.align - 1) / c.align * c.align;
    c.data.resize(start, std::byte{0});
    if (c.offsets.back() != start) c.offsets.back() = start;  // padding belongs to the previous slot
    AppendBytes(c.data, v.bytes);
    c.offsets.push_back(c.data.size());
    if (f.kind == FieldKind::kTensor) c.shapes.insert(c.shapes.end(), v.shape.begin(), v.shape.end());
  }

  Status FlushOrFail() {
    Status s = Flush();
    if (!s.ok()) {
      failed = true;
      RemoveWritten();
    }
    return s;
  }

  std::string ShardName(std::uint64_t num) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "-%05llu", static_cast<unsigned long long>(num));
    return opt.shard_prefix + buf + std::string(kShardSuffix);
  }

  Status Flush() {
    if (shard_samples == 0) return Status::OK();
    const std::string name = ShardName(next_shard);
    const std::string path = (fs::path(dir) / name).string();
    const std::string zname = name + std::string(kZstdSuffix);
    const std::string zpath = path + std::string(kZstdSuffix);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return IOError(display + ": cannot create the directory of " + name + ": " + ec.message(), ec.value());
    // Writers sharing a directory must not replace each other's shards: the
    // names are claimed with O_EXCL before anything is written (an existence
    // check would race), and only claimed files are ever removed.
    if (opt.zstd_level != 0) TS_RETURN_IF_ERROR(Claim(zpath));
    TS_RETURN_IF_ERROR(Claim(path));
    WriterOptions wo;
    wo.sync = opt.sync && opt.zstd_level == 0 && !upload;
    TS_ASSIGN_OR_RETURN(auto w, Writer::Create(path, wo));
    const std::uint64_t n = shard_samples;
    for (std::size_t k = 0; k < schema.fields.size(); ++k) {
      const FieldSpec& f = schema.fields[k];
      ColumnBuf& c = cols[k];
      auto bytes = [](const auto& v) { return std::as_bytes(std::span(v.data(), v.size())); };
      if (c.fixed) {
        DType dt = f.kind == FieldKind::kInt ? DType::kI64 : f.kind == FieldKind::kFloat ? DType::kF64 : f.dtype;
        Shape shape{n};
        if (f.kind == FieldKind::kTensor) shape.insert(shape.end(), f.shape.begin(), f.shape.end());
        TS_RETURN_IF_ERROR(w->Add(ColumnTensorName(k, "values"), TensorView::Contiguous(dt, shape, bytes(c.data))));
      } else {
        TS_RETURN_IF_ERROR(
            w->Add(ColumnTensorName(k, "data"), TensorView::Contiguous(DType::kU8, {c.data.size()}, bytes(c.data))));
        TS_RETURN_IF_ERROR(
            w->Add(ColumnTensorName(k, "offsets"), TensorView::Contiguous(DType::kU64, {n + 1}, bytes(c.offsets))));
        if (f.kind == FieldKind::kTensor) {
          TS_RETURN_IF_ERROR(w->Add(ColumnTensorName(k, "shapes"),
                                    TensorView::Contiguous(DType::kI64, {n, f.shape.size()}, bytes(c.shapes))));
        }
      }
    }
    nlohmann::json meta = nlohmann::json::object();
    meta["format"] = std::string(kShardFormatName);
    meta["version"] = kShardVersion;
    meta["samples"] = n;
    meta["schema"] = nlohmann::json::parse(SchemaToJson(schema));
    TS_RETURN_IF_ERROR(w->SetMetadata(meta.dump()));
    TS_RETURN_IF_ERROR(w->Finish());
    TS_ASSIGN_OR_RETURN(auto digest, internal::DigestFile(path));
    ShardInfo info;
    info.name = name;
    info.samples = n;
    info.bytes = digest.bytes;
    info.xxh3 = HashHex(digest.xxh3);
    stored_bytes += digest.bytes;
    if (opt.zstd_level != 0) {
      TS_ASSIGN_OR_RETURN(auto zd, internal::ZstdCompressFile(path, zpath, opt.zstd_level, opt.sync && !upload));
      TS_RETURN_IF_ERROR(Env::Default()->Remove(path));  // only the compressed file is stored
      std::erase(written, path);
      info.zstd = StoredFile{zname, zd.bytes, HashHex(zd.xxh3)};
      stored_bytes += zd.bytes - digest.bytes;
    }
    if (upload) {
      TS_RETURN_IF_ERROR(upload->Upload(info.zstd ? zname : name));
      std::erase(written, info.zstd ? zpath : path);
    }
    shards.push_back(info);
    ++next_shard;
    for (ColumnBuf& c : cols) {
      c.data.clear();
      c.offsets.assign(1, 0);
      c.shapes.clear();
    }
    shard_samples = 0;
    shard_payload = 0;
    if (opt.on_shard) opt.on_shard(info);
    return Status::OK();
  }

  // Creates `path` empty, failing if it exists; the shard's own rename
  // replaces it. An empty file is never read: index.json comes last.
  Status Claim(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
      return FailedPrecondition(path + " already exists (another writer with the shard prefix " +
                                QuoteName(opt.shard_prefix) + "?)");
    }
    if (fd < 0) return IOError(path + ": cannot create: " + std::strerror(errno), errno);
    ::close(fd);
    written.push_back(path);
    return Status::OK();
  }

  void RemoveWritten() {
    for (const std::string& p : written) (void)Env::Default()->Remove(p);
    written.clear();
    if (upload) (void)upload->Abandon();
  }

  Result<DatasetIndex> Finish() {
    if (done) return FailedPrecondition(display + ": the dataset writer is already finished");
    if (failed) return FailedPrecondition(display + ": the dataset writer failed earlier and was abandoned");
    if (!schema_fixed) return FailedPrecondition(display + ": no samples were added and no schema was declared");
    Status s = FlushOrFail();
    DatasetIndex index;
    index.schema = schema;
    index.samples = samples;
    index.shards = shards;
    index.metadata_json = opt.metadata_json;
    if (s.ok() && fs::exists(fs::path(dir) / kIndexFileName)) {
      s = FailedPrecondition(display + ": index.json appeared while writing (another writer?)");
    }
    if (s.ok()) s = WriteIndexFile(dir, index, opt.sync && !upload);
    if (s.ok() && upload) s = upload->Commit();  // the index last: the commit
    if (!s.ok()) {
      failed = true;
      RemoveWritten();
      return s;
    }
    done = true;
    return index;
  }
};

DatasetWriter::DatasetWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DatasetWriter::~DatasetWriter() {
  if (impl_ && !impl_->done) Abandon();
}

Result<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(const std::string& dir,
                                                             const DatasetWriterOptions& options) {
  if (options.zstd_level < 0 || options.zstd_level > 22) {
    return InvalidArgument("zstd level " + std::to_string(options.zstd_level) + " is not in 0..22");
  }
  if (options.shard_prefix.empty() ||
      ValidateShardName(options.shard_prefix + "-00000.tsafe", "").code() != StatusCode::kOk) {
    return InvalidArgument("shard prefix " + QuoteName(options.shard_prefix) +
                           " is not a relative path without \"..\" components");
  }
  if (!options.metadata_json.empty()) {
    Status s = tensorsafe::internal::ValidateJsonObject(options.metadata_json, 64);
    if (!s.ok()) return InvalidArgument("metadata: " + s.message());
  }
  auto impl = std::make_unique<Impl>();
  impl->display = dir;
  impl->dir = dir;
  if (IsRemoteUrl(dir)) {
    TS_ASSIGN_OR_RETURN(impl->upload, internal::DatasetUploader::Start(dir));
    impl->dir = impl->upload->staging_dir();
  }
  std::error_code ec;
  fs::create_directories(impl->dir, ec);
  if (ec) return IOError(dir + ": cannot create the dataset directory: " + ec.message(), ec.value());
  if (fs::exists(fs::path(impl->dir) / kIndexFileName, ec)) {
    return FailedPrecondition(dir + " already holds a dataset (index.json); write parts to new directories");
  }
  impl->opt = options;
  impl->next_shard = options.first_shard;
  if (!options.schema.fields.empty()) TS_RETURN_IF_ERROR(impl->SetSchema(options.schema));
  return std::make_unique<DatasetWriter>(std::move(impl));
}

Status DatasetWriter::Add(std::span<const NamedValue> sample) { return impl_->Add(sample); }
Result<DatasetIndex> DatasetWriter::Finish() { return impl_->Finish(); }
void DatasetWriter::Abandon() {
  impl_->RemoveWritten();
  impl_->failed = true;
}
const Schema& DatasetWriter::schema() const { return impl_->schema; }
std::uint64_t DatasetWriter::samples_written() const { return impl_->samples; }
std::uint64_t DatasetWriter::shards_written() const { return impl_->shards.size(); }
std::uint64_t DatasetWriter::bytes_written() const { return impl_->stored_bytes; }

}  // namespace tensorsafe::dataset
