// GGUF v3 encoding of TensorSets (plain dtypes, and ggml blocks as the
// reader carries them), byte for byte what gguf-py's
// GGUFWriter produces (docs/formats/gguf.md §Writer): header, key/value pairs
// in metadata order, tensor infos with dims innermost-first and offsets that
// are running sums of sizes padded to the alignment, zero padding to the
// alignment after the infos (even with no tensors) and after every tensor.
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "formats/gguf/internal.h"
#include "io/atomic_file.h"
#include "tensorsafe/formats/gguf.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::gguf {
namespace {

using tensorsafe::internal::AlignUp;
using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::Put32;
using tensorsafe::internal::Put64;
using tensorsafe::internal::QuoteName;

using tensorsafe::internal::Str;

// ggml's 64-byte name buffer holds 63 bytes and a NUL.
constexpr std::size_t kMaxNameBytes = 63;

struct Plan {
  std::string head;  // header, key/values, tensor infos, padding
  std::uint64_t alignment = kDefaultAlignment;
  std::uint64_t total = 0;  // file size
};

std::optional<std::uint32_t> GgmlCode(DType dtype) {
  for (std::uint32_t code = 0; code < 64; ++code) {
    auto t = LookupGgmlType(code);
    if (t && t->dtype == dtype) return code;
  }
  return std::nullopt;
}

// What a tensor info records: the ggml type code and the dims, outermost
// first (written reversed).
struct InfoFields {
  std::uint32_t code = 0;
  Shape dims;
};

// A tensor the reader made from ggml blocks: u8 [nbytes] marked
// {"gguf.type":..., "gguf.shape":[...]} (gguf.h). Written back as that
// type and shape, its bytes as they are (docs/formats/gguf.md §6), so
// GGUF -> TensorSet -> GGUF keeps quantized tensors byte for byte.
Result<InfoFields> QuantizedFields(const Tensor& t, const nlohmann::json& md, const std::string& ctx) {
  const auto& name = md["gguf.type"];
  auto type = name.is_string() ? FindGgmlType(name.get<std::string>()) : std::nullopt;
  if (!type) return Unsupported(ctx + ": \"gguf.type\" " + name.dump() + " is not a ggml type");
  InfoFields f{type->code, {}};
  const auto& shape = md.contains("gguf.shape") ? md["gguf.shape"] : nlohmann::json();
  if (!shape.is_array() || shape.size() > kMaxDims) {
    return InvalidArgument(ctx + ": a " + std::string(type->name) +
                           " tensor needs \"gguf.shape\": an array of at most 4 dims");
  }
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) return InvalidArgument(ctx + ": \"gguf.shape\" holds " + d.dump());
    f.dims.push_back(d.get<std::uint64_t>());
  }
  for (const char* key : {"block_elems", "block_bytes"}) {
    const std::uint64_t want = key[6] == 'e' ? type->block_elems : type->block_bytes;
    if (md.contains(key) && !(md[key].is_number_unsigned() && md[key].get<std::uint64_t>() == want)) {
      return InvalidArgument(ctx + ": \"" + key + "\" " + md[key].dump() + " is not " + std::string(type->name) +
                             "'s " + Str(want));
    }
  }
  if (t.info.dtype != DType::kU8 || t.info.shape.size() != 1 || t.info.layout != Layout::kDense) {
    return InvalidArgument(ctx + ": " + std::string(type->name) + " blocks must be carried as u8 [bytes], not " +
                           std::string(DTypeName(t.info.dtype)) + " " + ShapeToString(t.info.shape));
  }
  // The reader's size rule: whole blocks per row (the innermost dim).
  const std::uint64_t row = f.dims.empty() ? 1 : f.dims.back();
  if (row % type->block_elems != 0) {
    return InvalidArgument(ctx + ": row of " + Str(row) + " elements is not a multiple of the " +
                           std::string(type->name) + " block of " + Str(type->block_elems));
  }
  std::optional<std::uint64_t> bytes = CheckedMul(row / type->block_elems, type->block_bytes);
  for (std::size_t d = 0; d + 1 < f.dims.size() && bytes; ++d) bytes = CheckedMul(*bytes, f.dims[d]);
  if (!bytes || *bytes != t.data.size()) {
    return InvalidArgument(ctx + ": " + std::string(type->name) + " shape " + ShapeToString(f.dims) + " needs " +
                           (bytes ? Str(*bytes) : std::string("more than 2^64")) + " bytes, the data has " +
                           Str(t.data.size()));
  }
  return f;
}

Result<InfoFields> CheckTensor(const Tensor& t, std::uint64_t i) {
  const TensorInfo& info = t.info;
  const std::string ctx = "tensor " + Str(i) + " " + QuoteName(info.name);
  if (info.name.size() > kMaxNameBytes) {
    return InvalidArgument(ctx + ": name of " + Str(info.name.size()) + " bytes; ggml reads names of at most 63");
  }
  // ggml reads tensor names as C strings (reader.cc refuses them too).
  if (const auto nul = info.name.find('\0'); nul != std::string::npos) {
    return InvalidArgument(ctx + ": name has a NUL byte at position " + Str(nul) + "; ggml would read it as " +
                           QuoteName(std::string_view(info.name).substr(0, nul)));
  }
  if (!info.metadata_json.empty() && info.metadata_json.find("gguf.type") != std::string::npos) {
    auto md = nlohmann::json::parse(info.metadata_json, nullptr, /*allow_exceptions=*/false);
    if (md.is_object() && md.contains("gguf.type")) return QuantizedFields(t, md, ctx);
  }
  if (!GgmlCode(info.dtype)) {
    return Unsupported(ctx + ": dtype " + std::string(DTypeName(info.dtype)) +
                       " has no GGUF type; the writer takes f32, f16, bf16, f64, i8, i16, i32, i64, and "
                       "ggml blocks marked \"gguf.type\"");
  }
  if (info.layout != Layout::kDense) return Unsupported(ctx + ": only dense tensors can be written");
  if (info.shape.size() > kMaxDims) {
    return Unsupported(ctx + ": rank " + Str(info.shape.size()) + "; GGUF readers take at most " + Str(kMaxDims) +
                       " dimensions");
  }
  auto size = DenseByteSize(info.dtype, info.shape);
  if (!size.ok()) return size.status().WithContext(ctx);
  if (*size != t.data.size()) {
    return InvalidArgument(ctx + ": shape " + ShapeToString(info.shape) + " of " + std::string(DTypeName(info.dtype)) +
                           " needs " + Str(*size) + " bytes, the data has " + Str(t.data.size()));
  }
  return InfoFields{*GgmlCode(info.dtype), info.shape};
}

// The metadata with general.alignment set to options.alignment (a uint32,
// in tensorsafe.gguf_types), or as it is when that is 0. EncodeKeyValues
// checks the value.
Result<std::string> WithAlignment(const std::string& metadata_json, const WriteOptions& options) {
  if (options.alignment == 0) return metadata_json;
  auto md = nlohmann::ordered_json::object();
  if (!metadata_json.empty()) {
    md = nlohmann::ordered_json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
    if (!md.is_object()) return InvalidArgument("the file's metadata is not a JSON object");
  }
  md[std::string(internal::kAlignmentKey)] = options.alignment;
  auto& types = md["tensorsafe.gguf_types"];
  if (types.is_null()) types = nlohmann::ordered_json::object();
  if (types.is_object()) types[std::string(internal::kAlignmentKey)] = "uint32";
  return md.dump();
}

Result<Plan> BuildHead(const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(const std::string metadata, WithAlignment(set.metadata_json, options));
  TS_ASSIGN_OR_RETURN(internal::EncodedKeyValues kv, internal::EncodeKeyValues(metadata, options));
  Plan p;
  p.alignment = kv.alignment;
  std::string& h = p.head;
  Put32(h, internal::kMagic);
  Put32(h, kWriteVersion);
  Put64(h, set.tensors.size());
  Put64(h, kv.count);
  h += kv.bytes;
  std::unordered_map<std::string_view, std::uint64_t> seen;
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    TS_ASSIGN_OR_RETURN(InfoFields f, CheckTensor(t, i));
    auto [it, inserted] = seen.emplace(t.info.name, i);
    if (!inserted) {
      return InvalidArgument("tensor " + Str(i) + " " + QuoteName(t.info.name) + " has the name of tensor " +
                             Str(it->second));
    }
    Put64(h, t.info.name.size());
    h += t.info.name;
    Put32(h, static_cast<std::uint32_t>(f.dims.size()));
    for (auto d = f.dims.rbegin(); d != f.dims.rend(); ++d) Put64(h, *d);
    Put32(h, f.code);
    Put64(h, offset);
    auto padded = AlignUp(t.data.size(), p.alignment);
    auto next = padded ? CheckedAdd(offset, *padded) : std::nullopt;
    if (!next) return OutOfRange("tensor data size overflows 64 bits");
    offset = *next;
  }
  h.resize(*AlignUp(h.size(), p.alignment), '\0');
  auto total = CheckedAdd(h.size(), offset);
  if (!total) return OutOfRange("file size overflows 64 bits");
  p.total = *total;
  return p;
}

std::uint64_t PadBytes(std::uint64_t n, std::uint64_t alignment) { return *AlignUp(n, alignment) - n; }

}  // namespace

Result<std::string> Encode(const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(Plan p, BuildHead(set, options));
  if (p.total > std::string().max_size()) return OutOfRange("file too large for memory");
  std::string out = std::move(p.head);
  out.reserve(p.total);
  for (const Tensor& t : set.tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    out.append(PadBytes(t.data.size(), p.alignment), '\0');
  }
  return out;
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options) {
  TS_ASSIGN_OR_RETURN(Plan p, BuildHead(set, options));
  return tensorsafe::internal::WriteAtomically(path, options.sync, options.env, [&](WritableFile& file) -> Status {
    TS_RETURN_IF_ERROR(file.Append(std::as_bytes(std::span(p.head))));
    static constexpr std::array<std::byte, 4096> kZeros{};
    for (const Tensor& t : set.tensors) {
      TS_RETURN_IF_ERROR(file.Append(t.data));
      for (std::uint64_t pad = PadBytes(t.data.size(), p.alignment); pad > 0;) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(pad, kZeros.size()));
        TS_RETURN_IF_ERROR(file.Append(std::span(kZeros).first(n)));
        pad -= n;
      }
    }
    return Status::OK();
  });
}

bool HoldsDType(DType dtype) { return GgmlCode(dtype).has_value(); }

namespace internal {

std::vector<std::string> ConsumerWarnings(const std::string& metadata_json) {
  static constexpr std::string_view kKey = "general.architecture";
  if (metadata_json.find(kKey) != std::string::npos) {
    auto md = nlohmann::json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
    if (md.is_object() && md.contains(kKey)) return {};
  }
  return {
      "no general.architecture key: llama.cpp cannot load the file as a model, and transformers' GGUF "
      "loader stops with an IndexError; name one with --gguf-kv general.architecture=str:NAME (the "
      "architecture's own keys and tensor names are needed too: docs/formats/gguf.md §12)"};
}

}  // namespace internal

}  // namespace tensorsafe::gguf
