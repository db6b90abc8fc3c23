// PrepareForFormat: what each target can hold, checked before anything is
// written (docs/CONVERT.md §2-§3). The codecs check again while encoding;
// these checks exist so that the error names the tensor and says which
// consent would let the conversion through, and so that nothing a codec
// would silently ignore (tenbin's and GGUF's per-tensor metadata, npy's
// lost dtypes) is lost without one.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/common/codec_util.h"
#include "formats/gguf/gguf_internal.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_kv.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using json = nlohmann::ordered_json;  // keeps the metadata's key order

std::string What(std::size_t i, const Tensor& t) {
  return "tensor " + std::to_string(i) + " " + internal::QuoteName(t.info.name);
}

std::string Fmt(Format f) { return std::string(FormatName(f)); }

bool IsEmptyObjectText(const std::string& text) {
  if (text.empty()) return true;
  auto j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.empty();
}

// Parses metadata that the readers produced or a caller gave: it must be a
// JSON object.
Result<json> ParseObject(const std::string& text, const std::string& what) {
  auto j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument(what + ": metadata is not a JSON object");
  return j;
}

// The per-tensor metadata keys a format stores, when it stores only its own
// (tenbin's 8-byte info, BTF's COO marker); nullptr when it stores any
// object (tsafe, zio) or none.
const std::vector<std::string>* OwnTensorKeys(Format f) {
  static const std::vector<std::string> tenbin = {"tenbin_info"};
  static const std::vector<std::string> btf = {"layout", "shape"};
  static const std::vector<std::string> gguf = {"gguf.type", "gguf.shape", "block_elems", "block_bytes"};
  if (f == Format::kTenbin) return &tenbin;
  if (f == Format::kGguf) return &gguf;
  if (f == Format::kBtf) return &btf;
  return nullptr;
}

bool HoldsAnyTensorMetadata(Format f) { return f == Format::kTsafe || f == Format::kZio; }

// Targets that re-encode metadata through nlohmann (GGUF's typed values,
// ZIO's JSON, safetensors' stringified values) would turn an integer wider
// than 64 bits into a double: refused rather than narrowed.
std::string NarrowedInteger(const internal::WideInteger& w, Format to) {
  return "metadata key " + internal::QuoteName(w.key) + " holds the integer " + w.text +
         ", wider than 64 bits, which " + Fmt(to) + " would narrow to a double (store it as a string)";
}

Status PrepareTensorMetadata(Tensor& t, std::size_t i, Format to, const ConvertOptions& opt) {
  if (IsEmptyObjectText(t.info.metadata_json)) {
    t.info.metadata_json.clear();
    return Status::OK();
  }
  if (to == Format::kZio) {
    if (auto w = internal::FindWideInteger(t.info.metadata_json)) {
      return Unsupported(What(i, t) + ": " + NarrowedInteger(*w, to));
    }
  }
  if (HoldsAnyTensorMetadata(to)) return Status::OK();
  TS_ASSIGN_OR_RETURN(json md, ParseObject(t.info.metadata_json, What(i, t)));
  const std::vector<std::string>* own = OwnTensorKeys(to);
  // BTF's keys are its own only as the COO marker, "layout":"coo".
  // GGUF's are its own only on a quantized tensor.
  const bool own_applies = own != nullptr && (to != Format::kBtf || (md.contains("layout") && md["layout"] == "coo")) &&
                           (to != Format::kGguf || md.contains("gguf.type"));
  json kept = json::object();
  std::vector<std::string> lost;
  for (auto it = md.begin(); it != md.end(); ++it) {
    const bool is_own = own_applies && std::find(own->begin(), own->end(), it.key()) != own->end();
    if (is_own) {
      kept[it.key()] = it.value();
    } else {
      lost.push_back(it.key());
    }
  }
  if (lost.empty()) return Status::OK();
  if (!opt.drop_tensor_metadata) {
    std::string keys;
    for (const std::string& k : lost) keys += (keys.empty() ? "" : ", ") + internal::QuoteName(k);
    return Unsupported(What(i, t) + ": " + Fmt(to) + " has no per-tensor metadata for " + keys +
                       " (consent to dropping it: drop_tensor_metadata, --drop-tensor-metadata)");
  }
  t.info.metadata_json = kept.empty() ? std::string() : kept.dump();
  return Status::OK();
}

Status PrepareFileMetadata(TensorSet& set, Format to, const ConvertOptions& opt) {
  if (!opt.gguf_kv.empty()) {  // docs/formats/gguf.md §11
    if (to != Format::kGguf) return InvalidArgument("GGUF key/values (--gguf-kv) apply to gguf outputs only");
    std::vector<gguf::KeyValueEdit> edits;
    for (const std::string& kv : opt.gguf_kv) {
      TS_ASSIGN_OR_RETURN(gguf::KeyValueEdit e, gguf::ParseKeyValueEdit(kv));
      edits.push_back(std::move(e));
    }
    TS_ASSIGN_OR_RETURN(set.metadata_json, gguf::EditKeyValues(set.metadata_json, edits));
  }
  // GGUF's value types stay with GGUF: the ones a GGUF writer would infer
  // again (strings) are not carried elsewhere (docs/formats/gguf.md §4).
  if (to != Format::kGguf) set.metadata_json = gguf::internal::DropRedundantTypes(set.metadata_json);
  if (to == Format::kGguf || to == Format::kZio || (to == Format::kSafetensors && opt.stringify_metadata)) {
    if (auto w = internal::FindWideInteger(set.metadata_json)) return Unsupported(NarrowedInteger(*w, to));
  }
  if (to == Format::kGguf && opt.alignment != 0) {
    json md = json::object();
    if (!set.metadata_json.empty()) {
      TS_ASSIGN_OR_RETURN(md, ParseObject(set.metadata_json, "the file"));
    }
    md["general.alignment"] = opt.alignment;
    json& types = md["tensorsafe.gguf_types"];
    if (types.is_null()) types = json::object();
    if (types.is_object()) types["general.alignment"] = "uint32";
    set.metadata_json = md.dump();
  }
  // An empty object is kept where the target tells it from no metadata
  // (safetensors' `"__metadata__":{}` against none, which its reader gives
  // as {} and None; .tsafe's metadata_length 2 against 0), and dropped
  // elsewhere, with no consent needed.
  if (IsEmptyObjectText(set.metadata_json)) {
    if (to != Format::kTsafe && to != Format::kSafetensors) set.metadata_json.clear();
    return Status::OK();
  }
  switch (to) {
    case Format::kTsafe: case Format::kZio: case Format::kGguf:
      return Status::OK();  // any object (GGUF's writer refuses values it has no type for)
    case Format::kSafetensors: {
      TS_ASSIGN_OR_RETURN(json md, ParseObject(set.metadata_json, "the file"));
      bool changed = false;
      for (auto it = md.begin(); it != md.end(); ++it) {
        if (it.value().is_string()) continue;
        if (!opt.stringify_metadata) {
          std::string value = it.value().dump();
          if (value.size() > 60) value = value.substr(0, 57) + "...";
          return InvalidArgument("metadata key " + internal::QuoteName(it.key()) + " holds " + value +
                                 ", but safetensors' __metadata__ holds only strings (consent to "
                                 "storing its JSON text: stringify_metadata, --stringify-metadata)");
        }
        it.value() = it.value().dump();
        changed = true;
      }
      if (changed) set.metadata_json = md.dump();
      return Status::OK();
    }
    default:
      if (!opt.drop_metadata) {
        return Unsupported(Fmt(to) + " has no file metadata, and the input has " +
                           std::to_string(set.metadata_json.size()) +
                           " bytes of it (consent to dropping it: drop_metadata, --drop-metadata)");
      }
      set.metadata_json.clear();
      return Status::OK();
  }
}

// The names a tenbin or zio reader would give the tensors, from the name
// each stores (its info or its metadata "name"; "" for none).
std::vector<std::string> ReadBackNames(const TensorSet& set, Format to) {
  std::vector<std::string> preferred;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const TensorInfo& info = set.tensors[i].info;
    const std::string key = to == Format::kTenbin ? "tenbin_info" : "name";
    std::string stored = internal::IsPositionalName(info.name, i) ? std::string() : info.name;
    if (!info.metadata_json.empty()) {
      auto md = json::parse(info.metadata_json, nullptr, false);
      if (md.is_object() && md.contains(key) && md[key].is_string()) stored = md[key].get<std::string>();
    }
    // A tenbin reader names an info by webdataset's reading of it.
    preferred.push_back(to == Format::kTenbin ? tenbin::NameOfInfo(stored) : std::move(stored));
  }
  return internal::AssignNames(preferred);
}

bool FitsTenbinInfo(std::string_view name) {
  if (name.size() > tenbin::kInfoBytes) return false;
  for (unsigned char c : name) {
    if (c == 0 || c >= 0x80) return false;
  }
  return true;
}

// BTF stores no names: dense record r reads back as "r", a COO record as
// "r.indices" and "r.values" (btf.h).
std::vector<std::string> BtfReadBackNames(const TensorSet& set) {
  std::vector<std::string> names;
  std::map<std::string, std::uint64_t> coo_record;
  std::uint64_t records = 0;
  for (const Tensor& t : set.tensors) {
    const std::string& n = t.info.name;
    auto md = json::parse(t.info.metadata_json.empty() ? "{}" : t.info.metadata_json, nullptr, false);
    const bool coo = md.is_object() && md.contains("layout") && md["layout"] == "coo";
    const auto dot = n.rfind('.');
    if (!coo || dot == std::string::npos) {
      names.push_back(std::to_string(records++));
      continue;
    }
    auto [it, fresh] = coo_record.emplace(n.substr(0, dot), records);
    if (fresh) ++records;
    names.push_back(std::to_string(it->second) + n.substr(dot));
  }
  return names;
}

Status PrepareNames(TensorSet& set, Format to, const ConvertOptions& opt) {
  if (to == Format::kNpy && set.tensors.size() != 1) {
    return InvalidArgument("an .npy file holds exactly one tensor and there are " +
                           std::to_string(set.tensors.size()) +
                           " (select one, or write .npz)");
  }
  if (to != Format::kTenbin && to != Format::kBtf && to != Format::kZio) return Status::OK();
  if (to == Format::kTenbin && opt.drop_names) {
    for (std::size_t i = 0; i < set.tensors.size(); ++i) {
      Tensor& t = set.tensors[i];
      if (!FitsTenbinInfo(t.info.name)) t.info.name = std::to_string(i);
    }
  }
  const std::vector<std::string> back = to == Format::kBtf ? BtfReadBackNames(set) : ReadBackNames(set, to);
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    if (back[i] == t.info.name || opt.drop_names) continue;
    std::string why = to == Format::kBtf ? "BTF stores no names"
                      : to == Format::kTenbin
                          ? (FitsTenbinInfo(t.info.name) ? "tenbin's infos would clash"
                                                         : "tenbin keeps a name only as an info of at most 8 ASCII bytes")
                          : "its ZIO metadata \"name\" differs or clashes";
    return InvalidArgument(What(i, t) + ": " + why + ", so it would read back as " +
                           internal::QuoteName(back[i]) +
                           " (consent to positional names: drop_names, --drop-names)");
  }
  return Status::OK();
}

template <typename T>
void AddInto(std::byte* dst, const std::byte* src) {
  T a, b;
  std::memcpy(&a, dst, sizeof(T));
  std::memcpy(&b, src, sizeof(T));
  a = static_cast<T>(a + b);  // unsigned types wrap, as torch.s integer sums do
  std::memcpy(dst, &a, sizeof(T));
}

// Adds the element at `src` to the one at `dst`; false for dtypes whose sum
// is not plain machine arithmetic here (f16, bf16, f8, complex, bool).
bool AddElement(DType d, std::byte* dst, const std::byte* src) {
  switch (d) {
    case DType::kU8: AddInto<std::uint8_t>(dst, src); return true;
    case DType::kU16: AddInto<std::uint16_t>(dst, src); return true;
    case DType::kU32: AddInto<std::uint32_t>(dst, src); return true;
    case DType::kU64: AddInto<std::uint64_t>(dst, src); return true;
    case DType::kI8: AddInto<std::uint8_t>(dst, src); return true;  // two's complement: same bits
    case DType::kI16: AddInto<std::uint16_t>(dst, src); return true;
    case DType::kI32: AddInto<std::uint32_t>(dst, src); return true;
    case DType::kI64: AddInto<std::uint64_t>(dst, src); return true;
    case DType::kF32: AddInto<float>(dst, src); return true;
    case DType::kF64: AddInto<double>(dst, src); return true;
    default: return false;
  }
}

// The dense equivalent of a COO tensor (ConvertOptions::densify), in memory.
Result<Tensor> Densify(const Tensor& t, std::size_t i, const ConvertOptions& opt) {
  const std::string what = What(i, t);
  const std::size_t itemsize = ElementSize(t.info.dtype);
  if (itemsize == 0) {
    return Unsupported(what + ": cannot densify COO values of packed dtype " + std::string(DTypeName(t.info.dtype)));
  }
  auto bytes = DenseByteSize(t.info.dtype, t.info.shape);
  if (!bytes.ok()) return bytes.status().WithContext(what);
  if (*bytes > opt.max_densify_bytes) {
    return LimitExceeded(what + ": densified it would take " + std::to_string(*bytes) + " bytes, above the limit of " +
                         std::to_string(opt.max_densify_bytes) + " (max_densify_bytes)");
  }
  auto parts = SplitCoo(t.info, t.data);
  if (!parts.ok()) return parts.status().WithContext(what);
  const std::size_t rank = t.info.shape.size();
  std::vector<std::byte> dense(static_cast<std::size_t>(*bytes));
  std::vector<bool> seen(static_cast<std::size_t>(*bytes / itemsize));
  for (std::uint64_t k = 0; k < t.info.nnz; ++k) {
    std::uint64_t flat = 0;
    for (std::size_t j = 0; j < rank; ++j) {
      std::int64_t c;
      std::memcpy(&c, parts->indices.data() + 8 * (k * rank + j), 8);
      if (c < 0 || static_cast<std::uint64_t>(c) >= t.info.shape[j]) {
        return InvalidArgument(what + ": COO element " + std::to_string(k) + " has index " + std::to_string(c) +
                               " in dimension " + std::to_string(j) + ", outside [0, " +
                               std::to_string(t.info.shape[j]) + ")");
      }
      flat = flat * t.info.shape[j] + static_cast<std::uint64_t>(c);  // < element count: no overflow
    }
    std::byte* dst = dense.data() + flat * itemsize;
    const std::byte* src = parts->values.data() + k * itemsize;
    if (!seen[flat]) {
      std::memcpy(dst, src, itemsize);
      seen[flat] = true;
    } else if (!AddElement(t.info.dtype, dst, src)) {
      return Unsupported(what + ": COO element " + std::to_string(k) + " repeats a coordinate, and values of dtype " +
                         std::string(DTypeName(t.info.dtype)) + " are not summed when densifying");
    }
  }
  TensorInfo info;
  info.name = t.info.name;
  info.dtype = t.info.dtype;
  info.shape = t.info.shape;
  info.data_length = *bytes;
  info.metadata_json = t.info.metadata_json;
  return internal::OwnedTensor(std::move(info), std::move(dense));
}

// A native COO tensor (spec 1.1) goes to tsafe and to BTF's COO record;
// anywhere else only densified, with consent.
Status PrepareSparse(TensorSet& set, Format to, const ConvertOptions& opt) {
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    Tensor& t = set.tensors[i];
    if (t.info.layout != Layout::kCoo || to == Format::kTsafe || to == Format::kBtf) continue;
    if (!opt.densify) {
      return Unsupported(What(i, t) + ": a sparse COO tensor cannot be stored in " + Fmt(to) +
                         " (convert it to tsafe or btf, or consent to its dense equivalent: densify, --densify)");
    }
    TS_ASSIGN_OR_RETURN(t, Densify(t, i, opt));
  }
  return Status::OK();
}

// A GGUF block-quantized tensor, carried as u8 bytes marked "gguf.type"
// (gguf.h): its type name, or "" for any other tensor.
std::string GgufQuantType(const Tensor& t) {
  if (t.info.metadata_json.find("gguf.type") == std::string::npos) return {};
  auto md = json::parse(t.info.metadata_json, nullptr, false);
  if (!md.is_object() || !md.contains("gguf.type") || !md["gguf.type"].is_string()) return {};
  return md["gguf.type"].get<std::string>();
}

Status CheckDTypesAndRanks(const TensorSet& set, Format to) {
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    // Quantized blocks are meaningful only where the type travels with them;
    // as plain u8 they would be silently reinterpretable bytes.
    if (const std::string q = GgufQuantType(t);
        !q.empty() && to != Format::kTsafe && to != Format::kGguf && to != Format::kZio) {
      return Unsupported(What(i, t) + ": a GGUF block-quantized " + q + " tensor cannot be stored in " + Fmt(to) +
                         " (tsafe, zio and gguf keep it; dtype, --dtype f32|f16|bf16, dequantises it)");
    }
    if (!GgufQuantType(t).empty() && to == Format::kGguf) continue;  // the GGUF writer checks its blocks
    if (!FormatHoldsDType(to, t.info.dtype)) {
      std::string why;
      if ((to == Format::kNpy || to == Format::kNpz) && npy::DescrOf(t.info.dtype).ok()) {
        why = " (NumPy records it as an anonymous 1-byte void, <V1, so the dtype would be lost)";
      }
      return Unsupported(What(i, t) + ": dtype " + std::string(DTypeName(t.info.dtype)) + " cannot be stored in " +
                         Fmt(to) + why);
    }
    const std::size_t max_rank = to == Format::kGguf ? gguf::kMaxDims : to == Format::kTenbin ? 9 : 0;
    if (max_rank != 0 && t.info.shape.size() > max_rank) {
      return Unsupported(What(i, t) + ": rank " + std::to_string(t.info.shape.size()) + " exceeds " + Fmt(to) +
                         "'s limit of " + std::to_string(max_rank));
    }
    // A zero-size shape whose other dims multiply past 64 bits ([0, 2^32,
    // 2^32]): safetensors takes it, tsafe (FORMAT.md R30, NumPy's rule)
    // and the other writers do not.
    if (t.info.layout == Layout::kDense) {
      if (Result<std::uint64_t> n = DenseByteSize(t.info.dtype, t.info.shape);
          !n.ok() && n.status().code() == StatusCode::kOutOfRange) {
        return Unsupported(What(i, t) + ": " + n.status().message() + ", so " + Fmt(to) + " cannot hold it");
      }
    }
  }
  return Status::OK();
}

}  // namespace

bool FormatHoldsDType(Format f, DType d) {
  using D = DType;
  auto any_of = [d](std::initializer_list<DType> list) {
    for (DType x : list) {
      if (x == d) return true;
    }
    return false;
  };
  switch (f) {
    case Format::kTsafe:
      return true;
    case Format::kSafetensors:
      return safetensors::DTypeToName(d).has_value();
    case Format::kNpy:
    case Format::kNpz: {
      // Every descr NumPy reads back as the same dtype; "<V1" could be any
      // of five 1-byte floats (npy.h, ReadOptions::void_as).
      auto descr = npy::DescrOf(d);
      return descr.ok() && *descr != "<V1";
    }
    case Format::kGguf:
      return any_of({D::kF32, D::kF16, D::kBF16, D::kF64, D::kI8, D::kI16, D::kI32, D::kI64});
    case Format::kTenbin:
      return any_of({D::kF16, D::kF32, D::kF64, D::kI8, D::kI16, D::kI32, D::kI64, D::kU8, D::kU16, D::kU32,
                     D::kU64});
    case Format::kBtf:
      return any_of({D::kI8, D::kI16, D::kI32, D::kI64, D::kF32, D::kF64, D::kU8, D::kU16, D::kU32, D::kU64});
    case Format::kZio:
      return any_of({D::kF16, D::kF32, D::kF64, D::kI8, D::kI16, D::kI32, D::kI64, D::kU8, D::kU16, D::kU32,
                     D::kU64, D::kBool, D::kC64, D::kC128});
    case Format::kUnknown:
      break;
  }
  return false;
}

Result<TensorSet> PrepareForFormat(const TensorSet& in, Format to, const ConvertOptions& opt) {
  if (to == Format::kUnknown) return InvalidArgument("no output format");
  if (opt.alignment != 0 && to != Format::kTsafe && to != Format::kGguf) {
    return InvalidArgument("an alignment applies to tsafe and gguf only; " + Fmt(to) + " fixes its own layout");
  }
  if (opt.compress && to != Format::kNpz) return InvalidArgument("compression applies to npz only");
  TensorSet set = in;  // copies views and metadata text, never tensor bytes
  TS_RETURN_IF_ERROR(PrepareSparse(set, to, opt));
  TS_RETURN_IF_ERROR(CheckDTypesAndRanks(set, to));
  TS_RETURN_IF_ERROR(PrepareFileMetadata(set, to, opt));
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    TS_RETURN_IF_ERROR(PrepareTensorMetadata(set.tensors[i], i, to, opt));
  }
  TS_RETURN_IF_ERROR(PrepareNames(set, to, opt));
  return set;
}

}  // namespace tensorsafe
