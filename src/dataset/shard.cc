// Native .tsafe dataset shards: the columnar layout (DATASET.md §2) and the
// checks a reader runs at open (§5.2, S1..S10) so that Read() is O(1) and never
// leaves the column tensors.
#include "tensorsafe/dataset/shard.h"

#include <deque>
#include <nlohmann/json.hpp>

#include "dataset/internal.h"
#include "tensorsafe/reader.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::dataset {

using nlohmann::json;
using tensorsafe::internal::QuoteName;

std::string ColumnTensorName(std::size_t field, std::string_view part) {
  return "col/" + std::to_string(field) + "/" + std::string(part);
}

namespace {

// How one field is stored and read.
struct Column {
  const FieldSpec* spec = nullptr;
  bool fixed = false;
  std::uint64_t sample_bytes = 0;     // fixed fields
  const std::byte* values = nullptr;  // fixed: [n, ...] ; variable: data
  std::uint64_t data_bytes = 0;
  const std::byte* offsets = nullptr;  // u64 [n + 1]
  const std::byte* shapes = nullptr;   // i64 [n, rank] (variable tensors)
  std::size_t rank = 0;
  // Variable tensors: a value of E elements takes E / block_elems *
  // block_bytes bytes (E is checked to be a multiple at open).
  std::uint32_t block_elems = 1, block_bytes = 1;
};

// The alignment of a variable tensor value's start within the data tensor
// (DATASET.md §2.3): its element size, 1 for packed sub-byte dtypes.
std::uint64_t ValueAlignment(const FieldSpec& f) {
  if (f.kind != FieldKind::kTensor) return 1;
  const std::uint32_t e = ElementSize(f.dtype);
  return e == 0 ? 1 : e;
}

}  // namespace

class TsafeShard::Impl {
 public:
  std::string display;
  std::shared_ptr<Reader> reader;
  Schema schema;
  std::uint64_t n = 0;
  std::deque<Tensor> tensors;  // keep the column bytes alive; deque: stable addresses
  std::vector<Column> columns;

  Status Corrupt(const std::string& msg) const { return Corruption(display + ": " + msg); }

  Result<const Tensor*> GetColumn(std::size_t k, std::string_view part, DType dtype, const Shape& shape) {
    const FieldSpec& f = schema.fields[k];
    const std::string name = ColumnTensorName(k, part);
    const std::string label = "field " + std::to_string(k) + " " + QuoteName(f.name) + ": tensor " + QuoteName(name);
    auto t = reader->Get(name);
    if (!t.ok()) {
      if (t.status().code() == StatusCode::kNotFound) return Corrupt(label + " is missing");  // S5
      return t.status().WithContext(display + ": " + label + ": ");
    }
    if (t->info.layout != Layout::kDense) return Corrupt(label + " is not dense");
    if (t->info.dtype != dtype || t->info.shape != shape) {  // S6
      return Corrupt(label + " is " + std::string(DTypeName(t->info.dtype)) + " " + ShapeToString(t->info.shape) +
                     ", expected " + std::string(DTypeName(dtype)) + " " + ShapeToString(shape));
    }
    tensors.push_back(std::move(*t));
    return &tensors.back();
  }

  Status Init(const Schema* expected, const IndexLimits& limits) {
    // S2: the shard metadata.
    TS_ASSIGN_OR_RETURN(std::string meta_text, reader->Metadata());
    json meta = json::parse(meta_text, nullptr, false);
    if (meta.is_discarded() || !meta.is_object()) return Corrupt("file metadata is not a JSON object");
    auto fmt = meta.find("format");
    if (fmt == meta.end() || !fmt->is_string() || fmt->get<std::string>() != kShardFormatName) {
      return Corrupt("not a dataset shard: metadata \"format\" is not \"" + std::string(kShardFormatName) + "\"");
    }
    auto ver = meta.find("version");
    if (ver == meta.end() || !ver->is_number_integer() || ver->get<std::int64_t>() < 1) {
      return Corrupt("metadata \"version\" is missing or not a positive integer");
    }
    if (ver->get<std::int64_t>() > kShardVersion) {  // S3
      return Unsupported(display + ": shard version " + std::to_string(ver->get<std::int64_t>()) +
                         " is newer than the supported " + std::to_string(kShardVersion));
    }
    auto cnt = meta.find("samples");
    if (cnt == meta.end() || !cnt->is_number_unsigned() || cnt->get<std::uint64_t>() == 0) {
      return Corrupt("metadata \"samples\" is missing or not a positive integer");
    }
    n = cnt->get<std::uint64_t>();
    auto sch = meta.find("schema");
    if (sch == meta.end()) return Corrupt("metadata has no \"schema\"");
    TS_ASSIGN_OR_RETURN(schema, internal::SchemaFromJsonNode(&*sch, display, limits));  // S4
    if (expected != nullptr) {
      std::string why;
      if (!SameSchema(*expected, schema, &why)) return Corrupt("schema differs from the index: " + why);
    }
    // n + 1 offsets must be addressable: bounded by the file size anyway, and
    // this keeps the shape arithmetic below from overflowing.
    if (n > (std::uint64_t{1} << 56)) return Corrupt("metadata \"samples\" " + std::to_string(n) + " is implausible");
    columns.resize(schema.fields.size());
    for (std::size_t k = 0; k < schema.fields.size(); ++k) {
      TS_RETURN_IF_ERROR(InitColumn(k));
    }
    return Status::OK();
  }

  Status InitColumn(std::size_t k) {
    const FieldSpec& f = schema.fields[k];
    Column& c = columns[k];
    c.spec = &f;
    c.fixed = f.fixed_size();
    const std::string label = "field " + std::to_string(k) + " " + QuoteName(f.name);
    if (c.fixed) {
      DType dt = f.kind == FieldKind::kInt ? DType::kI64 : f.kind == FieldKind::kFloat ? DType::kF64 : f.dtype;
      Shape shape{n};
      if (f.kind == FieldKind::kTensor) shape.insert(shape.end(), f.shape.begin(), f.shape.end());
      TS_ASSIGN_OR_RETURN(const Tensor* t, GetColumn(k, "values", dt, shape));
      Shape one(shape.begin() + 1, shape.end());
      auto per = DenseByteSize(dt, one);
      if (!per.ok()) return Corrupt(label + ": " + per.status().message());
      c.sample_bytes = *per;
      auto total = tensorsafe::internal::CheckedMul(*per, n);
      if (!total || *total != t->data.size()) {  // S7
        return Corrupt(label + ": values hold " + std::to_string(t->data.size()) + " bytes, expected " +
                       std::to_string(n) + " x " + std::to_string(*per));
      }
      c.values = t->data.data();
      return Status::OK();
    }
    // Variable fields: data (u8 of any length), offsets and (tensors) shapes.
    auto info = reader->Find(ColumnTensorName(k, "data"));
    if (!info.ok() && info.status().code() != StatusCode::kNotFound) return info.status().WithContext(display + ": ");
    const std::uint64_t data_len = info.ok() && info->shape.size() == 1 ? info->shape[0] : 0;
    TS_ASSIGN_OR_RETURN(const Tensor* data_t, GetColumn(k, "data", DType::kU8, Shape{data_len}));
    c.values = data_t->data.data();
    c.data_bytes = data_len;
    TS_ASSIGN_OR_RETURN(const Tensor* off_t, GetColumn(k, "offsets", DType::kU64, Shape{n + 1}));
    c.offsets = off_t->data.data();
    const std::uint64_t align = ValueAlignment(f);
    if (align > 1 && reinterpret_cast<std::uintptr_t>(c.values) % align != 0) {  // S9
      return Corrupt(label + ": data tensor starts at a file offset that is not a multiple of " +
                     std::to_string(align));
    }
    if (f.kind == FieldKind::kTensor) {
      c.rank = f.shape.size();
      const auto& di = GetDTypeInfo(f.dtype);
      c.block_elems = di.block_elems;
      c.block_bytes = di.block_bytes;
      TS_ASSIGN_OR_RETURN(const Tensor* sh_t, GetColumn(k, "shapes", DType::kI64, Shape{n, c.rank}));
      c.shapes = sh_t->data.data();
    }
    // S8: offsets start at 0, never decrease, end at the data length.
    std::uint64_t prev = tensorsafe::internal::Load64(c.offsets);
    if (prev != 0) return Corrupt(label + ": offsets[0] is " + std::to_string(prev) + ", expected 0");
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t b = tensorsafe::internal::Load64(c.offsets + 8 * i);
      const std::uint64_t e = tensorsafe::internal::Load64(c.offsets + 8 * (i + 1));
      if (e < b) {
        return Corrupt(label + ": sample " + std::to_string(i) + ": offsets[" + std::to_string(i + 1) + "] = " +
                       std::to_string(e) + " is below offsets[" + std::to_string(i) + "] = " + std::to_string(b));
      }
      if (e > data_len) {
        return Corrupt(label + ": sample " + std::to_string(i) + ": offset " + std::to_string(e) +
                       " is past the end of the data (" + std::to_string(data_len) + " bytes)");
      }
      if (b % align != 0) {  // S9
        return Corrupt(label + ": sample " + std::to_string(i) + ": offset " + std::to_string(b) +
                       " is not a multiple of the element size " + std::to_string(align));
      }
      if (f.kind == FieldKind::kTensor) TS_RETURN_IF_ERROR(CheckShape(k, i, e - b));
    }
    const std::uint64_t last = tensorsafe::internal::Load64(c.offsets + 8 * n);
    if (last != data_len) {
      return Corrupt(label + ": offsets[" + std::to_string(n) + "] = " + std::to_string(last) +
                     ", expected the data length " + std::to_string(data_len));
    }
    return Status::OK();
  }

  // S10: one stored shape: rank fixed by the tensor, dims >= 0, fixed dims
  // as declared, byte size within the value's slot.
  Status CheckShape(std::size_t k, std::uint64_t i, std::uint64_t slot) {
    const FieldSpec& f = schema.fields[k];
    const Column& c = columns[k];
    const std::string label = "field " + std::to_string(k) + " " + QuoteName(f.name) + ": sample " + std::to_string(i);
    Shape shape(c.rank);
    for (std::size_t d = 0; d < c.rank; ++d) {
      const auto v = static_cast<std::int64_t>(tensorsafe::internal::Load64(c.shapes + 8 * (i * c.rank + d)));
      if (v < 0) return Corrupt(label + ": dimension " + std::to_string(d) + " is " + std::to_string(v));
      if (f.shape[d] != kAnyDim && v != f.shape[d]) {
        return Corrupt(label + ": dimension " + std::to_string(d) + " is " + std::to_string(v) + ", the schema says " +
                       std::to_string(f.shape[d]));
      }
      shape[d] = static_cast<std::uint64_t>(v);
    }
    auto size = DenseByteSize(f.dtype, shape);
    if (!size.ok()) return Corrupt(label + ": shape " + ShapeToString(shape) + ": " + size.status().message());
    if (*size > slot) {
      return Corrupt(label + ": shape " + ShapeToString(shape) + " needs " + std::to_string(*size) +
                     " bytes but its slot holds " + std::to_string(slot));
    }
    return Status::OK();
  }
};

TsafeShard::TsafeShard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TsafeShard::~TsafeShard() = default;

namespace {
Result<std::shared_ptr<TsafeShard>> Finish(std::unique_ptr<TsafeShard::Impl> impl, const Schema* expected,
                                           const ShardOptions& options) {
  auto* raw = impl.get();
  TS_RETURN_IF_ERROR(raw->Init(expected, options.limits));
  return std::make_shared<TsafeShard>(std::move(impl));
}
}  // namespace

Result<std::shared_ptr<TsafeShard>> TsafeShard::Open(const std::string& path, const ShardOptions& options,
                                                     const Schema* expected_schema, std::string display) {
  auto impl = std::make_unique<Impl>();
  impl->display = display.empty() ? path : std::move(display);
  auto r = Reader::Open(path, options.reader);  // S1
  if (!r.ok()) return r.status();
  impl->reader = std::move(*r);
  return Finish(std::move(impl), expected_schema, options);
}

Result<std::shared_ptr<TsafeShard>> TsafeShard::OpenBuffer(std::span<const std::byte> bytes,
                                                           std::shared_ptr<const void> owner, std::string display,
                                                           const ShardOptions& options, const Schema* expected_schema) {
  auto impl = std::make_unique<Impl>();
  impl->display = display;
  auto r = Reader::OpenBuffer(bytes, std::move(owner), display, options.reader);
  if (!r.ok()) return r.status();
  impl->reader = std::move(*r);
  return Finish(std::move(impl), expected_schema, options);
}

std::uint64_t TsafeShard::num_samples() const { return impl_->n; }
const Schema& TsafeShard::schema() const { return impl_->schema; }
const std::string& TsafeShard::display_name() const { return impl_->display; }

Status TsafeShard::VerifyData() const {
  Status s = impl_->reader->Verify();
  if (!s.ok()) return s.WithContext(impl_->display + ": ");
  // Text fields: UTF-8 (str) and JSON syntax (json), which Read() does not check.
  const Impl& im = *impl_;
  for (std::size_t k = 0; k < im.columns.size(); ++k) {
    const auto& c = im.columns[k];
    if (c.spec->kind != FieldKind::kStr && c.spec->kind != FieldKind::kJson) continue;
    for (std::uint64_t i = 0; i < im.n; ++i) {
      const std::uint64_t b = tensorsafe::internal::Load64(c.offsets + 8 * i),
                          e = tensorsafe::internal::Load64(c.offsets + 8 * (i + 1));
      std::string_view text(reinterpret_cast<const char*>(c.values) + b, e - b);
      const std::string label =
          "field " + std::to_string(k) + " " + QuoteName(c.spec->name) + ": sample " + std::to_string(i);
      if (c.spec->kind == FieldKind::kStr && !tensorsafe::internal::IsValidUtf8(text)) {
        return im.Corrupt(label + ": str value is not valid UTF-8");
      }
      if (c.spec->kind == FieldKind::kJson && !json::accept(text)) {
        return im.Corrupt(label + ": json value is not valid JSON");
      }
    }
  }
  return Status::OK();
}

Status TsafeShard::Read(std::uint64_t i, std::vector<FieldView>& out) const {
  const Impl& im = *impl_;
  if (i >= im.n) {
    return OutOfRange(im.display + ": sample " + std::to_string(i) + " is out of range (" + std::to_string(im.n) +
                      " samples)");
  }
  out.resize(im.columns.size());
  for (std::size_t k = 0; k < im.columns.size(); ++k) {
    const auto& c = im.columns[k];
    FieldView& v = out[k];
    v.spec = c.spec;
    if (c.fixed) {
      v.bytes = {c.values + i * c.sample_bytes, c.sample_bytes};
      if (c.spec->kind == FieldKind::kTensor) {
        v.shape.assign(c.spec->shape.begin(), c.spec->shape.end());
      } else {
        v.shape.clear();
      }
      continue;
    }
    const std::uint64_t b = tensorsafe::internal::Load64(c.offsets + 8 * i);
    const std::uint64_t e = tensorsafe::internal::Load64(c.offsets + 8 * (i + 1));
    if (c.spec->kind != FieldKind::kTensor) {
      v.shape.clear();
      v.bytes = {c.values + b, e - b};
      continue;
    }
    // Validated at open: dims >= 0, product fits, size <= e - b.
    v.shape.resize(c.rank);
    std::uint64_t elems = 1;
    const std::byte* sp = c.shapes + 8 * i * c.rank;
    for (std::size_t d = 0; d < c.rank; ++d) {
      v.shape[d] = static_cast<std::int64_t>(tensorsafe::internal::Load64(sp + 8 * d));
      elems *= static_cast<std::uint64_t>(v.shape[d]);
    }
    v.bytes = {c.values + b, elems / c.block_elems * c.block_bytes};
  }
  return Status::OK();
}

}  // namespace tensorsafe::dataset
