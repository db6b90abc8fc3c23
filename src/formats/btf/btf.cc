// TFRT BTF codec. Layout: docs/formats/btf.md §2 (from formats.md §1.2).
#include "tensorsafe/formats/btf.h"

#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/codec_util.h"
#include "io/internal.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::btf {
namespace {

using internal::CheckedAdd;
using internal::CheckedMul;
using internal::Load64;

constexpr std::size_t kHeaderSize = 16;  // rank u64, dtype u8, layout u8, 6 reserved

// Persisted dtype codes (TFRT btf.h; the document lists only 0..5): index = code.
constexpr DType kCodes[] = {DType::kI8,  DType::kI16, DType::kI32, DType::kI64, DType::kF32,
                            DType::kF64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
constexpr std::uint8_t kNumCodes = 10;

std::optional<std::uint8_t> CodeOf(DType d) {
  for (std::uint8_t c = 0; c < kNumCodes; ++c) {
    if (kCodes[c] == d) return c;
  }
  return std::nullopt;
}

using tensorsafe::internal::Str;

// Bounds-checked reads of one record; every length is checked against the
// bytes that remain before it is used.
class RecordReader {
 public:
  RecordReader(std::span<const std::byte> bytes, std::uint64_t pos, std::string where)
      : bytes_(bytes), pos_(pos), where_(std::move(where)) {}

  std::uint64_t pos() const { return pos_; }
  const std::string& where() const { return where_; }
  Status Error(const std::string& m) const { return Corruption(where_ + ": " + m); }

  // Takes `n` bytes described as `what`.
  Result<std::span<const std::byte>> Take(std::uint64_t n, std::string_view what) {
    const std::uint64_t remain = bytes_.size() - pos_;
    if (n > remain) {
      return Error(std::string(what) + " of " + Str(n) + " bytes at offset " + Str(pos_) + " exceeds the " +
                   Str(remain) + " bytes that remain");
    }
    auto s = bytes_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  // Reads `count` non-negative int64 dims (TFRT reads them signed).
  Result<Shape> Dims(std::uint64_t count, std::string_view what) {
    auto n = CheckedMul(count, 8);
    if (!n) return Error(std::string(what) + ": " + Str(count) + " dims overflow");
    TS_ASSIGN_OR_RETURN(auto raw, Take(*n, what));
    Shape dims(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto d = static_cast<std::int64_t>(Load64(raw.data() + 8 * i));
      if (d < 0) return Error(std::string(what) + ": dimension " + Str(i) + " is negative (" + std::to_string(d) + ")");
      dims[i] = static_cast<std::uint64_t>(d);
    }
    return dims;
  }
  // The byte size of `count` elements of `dtype`.
  Result<std::uint64_t> Bytes(DType dtype, std::span<const std::uint64_t> shape, std::string_view what) {
    auto size = DenseByteSize(dtype, shape);
    if (!size.ok()) return Error(std::string(what) + ": " + size.status().message());
    return *size;
  }

 private:
  std::span<const std::byte> bytes_;
  std::uint64_t pos_;
  std::string where_;
};

TensorInfo MakeInfo(std::string name, DType dtype, Shape shape, std::uint64_t offset, std::uint64_t length) {
  TensorInfo info;
  info.name = std::move(name);
  info.dtype = dtype;
  info.shape = std::move(shape);
  info.data_offset = offset;
  info.data_length = length;
  return info;
}

Status CheckCooIndices(std::span<const std::byte> idx, std::span<const std::uint64_t> dims, std::uint64_t nnz,
                       const std::string& where, StatusCode code) {
  const std::uint64_t rank = dims.size();
  for (std::uint64_t k = 0; k < nnz; ++k) {
    for (std::uint64_t j = 0; j < rank; ++j) {
      const auto v = static_cast<std::int64_t>(Load64(idx.data() + 8 * (k * rank + j)));
      // TFRT's check is signed, so it lets negative indices through.
      if (v < 0 || static_cast<std::uint64_t>(v) >= dims[j]) {
        return Status(code, where + ": nonzero " + Str(k) + " has index " + std::to_string(v) + " in dimension " +
                                Str(j) + ", outside [0, " + Str(dims[j]) + ")");
      }
    }
  }
  return Status::OK();
}

// True when the nnz index rows are strictly increasing in lexicographic
// order: the native format's coalesced flag (FORMAT.md §6.2), which BTF does
// not store, so it is derived from the indices.
bool RowsIncreasing(std::span<const std::byte> idx, std::uint64_t nnz, std::uint64_t rank) {
  for (std::uint64_t k = 1; k < nnz; ++k) {
    int order = 0;
    for (std::uint64_t j = 0; j < rank && order == 0; ++j) {
      const auto a = static_cast<std::int64_t>(Load64(idx.data() + 8 * ((k - 1) * rank + j)));
      const auto b = static_cast<std::int64_t>(Load64(idx.data() + 8 * (k * rank + j)));
      order = a < b ? 1 : a > b ? -1 : 0;
    }
    if (order <= 0) return false;
  }
  return true;
}

Result<Record> DecodeRecord(std::span<const std::byte> bytes, std::uint64_t index, std::uint64_t offset,
                            std::uint64_t table_end, const std::shared_ptr<const void>& owner, const std::string& ctx,
                            const ReadOptions& opt) {
  RecordReader r(bytes, offset, ctx + "record " + Str(index) + " at offset " + Str(offset));
  if (offset < table_end) return r.Error("overlaps the offset table, which ends at " + Str(table_end));
  if (offset > bytes.size()) return r.Error("starts past the end of the file (" + Str(bytes.size()) + " bytes)");
  if (opt.require_aligned_offsets && offset % kRecordAlignment != 0) {
    return r.Error("offset is not a multiple of 8");
  }
  TS_ASSIGN_OR_RETURN(auto header, r.Take(kHeaderSize, "16-byte header"));
  Record rec;
  rec.offset = offset;
  const std::uint64_t rank = Load64(header.data());
  rec.dtype_code = internal::Load8(header.data() + 8);
  rec.layout_code = internal::Load8(header.data() + 9);
  for (int i = 0; i < 6; ++i) rec.reserved[i] = internal::Load8(header.data() + 10 + i);
  if (rank > opt.limits.max_rank) {
    return LimitExceeded(r.where() + ": rank " + Str(rank) + " exceeds the limit of " + Str(opt.limits.max_rank));
  }
  if (rec.dtype_code >= kNumCodes) {
    return Unsupported(r.where() + ": dtype code " + Str(rec.dtype_code) + " is not one of BTF's 0..9");
  }
  const DType dtype = kCodes[rec.dtype_code];
  if (rec.layout_code == kLayoutDense) {
    rec.coo = false;
  } else if (rec.layout_code == kLayoutCoo ||
             (rec.layout_code == kLayoutCooDocumented && opt.accept_documented_coo_layout)) {
    rec.coo = true;
  } else {
    return Unsupported(r.where() + ": layout code " + Str(rec.layout_code) + " is unknown (0 = dense, 1 = COO" +
                       (opt.accept_documented_coo_layout ? ", 2 = COO as documented)" : ")"));
  }
  TS_ASSIGN_OR_RETURN(Shape dims, r.Dims(rank, "dims"));
  const std::size_t itemsize = ElementSize(dtype);
  if (!rec.coo) {
    TS_ASSIGN_OR_RETURN(std::uint64_t n, r.Bytes(dtype, dims, "data"));
    const std::uint64_t at = r.pos();
    TS_ASSIGN_OR_RETURN(auto data, r.Take(n, "data"));
    rec.dense = internal::ViewOrCopy(MakeInfo(Str(index), dtype, std::move(dims), at, n), data, owner, itemsize);
  } else {
    TS_ASSIGN_OR_RETURN(Shape idims, r.Dims(2, "COO indices dims"));
    if (idims[1] != rank) {
      return r.Error("COO indices are " + ShapeToString(idims) + " but the rank is " + Str(rank));
    }
    const std::uint64_t nnz = idims[0];
    TS_ASSIGN_OR_RETURN(std::uint64_t ni, r.Bytes(DType::kI64, idims, "COO indices"));
    const std::uint64_t iat = r.pos();
    TS_ASSIGN_OR_RETURN(auto idx, r.Take(ni, "COO indices"));
    TS_ASSIGN_OR_RETURN(Shape vdims, r.Dims(1, "COO values dims"));
    if (vdims[0] != nnz) {
      return r.Error("COO values hold " + Str(vdims[0]) + " elements but the indices " + Str(nnz));
    }
    TS_ASSIGN_OR_RETURN(std::uint64_t nv, r.Bytes(dtype, vdims, "COO values"));
    const std::uint64_t vat = r.pos();
    TS_ASSIGN_OR_RETURN(auto vals, r.Take(nv, "COO values"));
    TS_RETURN_IF_ERROR(CheckCooIndices(idx, dims, nnz, r.where(), StatusCode::kCorruption));
    // The native COO tensor views indices, the values' NNZ field and the
    // values as one region (values at ni + 8); TensorInfo allows that gap.
    TensorInfo native = MakeInfo(Str(index), dtype, dims, iat, vat + nv - iat);
    native.layout = Layout::kCoo;
    native.nnz = nnz;
    native.coo_values_offset = ni + 8;
    native.coalesced = RowsIncreasing(idx, nnz, rank);
    rec.coo_native = internal::ViewOrCopy(std::move(native), bytes.subspan(iat, vat + nv - iat), owner, 8);
    rec.coo_tensor.dense_shape = dims;
    rec.coo_tensor.indices =
        internal::ViewOrCopy(MakeInfo(Str(index) + ".indices", DType::kI64, std::move(idims), iat, ni), idx, owner, 8);
    rec.coo_tensor.values =
        internal::ViewOrCopy(MakeInfo(Str(index) + ".values", dtype, std::move(vdims), vat, nv), vals, owner, itemsize);
  }
  rec.end = r.pos();
  return rec;
}

std::string CooMetadata(const Shape& shape) { return nlohmann::json{{"layout", "coo"}, {"shape", shape}}.dump(); }

// The dense shape of a tensor marked {"layout":"coo","shape":[...]}, nullopt
// for any other tensor.
Result<std::optional<Shape>> CooShapeOf(const Tensor& t, const std::string& what) {
  if (t.info.metadata_json.empty()) return std::optional<Shape>();
  auto j = nlohmann::json::parse(t.info.metadata_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("layout") || j["layout"] != "coo") return std::optional<Shape>();
  const auto& s = j.contains("shape") ? j["shape"] : nlohmann::json();
  Shape shape;
  bool ok = s.is_array();
  if (ok) {
    for (const auto& d : s) {
      if (!d.is_number_unsigned())
        ok = false;
      else
        shape.push_back(d.get<std::uint64_t>());
    }
  }
  if (!ok) return InvalidArgument(what + ": COO metadata needs \"shape\": an array of non-negative integers");
  return std::optional<Shape>(std::move(shape));
}

Status AppendDims(std::string& out, std::span<const std::uint64_t> dims, const std::string& what) {
  for (std::uint64_t d : dims) {
    if (d > static_cast<std::uint64_t>(INT64_MAX)) {
      return InvalidArgument(what + ": dimension " + Str(d) + " does not fit BTF's int64");
    }
    internal::Put64(out, d);
  }
  return Status::OK();
}

Status CheckData(const Tensor& t, const std::string& what) {
  return internal::CheckDenseSize(t.info.dtype, t.info.shape, t.data.size(), what);
}

Result<std::uint8_t> DTypeCode(DType d, const std::string& what) {
  auto code = CodeOf(d);
  if (!code) {
    return Unsupported(what + ": dtype " + std::string(DTypeName(d)) +
                       " has no BTF code (BTF has i8 i16 i32 i64 f32 f64 u8 u16 u32 u64)");
  }
  return *code;
}

void PutHeader(std::string& out, std::uint64_t rank, std::uint8_t dtype, std::uint8_t layout) {
  internal::Put64(out, rank);
  internal::Put8(out, dtype);
  internal::Put8(out, layout);
  out.append(6, '\0');  // reserved: TFRT's writer left them uninitialised before 2022
}

// Records are built as pieces: headers and dims owned, data viewed, so
// WriteFile streams the tensors' bytes.
Status EncodeDense(internal::Pieces& out, const Tensor& t, const std::string& what) {
  TS_ASSIGN_OR_RETURN(std::uint8_t code, DTypeCode(t.info.dtype, what));
  if (t.info.layout != Layout::kDense) return InvalidArgument(what + ": not a dense tensor");
  TS_RETURN_IF_ERROR(CheckData(t, what));
  std::string head;
  PutHeader(head, t.info.shape.size(), code, kLayoutDense);
  TS_RETURN_IF_ERROR(AppendDims(head, t.info.shape, what));
  out.Append(std::move(head));
  out.AppendView(t.data);
  return Status::OK();
}

Status EncodeCoo(internal::Pieces& out, const CooTensor& c, const std::string& what) {
  TS_ASSIGN_OR_RETURN(std::uint8_t code, DTypeCode(c.values.info.dtype, what + " values"));
  const std::uint64_t rank = c.dense_shape.size();
  const Shape& is = c.indices.info.shape;
  if (c.indices.info.dtype != DType::kI64 || is.size() != 2 || is[1] != rank) {
    return InvalidArgument(what + ": COO indices must be i64 [nnz, " + Str(rank) + "], not " +
                           std::string(DTypeName(c.indices.info.dtype)) + " " + ShapeToString(is));
  }
  if (c.values.info.shape != Shape{is[0]}) {
    return InvalidArgument(what + ": COO values must be [" + Str(is[0]) + "], not " +
                           ShapeToString(c.values.info.shape));
  }
  TS_RETURN_IF_ERROR(CheckData(c.indices, what + " indices"));
  TS_RETURN_IF_ERROR(CheckData(c.values, what + " values"));
  TS_RETURN_IF_ERROR(CheckCooIndices(c.indices.data, c.dense_shape, is[0], what, StatusCode::kInvalidArgument));
  std::string head;
  PutHeader(head, rank, code, kLayoutCoo);
  TS_RETURN_IF_ERROR(AppendDims(head, c.dense_shape, what));
  TS_RETURN_IF_ERROR(AppendDims(head, is, what));
  out.Append(std::move(head));
  out.AppendView(c.indices.data);
  std::string nnz;
  internal::Put64(nnz, is[0]);
  out.Append(std::move(nnz));
  out.AppendView(c.values.data);
  return Status::OK();
}

}  // namespace

Result<std::vector<Record>> DecodeRecords(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                          const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  if (bytes.size() < 8) {
    return Corruption(ctx + "file is " + Str(bytes.size()) + " bytes, shorter than the 8-byte tensor count");
  }
  const std::uint64_t n = Load64(bytes.data());
  if (n > opt.limits.max_tensor_count) {
    return LimitExceeded(ctx + "tensor count " + Str(n) + " exceeds the limit of " + Str(opt.limits.max_tensor_count));
  }
  const auto table_end = CheckedAdd(8, CheckedMul(n, 8).value_or(UINT64_MAX));
  if (!table_end || *table_end > bytes.size()) {
    return Corruption(ctx + "offset table of " + Str(n) + " records runs past the end of the file (" +
                      Str(bytes.size()) + " bytes)");
  }
  std::vector<Record> records;  // not reserved: n is bounded by the file, not by memory
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t offset = Load64(bytes.data() + 8 * (i + 1));
    TS_ASSIGN_OR_RETURN(Record rec, DecodeRecord(bytes, i, offset, *table_end, owner, ctx, opt));
    records.push_back(std::move(rec));
  }
  return records;
}

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto records, DecodeRecords(bytes, std::move(owner), display_name, opt));
  TensorSet set;
  for (Record& r : records) {
    if (!r.coo) {
      set.tensors.push_back(std::move(r.dense));
      continue;
    }
    if (!opt.coo_as_pairs) {
      set.tensors.push_back(std::move(r.coo_native));
      continue;
    }
    const std::string md = CooMetadata(r.coo_tensor.dense_shape);
    for (Tensor* t : {&r.coo_tensor.indices, &r.coo_tensor.values}) {
      t->info.metadata_json = md;
      set.tensors.push_back(std::move(*t));
    }
  }
  return set;
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto region, internal::EnvOr(opt.env)->Map(path));
  return Decode(region->bytes(), region, path, opt);
}

namespace {

Result<internal::Pieces> EncodeItemPieces(std::span<const Item> items) {
  const std::uint64_t n = items.size();
  internal::Pieces out;
  std::string table;
  internal::Put64(table, n);
  table.append(8 * n, '\0');  // offsets, filled in below
  const std::size_t table_piece = out.Append(std::move(table));
  for (std::uint64_t i = 0; i < n; ++i) {
    internal::Store64(reinterpret_cast<std::byte*>(out.owned(table_piece).data() + 8 * (i + 1)), out.size());
    const std::string what = "record " + Str(i);
    if (const auto* t = std::get_if<Tensor>(&items[i])) {
      TS_RETURN_IF_ERROR(EncodeDense(out, *t, what + " " + internal::QuoteName(t->info.name)));
    } else {
      TS_RETURN_IF_ERROR(EncodeCoo(out, std::get<CooTensor>(items[i]), what + " (COO)"));
    }
    out.AppendZeros(*internal::AlignUp(out.size(), kRecordAlignment) - out.size());
  }
  return out;
}

// A native COO tensor (Layout::kCoo) as the two views a BTF record holds.
// Its coalesced flag is not stored: BTF readers derive it (RowsIncreasing).
Result<CooTensor> FromNative(const Tensor& t, const std::string& what) {
  auto parts = SplitCoo(t.info, t.data);
  if (!parts.ok()) return InvalidArgument(what + ": " + parts.status().message());
  CooTensor c;
  c.dense_shape = t.info.shape;
  c.indices.info =
      MakeInfo(t.info.name + ".indices", DType::kI64, Shape{t.info.nnz, t.info.shape.size()}, 0, parts->indices.size());
  c.indices.data = parts->indices;
  c.indices.owner = t.owner;
  c.values.info = MakeInfo(t.info.name + ".values", t.info.dtype, Shape{t.info.nnz}, 0, parts->values.size());
  c.values.data = parts->values;
  c.values.owner = t.owner;
  return c;
}

// The records of `set`: dense tensors, native COO tensors, and COO pairs
// joined into one item.
Result<std::vector<Item>> ItemsOf(const TensorSet& set) {
  std::vector<Item> items;
  std::map<std::string, std::size_t> coo_item;  // base name -> index in items
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    const std::string what = "tensor " + Str(i) + " " + internal::QuoteName(t.info.name);
    if (t.info.layout == Layout::kCoo) {
      TS_ASSIGN_OR_RETURN(CooTensor c, FromNative(t, what));
      items.emplace_back(std::move(c));
      continue;
    }
    TS_ASSIGN_OR_RETURN(auto coo_shape, CooShapeOf(t, what));
    if (!coo_shape) {
      items.emplace_back(t);
      continue;
    }
    const std::string& name = t.info.name;
    const bool is_idx = name.ends_with(".indices");
    if (!is_idx && !name.ends_with(".values")) {
      return InvalidArgument(what + ": a COO part must be named <base>.indices or <base>.values");
    }
    const std::string base = name.substr(0, name.rfind('.'));
    auto [it, fresh] = coo_item.emplace(base, items.size());
    if (fresh) items.emplace_back(CooTensor{*coo_shape, {}, {}});
    auto& c = std::get<CooTensor>(items[it->second]);
    Tensor& slot = is_idx ? c.indices : c.values;
    if (!slot.info.name.empty() || c.dense_shape != *coo_shape) {
      return InvalidArgument(what + ": duplicate COO part or shapes that disagree for " + internal::QuoteName(base));
    }
    slot = t;
  }
  for (const auto& [base, k] : coo_item) {
    const auto& c = std::get<CooTensor>(items[k]);
    if (c.indices.info.name.empty() || c.values.info.name.empty()) {
      return InvalidArgument("COO tensor " + internal::QuoteName(base) + " lacks its " +
                             (c.indices.info.name.empty() ? "indices" : "values"));
    }
  }
  return items;
}

Result<internal::Pieces> EncodePieces(const TensorSet& set) {
  TS_ASSIGN_OR_RETURN(auto items, ItemsOf(set));
  return EncodeItemPieces(items);
}

}  // namespace

Result<std::string> EncodeItems(std::span<const Item> items, const WriteOptions&) {
  TS_ASSIGN_OR_RETURN(auto pieces, EncodeItemPieces(items));
  return pieces.Join();
}

Result<std::string> Encode(const TensorSet& set, const WriteOptions&) {
  TS_ASSIGN_OR_RETURN(auto pieces, EncodePieces(set));
  return pieces.Join();
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& opt) {
  auto pieces = EncodePieces(set);
  if (!pieces.ok()) return pieces.status().WithContext(path);
  return WritePiecesAtomically(path, *pieces, opt.sync, opt.env);
}

bool HoldsDType(DType dtype) { return CodeOf(dtype).has_value(); }

Status CheckNames(TensorSet& set, bool drop_names) {
  // The names a reader gives: dense record r is "r", a COO pair
  // "<base>.indices"/"<base>.values" is one record r, "r.indices"/"r.values".
  std::map<std::string, std::uint64_t> coo_record;
  std::uint64_t records = 0;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    const std::string& n = t.info.name;
    auto md = nlohmann::json::parse(t.info.metadata_json.empty() ? "{}" : t.info.metadata_json, nullptr, false);
    const bool coo = md.is_object() && md.contains("layout") && md["layout"] == "coo";
    const auto dot = n.rfind('.');
    std::string back;
    if (!coo || dot == std::string::npos) {
      back = std::to_string(records++);
    } else {
      auto [it, fresh] = coo_record.emplace(n.substr(0, dot), records);
      if (fresh) ++records;
      back = std::to_string(it->second) + n.substr(dot);
    }
    if (back == n || drop_names) continue;
    return InvalidArgument("tensor " + std::to_string(i) + " " + internal::QuoteName(n) +
                           ": BTF stores no names, so it would read back as " + internal::QuoteName(back) +
                           " (consent to positional names: drop_names, --drop-names)");
  }
  return Status::OK();
}

}  // namespace tensorsafe::btf
