// tenbin codec. Layout: docs/formats/tenbin.md §2 (from formats.md §3.2).
#include "tensorsafe/formats/tenbin.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/codec_util.h"
#include "io/internal.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::tenbin {
namespace {

using internal::CheckedMul;

constexpr std::string_view kMagic = "~TenBin~";
constexpr std::size_t kFixedHeaderBytes = 24;  // dtype, info, ndim
constexpr std::string_view kInfoKey = "tenbin_info";

struct DTypeCode {
  DType dtype;
  std::string_view code;
};
// webdataset's table, with uint32 spelled "u4" (its "unit32" typo made uint32
// unencodable and "u4" undecodable: docs/formats/tenbin.md §4).
constexpr DTypeCode kCodes[] = {
    {DType::kF16, "f2"}, {DType::kF32, "f4"}, {DType::kF64, "f8"}, {DType::kI8, "i1"},
    {DType::kI16, "i2"}, {DType::kI32, "i4"}, {DType::kI64, "i8"}, {DType::kU8, "u1"},
    {DType::kU16, "u2"}, {DType::kU32, "u4"}, {DType::kU64, "u8"},
};

std::optional<std::string_view> CodeOf(DType d) {
  for (const auto& c : kCodes) {
    if (c.dtype == d) return c.code;
  }
  return std::nullopt;
}
std::optional<DType> DTypeOf(std::string_view code) {
  for (const auto& c : kCodes) {
    if (c.code == code) return c.dtype;
  }
  return std::nullopt;
}

// An 8-byte text field without its trailing NUL padding.
std::string Field8(const std::byte* p) {
  std::string s(reinterpret_cast<const char*>(p), 8);
  s.erase(s.find_last_not_of('\0') + 1);
  return s;
}

// The DTYPE field: ASCII bytes 1..127, then NUL padding. webdataset writes
// only the codes of its table, so anything else is corrupt.
Result<std::string> ReadDTypeField(const std::byte* p) {
  std::string s = Field8(p);
  for (unsigned char c : s) {
    if (c == 0 || c >= 0x80) {
      return Corruption("dtype " + internal::QuoteName(s) + " is not ASCII text followed by NUL padding");
    }
  }
  return s;
}

// The INFO field as written: 8 ASCII bytes without their trailing NULs.
// webdataset's str64 packs any ASCII text of up to 8 characters, NULs
// included, and its decoder takes any ASCII (tenbin.md §3); only bytes
// of 0x80 and above (UnicodeDecodeError there) are corrupt.
Result<std::string> ReadInfoField(const std::byte* p) {
  std::string s = Field8(p);
  for (unsigned char c : s) {
    if (c >= 0x80) return Corruption("info " + internal::QuoteName(s) + " is not ASCII");
  }
  return s;
}

// As webdataset's str64: at most 8 ASCII characters; NULs are allowed and
// written as they are.
Status CheckInfo(std::string_view info) {
  if (info.size() > kInfoBytes) {
    return InvalidArgument("info " + internal::QuoteName(info) + " is " + std::to_string(info.size()) +
                           " bytes; tenbin holds at most 8");
  }
  for (unsigned char c : info) {
    if (c >= 0x80) return InvalidArgument("info " + internal::QuoteName(info) + " must be ASCII");
  }
  return Status::OK();
}

std::string Where(std::size_t index, const std::vector<std::uint64_t>& offsets) {
  std::string s = "chunk " + std::to_string(index);
  if (index < offsets.size()) s += " at offset " + std::to_string(offsets[index]);
  return s;
}

// The info a tensor is written with: its kept info, else its name unless the
// name is positional (so a decoded file re-encodes to the same infos).
std::string InfoFor(const Tensor& t, std::size_t i, const WriteOptions& opt) {
  if (!opt.names_as_infos) return std::string();
  if (!t.info.metadata_json.empty()) {
    auto j = nlohmann::json::parse(t.info.metadata_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains(kInfoKey) && j[kInfoKey].is_string()) {
      return j[kInfoKey].get<std::string>();
    }
  }
  if (internal::IsPositionalName(t.info.name, i)) return std::string();
  return t.info.name;
}

Result<std::vector<std::string>> EncodePayloadsImpl(std::span<const ArrayRef> arrays,
                                                    std::span<const std::string> names, const WriteOptions& opt) {
  std::vector<std::string> out;
  out.reserve(arrays.size() * 2);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const ArrayRef& a = arrays[i];
    std::string what = "tensor " + std::to_string(i);
    if (i < names.size()) what += " " + internal::QuoteName(names[i]);
    auto header = EncodeHeaderPayload(a.header, opt);
    if (!header.ok()) return header.status().WithContext(what);
    TS_RETURN_IF_ERROR(internal::CheckDenseSize(a.header.dtype, a.header.shape, a.data.size(), what));
    out.push_back(std::move(*header));
    std::string data(reinterpret_cast<const char*>(a.data.data()), a.data.size());
    const std::size_t w = ElementSize(a.header.dtype);
    if (a.big_endian && w > 1) {
      for (std::size_t off = 0; off < data.size(); off += w) std::reverse(&data[off], &data[off + w]);
    }
    out.push_back(std::move(data));
  }
  return out;
}

}  // namespace

std::string NameOfInfo(std::string_view info) {
  const std::size_t first = info.find_first_not_of('\0');
  if (first == std::string_view::npos) return std::string();
  const std::size_t last = info.find_last_not_of('\0');
  std::string_view name = info.substr(first, last - first + 1);
  return name.find('\0') == std::string_view::npos ? std::string(name) : std::string();
}

Result<std::string> EncodeHeaderPayload(const ArrayHeader& h, const WriteOptions& opt) {
  auto code = CodeOf(h.dtype);
  if (!code) {
    return Unsupported("dtype " + std::string(DTypeName(h.dtype)) +
                       " has no tenbin code (tenbin has f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8)");
  }
  if (h.shape.size() > opt.max_rank) {
    return Unsupported("rank " + std::to_string(h.shape.size()) + " exceeds the tenbin limit of " +
                       std::to_string(opt.max_rank));
  }
  TS_RETURN_IF_ERROR(CheckInfo(h.info));
  for (std::uint64_t d : h.shape) {
    if (d > static_cast<std::uint64_t>(INT64_MAX)) {
      return InvalidArgument("dimension " + std::to_string(d) + " does not fit tenbin's int64");
    }
  }
  std::string out(kFixedHeaderBytes, '\0');
  std::memcpy(out.data(), code->data(), code->size());
  std::memcpy(out.data() + 8, h.info.data(), h.info.size());
  internal::Store64(reinterpret_cast<std::byte*>(out.data() + 16), h.shape.size());
  for (std::uint64_t d : h.shape) internal::Put64(out, d);
  return out;
}

Result<ArrayHeader> DecodeHeaderPayload(std::span<const std::byte> p, const ReadOptions& opt) {
  if (p.size() < kFixedHeaderBytes) {
    return Corruption("header payload is " + std::to_string(p.size()) +
                      " bytes, shorter than the 24 bytes of dtype, info and ndim");
  }
  ArrayHeader h;
  TS_ASSIGN_OR_RETURN(std::string code, ReadDTypeField(p.data()));
  auto dtype = DTypeOf(code);
  if (!dtype) return Unsupported("unknown dtype " + internal::QuoteName(code));
  h.dtype = *dtype;
  TS_ASSIGN_OR_RETURN(h.info, ReadInfoField(p.data() + 8));
  const auto ndim = static_cast<std::int64_t>(internal::Load64(p.data() + 16));
  if (ndim < 0) return Corruption("negative ndim " + std::to_string(ndim));
  if (static_cast<std::uint64_t>(ndim) > opt.limits.max_rank) {
    return LimitExceeded("ndim " + std::to_string(ndim) + " exceeds the limit of " +
                         std::to_string(opt.limits.max_rank));
  }
  // webdataset silently truncates a short shape; a size mismatch is corrupt.
  const std::uint64_t want = kFixedHeaderBytes + 8 * static_cast<std::uint64_t>(ndim);
  if (p.size() != want) {
    return Corruption("header payload is " + std::to_string(p.size()) + " bytes, but ndim " + std::to_string(ndim) +
                      " needs " + std::to_string(want));
  }
  for (std::int64_t i = 0; i < ndim; ++i) {
    const auto d = static_cast<std::int64_t>(internal::Load64(p.data() + 24 + 8 * i));
    if (d < 0) return Corruption("dimension " + std::to_string(i) + " is negative (" + std::to_string(d) + ")");
    h.shape.push_back(static_cast<std::uint64_t>(d));
  }
  return h;
}

Result<std::vector<std::span<const std::byte>>> SplitChunks(std::span<const std::byte> bytes,
                                                            const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  std::vector<std::span<const std::byte>> out;
  std::uint64_t pos = 0;
  const std::uint64_t size = bytes.size();
  const std::uint64_t max_chunks = CheckedMul(opt.limits.max_tensor_count, 2).value_or(UINT64_MAX);
  for (std::size_t i = 0; pos < size; ++i) {
    const std::string where = ctx + "chunk " + std::to_string(i) + " at offset " + std::to_string(pos);
    if (out.size() >= max_chunks) {
      return LimitExceeded(where + ": more than " + std::to_string(opt.limits.max_tensor_count) + " arrays");
    }
    if (size - pos < kChunkHeaderSize) {
      return Corruption(where + ": " + std::to_string(size - pos) +
                        " bytes remain, fewer than the 16-byte chunk header");
    }
    if (std::memcmp(bytes.data() + pos, kMagic.data(), kMagic.size()) != 0) {
      return Corruption(where + ": bad magic " +
                        internal::QuoteName(std::string_view(reinterpret_cast<const char*>(bytes.data() + pos), 8)) +
                        ", expected \"~TenBin~\"");
    }
    const auto n = static_cast<std::int64_t>(internal::Load64(bytes.data() + pos + 8));
    const std::uint64_t start = pos + kChunkHeaderSize;
    const std::uint64_t remain = size - start;
    if (n < 0) return Corruption(where + ": negative length " + std::to_string(n));
    const auto len = static_cast<std::uint64_t>(n);
    if (len > remain) {
      return Corruption(where + ": length " + std::to_string(len) + " exceeds the " + std::to_string(remain) +
                        " bytes that remain");
    }
    const std::uint64_t padded = *internal::AlignUp(len, kChunkAlignment);  // len < 2^63
    if (padded > remain) {
      return Corruption(where + ": length " + std::to_string(len) + " padded to " + std::to_string(padded) +
                        " exceeds the " + std::to_string(remain) + " bytes that remain (missing padding)");
    }
    if (opt.require_zero_padding) {
      for (std::uint64_t k = start + len; k < start + padded; ++k) {
        if (bytes[k] != std::byte{0}) {
          return Corruption(where + ": padding byte at offset " + std::to_string(k) + " is not zero");
        }
      }
    }
    out.push_back(bytes.subspan(start, len));
    pos = start + padded;
  }
  return out;
}

namespace {

Result<TensorSet> DecodePayloadsAt(std::span<const std::span<const std::byte>> payloads,
                                   const std::vector<std::uint64_t>& offsets, std::shared_ptr<const void> owner,
                                   const std::string& display_name, const ReadOptions& opt) {
  const std::string ctx = internal::Context(display_name);
  if (payloads.size() % 2 != 0) {
    const std::size_t i = payloads.size() - 1;
    return Corruption(ctx + Where(i, offsets) + ": header chunk without a data chunk");
  }
  if (payloads.size() / 2 > opt.limits.max_tensor_count) {
    return LimitExceeded(ctx + std::to_string(payloads.size() / 2) + " arrays exceed the limit of " +
                         std::to_string(opt.limits.max_tensor_count));
  }
  std::vector<ArrayHeader> headers;
  std::vector<std::string> preferred;
  for (std::size_t i = 0; i < payloads.size(); i += 2) {
    auto h = DecodeHeaderPayload(payloads[i], opt);
    const std::string where = ctx + Where(i, offsets) + " (array " + std::to_string(i / 2) + ")";
    if (!h.ok()) return h.status().WithContext(where);
    // A shape whose byte size overflows cannot describe real data: corrupt.
    auto size = DenseByteSize(h->dtype, h->shape);
    if (!size.ok()) return Corruption(where + ": " + size.status().message());
    if (*size != payloads[i + 1].size()) {
      return Corruption(ctx + Where(i + 1, offsets) + " (array " + std::to_string(i / 2) + "): data chunk has " +
                        std::to_string(payloads[i + 1].size()) + " bytes, but shape " + ShapeToString(h->shape) +
                        " of " + std::string(*CodeOf(h->dtype)) + " needs " + std::to_string(*size));
    }
    preferred.push_back(NameOfInfo(h->info));
    headers.push_back(std::move(*h));
  }
  const std::vector<std::string> names = internal::AssignNames(preferred);
  TensorSet set;
  for (std::size_t k = 0; k < headers.size(); ++k) {
    TensorInfo info;
    info.name = names[k];
    info.dtype = headers[k].dtype;
    info.shape = std::move(headers[k].shape);
    info.data_length = payloads[2 * k + 1].size();
    // Keep an info the name cannot reproduce on Encode (see InfoFor).
    const std::string& raw = headers[k].info;
    if (!raw.empty() && (names[k] != raw || internal::IsPositionalName(raw, k))) {
      info.metadata_json = nlohmann::json{{kInfoKey, raw}}.dump();
    }
    set.tensors.push_back(
        internal::ViewOrCopy(std::move(info), payloads[2 * k + 1], owner, ElementSize(headers[k].dtype)));
  }
  return set;
}

}  // namespace

Result<TensorSet> DecodePayloads(std::span<const std::span<const std::byte>> payloads,
                                 std::shared_ptr<const void> owner, const std::string& display_name,
                                 const ReadOptions& opt) {
  return DecodePayloadsAt(payloads, {}, std::move(owner), display_name, opt);
}

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto payloads, SplitChunks(bytes, display_name, opt));
  // Messages name each chunk by where it starts (its magic).
  std::vector<std::uint64_t> chunk_offsets;
  for (const auto& p : payloads) {
    chunk_offsets.push_back(static_cast<std::uint64_t>(p.data() - bytes.data()) - kChunkHeaderSize);
  }
  auto set = DecodePayloadsAt(payloads, chunk_offsets, std::move(owner), display_name, opt);
  if (set.ok()) {
    for (std::size_t k = 0; k < set->tensors.size(); ++k) {
      set->tensors[k].info.data_offset = chunk_offsets[2 * k + 1] + kChunkHeaderSize;
    }
  }
  return set;
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto region, internal::EnvOr(opt.env)->Map(path));
  return Decode(region->bytes(), region, path, opt);
}

std::string JoinChunks(std::span<const std::string> payloads) {
  std::string out;
  for (const std::string& p : payloads) {
    out.append(kMagic);
    internal::Put64(out, p.size());
    out.append(p);
    out.append(*internal::AlignUp(p.size(), kChunkAlignment) - p.size(), '\0');
  }
  return out;
}

Result<std::vector<std::string>> EncodePayloads(std::span<const ArrayRef> arrays, const WriteOptions& opt) {
  return EncodePayloadsImpl(arrays, {}, opt);
}

namespace {

// The arrays of `set` with their infos, checking that every tensor is dense.
Result<std::vector<ArrayRef>> ArraysOf(const TensorSet& set, const WriteOptions& opt) {
  std::vector<ArrayRef> arrays;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    if (t.info.layout != Layout::kDense) {
      return InvalidArgument("tensor " + std::to_string(i) + " " + internal::QuoteName(t.info.name) +
                             ": tenbin stores dense tensors only");
    }
    arrays.push_back(ArrayRef{ArrayHeader{t.info.dtype, InfoFor(t, i, opt), t.info.shape}, t.data});
  }
  return arrays;
}

void AppendChunkHead(std::string& out, std::uint64_t payload_size) {
  out.append(kMagic);
  internal::Put64(out, payload_size);
}

// The chunks of `set` (§2) as pieces: the header chunks owned, the data
// chunks viewing the tensors' bytes, so WriteFile streams them.
Result<internal::Pieces> EncodePieces(const TensorSet& set, const WriteOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto arrays, ArraysOf(set, opt));
  internal::Pieces out;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const ArrayRef& a = arrays[i];
    const std::string what = "tensor " + std::to_string(i) + " " + internal::QuoteName(set.tensors[i].info.name);
    auto header = EncodeHeaderPayload(a.header, opt);
    if (!header.ok()) return header.status().WithContext(what);
    TS_RETURN_IF_ERROR(internal::CheckDenseSize(a.header.dtype, a.header.shape, a.data.size(), what));
    std::string head;
    AppendChunkHead(head, header->size());
    head.append(*header);
    head.append(*internal::AlignUp(header->size(), kChunkAlignment) - header->size(), '\0');
    AppendChunkHead(head, a.data.size());
    out.Append(std::move(head));
    out.AppendView(a.data);
    out.AppendZeros(*internal::AlignUp(a.data.size(), kChunkAlignment) - a.data.size());
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> EncodePayloads(const TensorSet& set, const WriteOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto arrays, ArraysOf(set, opt));
  std::vector<std::string> names;
  for (const Tensor& t : set.tensors) names.push_back(t.info.name);
  return EncodePayloadsImpl(arrays, names, opt);
}

Result<std::string> Encode(const TensorSet& set, const WriteOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto pieces, EncodePieces(set, opt));
  return pieces.Join();
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& opt) {
  auto pieces = EncodePieces(set, opt);
  if (!pieces.ok()) return pieces.status().WithContext(path);
  return WritePiecesAtomically(path, *pieces, opt.sync, opt.env);
}

bool HoldsDType(DType dtype) { return CodeOf(dtype).has_value(); }

namespace {
bool FitsInfo(std::string_view name) {
  if (name.size() > kInfoBytes) return false;
  for (unsigned char c : name) {
    if (c == 0 || c >= 0x80) return false;
  }
  return true;
}
}  // namespace

Status CheckNames(TensorSet& set, bool drop_names) {
  if (drop_names) {
    for (std::size_t i = 0; i < set.tensors.size(); ++i) {
      Tensor& t = set.tensors[i];
      if (!FitsInfo(t.info.name)) t.info.name = std::to_string(i);
    }
  }
  // A reader names an info by webdataset's reading of it.
  const std::vector<std::string> back =
      internal::ReadBackNames(set, "tenbin_info", [](std::string_view stored) { return NameOfInfo(stored); });
  return internal::CheckReadBackNames(set, back, drop_names, [](const Tensor& t) {
    return std::string(FitsInfo(t.info.name) ? "tenbin's infos would clash"
                                             : "tenbin keeps a name only as an info of at most 8 ASCII bytes");
  });
}

}  // namespace tensorsafe::tenbin
