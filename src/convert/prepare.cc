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

#include "formats/codec_util.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/registry.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using json = nlohmann::ordered_json;  // keeps the metadata's key order

std::string What(std::size_t i, const Tensor& t) {
  return "tensor " + std::to_string(i) + " " + internal::QuoteName(t.info.name);
}

std::string Fmt(Format f) { return std::string(FormatName(f)); }

// The formats whose capabilities satisfy `pred`, for messages: "tsafe and
// gguf", "tsafe, gguf and zio".
template <typename Pred>
std::string FormatsWhere(Pred pred) {
  std::vector<std::string_view> names;
  for (const FormatInfo& row : AllFormats()) {
    if (pred(row.caps)) names.push_back(row.name);
  }
  std::string out;
  for (std::size_t k = 0; k < names.size(); ++k) {
    out += (k == 0 ? "" : k + 1 == names.size() ? " and " : ", ") + std::string(names[k]);
  }
  return out;
}

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

// Targets that re-encode metadata through nlohmann (GGUF's typed values,
// ZIO's JSON, safetensors' stringified values) would turn an integer wider
// than 64 bits into a double: refused rather than narrowed.
std::string NarrowedInteger(const internal::WideInteger& w, Format to) {
  return "metadata key " + internal::QuoteName(w.key) + " holds the integer " + w.text +
         ", wider than 64 bits, which " + Fmt(to) + " would narrow to a double (store it as a string)";
}

Status PrepareTensorMetadata(Tensor& t, std::size_t i, Format to, const Consent& opt) {
  const Capabilities& caps = InfoOf(to).caps;
  if (IsEmptyObjectText(t.info.metadata_json)) {
    t.info.metadata_json.clear();
    return Status::OK();
  }
  if (caps.tensor_metadata == Capabilities::Metadata::kAny) {
    if (!caps.wide_integers) {
      if (auto w = internal::FindWideInteger(t.info.metadata_json)) {
        return Unsupported(What(i, t) + ": " + NarrowedInteger(*w, to));
      }
    }
    return Status::OK();
  }
  TS_ASSIGN_OR_RETURN(json md, ParseObject(t.info.metadata_json, What(i, t)));
  const auto& own = caps.own_tensor_keys;
  const bool own_applies =
      !own.empty() && (caps.own_tensor_keys_apply == nullptr || caps.own_tensor_keys_apply(t.info.metadata_json));
  json kept = json::object();
  std::vector<std::string> lost;
  for (auto it = md.begin(); it != md.end(); ++it) {
    const bool is_own = own_applies && std::find(own.begin(), own.end(), it.key()) != own.end();
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

Status PrepareFileMetadata(TensorSet& set, Format to, const Consent& opt) {
  // Another format's bookkeeping keys stay with that format (GGUF's value
  // types: docs/formats/gguf.md §4).
  for (const FormatInfo& row : AllFormats()) {
    if (row.format != to && row.metadata_elsewhere != nullptr)
      set.metadata_json = row.metadata_elsewhere(set.metadata_json);
  }
  const Capabilities& caps = InfoOf(to).caps;
  const bool stringified = caps.file_metadata == Capabilities::Metadata::kStrings && opt.stringify_metadata;
  if ((caps.file_metadata == Capabilities::Metadata::kAny && !caps.wide_integers) || stringified) {
    if (auto w = internal::FindWideInteger(set.metadata_json)) return Unsupported(NarrowedInteger(*w, to));
  }
  // An empty object is kept where the target tells it from no metadata
  // (safetensors' `"__metadata__":{}` against none, which its reader gives
  // as {} and None; .tsafe's metadata_length 2 against 0), and dropped
  // elsewhere, with no consent needed.
  if (IsEmptyObjectText(set.metadata_json)) {
    if (!caps.empty_metadata_object) set.metadata_json.clear();
    return Status::OK();
  }
  switch (caps.file_metadata) {
    case Capabilities::Metadata::kAny:
      return Status::OK();  // any object (GGUF's writer refuses values it has no type for)
    case Capabilities::Metadata::kStrings: {
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
    case Capabilities::Metadata::kNone:
      if (!opt.drop_metadata) {
        return Unsupported(Fmt(to) + " has no file metadata, and the input has " +
                           std::to_string(set.metadata_json.size()) +
                           " bytes of it (consent to dropping it: drop_metadata, --drop-metadata)");
      }
      set.metadata_json.clear();
      return Status::OK();
  }
  return Internal("unknown Capabilities::Metadata value");  // the switch covers every value
}

Status PrepareNames(TensorSet& set, Format to, const Consent& opt) {
  const Capabilities& caps = InfoOf(to).caps;
  return caps.check_names == nullptr ? Status::OK() : caps.check_names(set, opt.drop_names);
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
Result<Tensor> Densify(const Tensor& t, std::size_t i, const Consent& opt) {
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
Status PrepareSparse(TensorSet& set, Format to, const Consent& opt) {
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    Tensor& t = set.tensors[i];
    if (t.info.layout != Layout::kCoo || InfoOf(to).caps.sparse_coo) continue;
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

// True when `caps` keeps a tensor's "gguf.type" marker: with any
// per-tensor metadata, or as one of the format's own keys (GGUF's).
bool KeepsQuantMarker(const Capabilities& caps) {
  return caps.tensor_metadata == Capabilities::Metadata::kAny ||
         std::find(caps.own_tensor_keys.begin(), caps.own_tensor_keys.end(), "gguf.type") != caps.own_tensor_keys.end();
}

Status CheckDTypesAndRanks(const TensorSet& set, Format to) {
  const Capabilities& caps = InfoOf(to).caps;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    // Quantized blocks are meaningful only where the type travels with them;
    // as plain u8 they would be silently reinterpretable bytes.
    const std::string q = GgufQuantType(t);
    if (!q.empty() && !KeepsQuantMarker(caps)) {
      return Unsupported(What(i, t) + ": a GGUF block-quantized " + q + " tensor cannot be stored in " + Fmt(to) +
                         " (" + FormatsWhere(KeepsQuantMarker) +
                         " keep it; dtype, --dtype f32|f16|bf16, dequantises it)");
    }
    // The GGUF writer checks its own blocks.
    if (!q.empty() && caps.tensor_metadata != Capabilities::Metadata::kAny) continue;
    if (!FormatHoldsDType(to, t.info.dtype)) {
      std::string why;
      if (caps.holds_dtype == npy::HoldsDType && npy::DescrOf(t.info.dtype).ok()) {
        why = " (NumPy records it as an anonymous 1-byte void, <V1, so the dtype would be lost)";
      }
      return Unsupported(What(i, t) + ": dtype " + std::string(DTypeName(t.info.dtype)) + " cannot be stored in " +
                         Fmt(to) + why);
    }
    if (caps.max_rank != 0 && t.info.shape.size() > caps.max_rank) {
      return Unsupported(What(i, t) + ": rank " + std::to_string(t.info.shape.size()) + " exceeds " + Fmt(to) +
                         "'s limit of " + std::to_string(caps.max_rank));
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

Result<TensorSet> PrepareForFormat(const TensorSet& in, Format to, const Consent& opt,
                                   const FormatWriteOptions& options) {
  return PrepareForFormat(TensorSet(in), to, opt, options);  // copies views and metadata text, never tensor bytes
}

Result<TensorSet> PrepareForFormat(TensorSet&& in, Format to, const Consent& opt, const FormatWriteOptions& options) {
  if (to == Format::kUnknown) return InvalidArgument("no output format");
  const Capabilities& caps = InfoOf(to).caps;
  if (options.alignment != 0 && !caps.alignment) {
    return InvalidArgument("an alignment applies to " +
                           FormatsWhere([](const Capabilities& c) { return c.alignment; }) + " only; " + Fmt(to) +
                           " fixes its own layout");
  }
  if (options.compress && !caps.compress) {
    return InvalidArgument("compression applies to " + FormatsWhere([](const Capabilities& c) { return c.compress; }) +
                           " only");
  }
  TensorSet set = std::move(in);
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
