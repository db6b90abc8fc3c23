// The format table (tensorsafe/formats/registry.h): one row per format. A
// row's functions adapt the table's option structs to the codec's own; the
// rules themselves (dtype tables, names, limits) live in the codecs.
#include "tensorsafe/formats/registry.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

#include "formats/gguf/internal.h"
#include "formats/internal.h"
#include "io/internal.h"
#include "remote/remote_file.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_kv.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/pytorch.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tsafe/layout.h"
#include "tsafe/tensor_set.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using Bytes = std::span<const std::byte>;
using Owner = std::shared_ptr<const void>;
using Md = Capabilities::Metadata;

bool StartsWith(Bytes b, std::string_view magic) {
  return b.size() >= magic.size() && std::memcmp(b.data(), magic.data(), magic.size()) == 0;
}

// Each codec's options from the table's: the env, and what applies.
template <typename Options>
Options ReadOpts(const FormatReadOptions& o) {
  Options out;
  out.env = o.env;
  return out;
}
template <typename Options>
Options WriteOpts(const FormatWriteOptions& o) {
  Options out;
  out.sync = o.sync;
  out.env = o.env;
  return out;
}

// ---- tsafe (FORMAT.md) ----
constexpr std::string_view kTsafeExt[] = {"tsafe"};
bool SniffTsafe(Bytes b) {
  return b.size() >= internal::kMagic.size() && std::equal(internal::kMagic.begin(), internal::kMagic.end(), b.begin());
}

// ---- safetensors ----
constexpr std::string_view kStAliases[] = {"st"};
constexpr std::string_view kStExt[] = {"safetensors"};
// An 8-byte header length, then a JSON object.
bool SniffSafetensors(Bytes b) {
  return b.size() >= 9 && static_cast<char>(b[8]) == '{' && internal::Load64(b.data()) >= 2;
}
bool StHolds(DType d) { return safetensors::DTypeToName(d).has_value(); }
Result<TensorSet> ReadSt(const std::string& p, const FormatReadOptions& o) {
  return safetensors::ReadFile(p, ReadOpts<safetensors::ReadOptions>(o));
}
Result<TensorSet> DecodeSt(Bytes b, Owner own, const std::string& n) { return safetensors::Decode(b, own, n); }
Status WriteSt(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return safetensors::WriteFile(p, s, WriteOpts<safetensors::WriteOptions>(o));
}
Result<std::string> EncodeSt(const TensorSet& s, const FormatWriteOptions&) { return safetensors::Encode(s); }
// From the header alone: a file at a URL costs a few MiB to list, not its size.
Result<safetensors::Header> StHeader(const std::string& p) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, Env::Default()->OpenRead(p));
  return safetensors::ReadHeader(*f);
}
Result<FileDescription> DescribeSt(const std::string& p) {
  TS_ASSIGN_OR_RETURN(safetensors::Header h, StHeader(p));
  FileDescription d;
  d.tensor_count = h.tensors.size();
  d.data_bytes = h.data_length;
  d.metadata_json = std::move(h.metadata_json);
  return d;
}
Status ForEachStInfo(const std::string& p, const std::function<bool(const TensorInfo&)>& fn) {
  TS_ASSIGN_OR_RETURN(safetensors::Header h, StHeader(p));
  for (const TensorInfo& i : h.tensors) {
    if (!fn(i)) break;
  }
  return Status::OK();
}
// read_tensor of the formats read from their headers at URLs. A local
// file's tensor views its mapping (`cat` of a large tensor reads only what
// it shows); a URL's is fetched alone, after the header.
Status NoTensor(const std::string& p, std::string_view name) {
  return NotFound(p + ": no tensor named " + internal::QuoteName(name));
}
Result<Tensor> TensorOf(Result<TensorSet> set, const std::string& p, std::string_view name) {
  TS_RETURN_IF_ERROR(set.status());
  for (Tensor& t : set->tensors) {
    if (t.info.name == name) return std::move(t);
  }
  return NoTensor(p, name);
}
// The tensor `name` of `infos` (what `f`'s header says), its bytes read
// alone into fresh memory.
Result<Tensor> FetchTensor(const RandomAccessFile& f, std::vector<TensorInfo> infos, std::string_view name) {
  for (TensorInfo& info : infos) {
    if (info.name != name) continue;
    auto bytes = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(info.data_length));
    TS_RETURN_IF_ERROR(f.ReadAt(info.data_offset, *bytes));
    const std::span<const std::byte> data(*bytes);
    return Tensor{std::move(info), data, std::move(bytes)};
  }
  return NoTensor(f.name(), name);
}
Result<Tensor> ReadStTensor(const std::string& p, std::string_view name) {
  if (!internal::IsRemotePath(p)) return TensorOf(safetensors::ReadFile(p), p, name);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, Env::Default()->OpenRead(p));
  TS_ASSIGN_OR_RETURN(safetensors::Header h, safetensors::ReadHeader(*f));
  return FetchTensor(*f, std::move(h.tensors), name);
}

// ---- npy ----
constexpr std::string_view kNpyExt[] = {"npy"};
bool SniffNpy(Bytes b) { return StartsWith(b, "\x93NUMPY"); }
Result<TensorSet> ReadNpy(const std::string& p, const FormatReadOptions& o) {
  return npy::ReadFile(p, ReadOpts<npy::ReadOptions>(o));
}
Result<TensorSet> DecodeNpy(Bytes b, Owner own, const std::string& n) { return npy::Decode(b, own, n); }
Status WriteNpy(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return npy::WriteFile(p, s, WriteOpts<npy::WriteOptions>(o));
}
Result<std::string> EncodeNpy(const TensorSet& s, const FormatWriteOptions&) {
  TensorSet one = s;
  TS_RETURN_IF_ERROR(npy::CheckNames(one, false));
  return npy::Encode(s.tensors[0]);
}

// ---- npz: the only ZIP container we read, whatever its name ----
constexpr std::string_view kNpzExt[] = {"npz"};
// Any ZIP (weak: a torch.save archive, sniffed first, is a ZIP too).
bool SniffNpz(Bytes b) { return StartsWith(b, "PK\x03\x04") || StartsWith(b, "PK\x05\x06"); }
Result<TensorSet> ReadNpz(const std::string& p, const FormatReadOptions& o) {
  return npz::ReadFile(p, ReadOpts<npz::ReadOptions>(o));
}
Result<TensorSet> DecodeNpz(Bytes b, Owner own, const std::string& n) { return npz::Decode(b, own, n); }
Status WriteNpz(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  auto wo = WriteOpts<npz::WriteOptions>(o);
  wo.compress = o.compress;
  return npz::WriteFile(p, s, wo);
}
Result<std::string> EncodeNpz(const TensorSet& s, const FormatWriteOptions& o) {
  npz::WriteOptions wo;
  wo.compress = o.compress;
  return npz::Encode(s, wo);
}

// ---- GGUF ----
constexpr std::string_view kGgufExt[] = {"gguf"};
// Kept on a ggml block tensor (gguf.h: Decode marks them "gguf.type").
constexpr std::string_view kGgufKeys[] = {"gguf.type", "gguf.shape", "block_elems", "block_bytes"};
bool GgufKeysApply(std::string_view md) {
  auto j = nlohmann::json::parse(md, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("gguf.type");
}
bool SniffGguf(Bytes b) { return StartsWith(b, "GGUF"); }
Result<TensorSet> ReadGguf(const std::string& p, const FormatReadOptions& o) {
  return gguf::ReadFile(p, ReadOpts<gguf::ReadOptions>(o));
}
Result<TensorSet> DecodeGguf(Bytes b, Owner own, const std::string& n) { return gguf::Decode(b, own, n); }
gguf::WriteOptions GgufWriteOpts(const FormatWriteOptions& o) {
  auto wo = WriteOpts<gguf::WriteOptions>(o);
  wo.alignment = o.alignment;
  return wo;
}
Status WriteGguf(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return gguf::WriteFile(p, s, GgufWriteOpts(o));
}
Result<std::string> EncodeGguf(const TensorSet& s, const FormatWriteOptions& o) {
  return gguf::Encode(s, GgufWriteOpts(o));
}
Result<std::string> EditGguf(const std::string& metadata_json, std::span<const std::string> sets,
                             std::span<const std::string> dels) {
  std::vector<gguf::KeyValueEdit> parsed;
  for (const std::string& e : sets) {
    auto kv = gguf::ParseKeyValueEdit(e);
    if (!kv.ok()) return kv.status();
    parsed.push_back(std::move(*kv));
  }
  return gguf::EditKeyValues(metadata_json, parsed, dels);
}
std::vector<std::string> GgufWarnings(const TensorSet& s) { return gguf::internal::ConsumerWarnings(s.metadata_json); }

// A URL's header alone (gguf::ReadHeader, doubling prefixes); a local file
// mapped and parsed once, its data untouched.
Result<TensorSet> GgufHeader(const std::string& p) {
  if (!internal::IsRemotePath(p)) return gguf::ReadFile(p);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, Env::Default()->OpenRead(p));
  return gguf::ReadHeader(*f);
}
Status ForEachGgufInfo(const std::string& p, const std::function<bool(const TensorInfo&)>& fn) {
  TS_ASSIGN_OR_RETURN(TensorSet set, GgufHeader(p));
  for (const Tensor& t : set.tensors) {
    if (!fn(t.info)) break;
  }
  return Status::OK();
}
Result<Tensor> ReadGgufTensor(const std::string& p, std::string_view name) {
  if (!internal::IsRemotePath(p)) return TensorOf(gguf::ReadFile(p), p, name);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, Env::Default()->OpenRead(p));
  TS_ASSIGN_OR_RETURN(TensorSet set, gguf::ReadHeader(*f));
  std::vector<TensorInfo> infos;
  infos.reserve(set.tensors.size());
  for (Tensor& t : set.tensors) infos.push_back(std::move(t.info));
  return FetchTensor(*f, std::move(infos), name);
}

// Data aligned to general.alignment, 32 when the key is absent (the reader
// checked it).
Result<FileDescription> DescribeGguf(const std::string& path) {
  TS_ASSIGN_OR_RETURN(TensorSet set, GgufHeader(path));
  FileDescription l = internal::Describe(set);
  auto md = nlohmann::json::parse(set.metadata_json.empty() ? "{}" : set.metadata_json, nullptr, false);
  l.alignment = md.is_object() && md.contains("general.alignment") && md["general.alignment"].is_number_unsigned()
                    ? md["general.alignment"].get<std::uint64_t>()
                    : gguf::kDefaultAlignment;
  return l;
}

// ---- tenbin ----
constexpr std::string_view kTenbinAliases[] = {"ten"};
constexpr std::string_view kTenbinExt[] = {"ten", "tenbin"};
constexpr std::string_view kTenbinKeys[] = {"tenbin_info"};
bool SniffTenbin(Bytes b) { return StartsWith(b, "~TenBin~"); }
Result<TensorSet> ReadTenbin(const std::string& p, const FormatReadOptions& o) {
  return tenbin::ReadFile(p, ReadOpts<tenbin::ReadOptions>(o));
}
Result<TensorSet> DecodeTenbin(Bytes b, Owner own, const std::string& n) { return tenbin::Decode(b, own, n); }
Status WriteTenbin(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return tenbin::WriteFile(p, s, WriteOpts<tenbin::WriteOptions>(o));
}
Result<std::string> EncodeTenbin(const TensorSet& s, const FormatWriteOptions&) { return tenbin::Encode(s); }

// ---- BTF: no magic ----
constexpr std::string_view kBtfExt[] = {"btf"};
// BTF's own keys mark a COO record ({"layout":"coo"}).
constexpr std::string_view kBtfKeys[] = {"layout", "shape"};
bool BtfKeysApply(std::string_view md) {
  auto j = nlohmann::json::parse(md, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("layout") && j["layout"] == "coo";
}
Result<TensorSet> ReadBtf(const std::string& p, const FormatReadOptions& o) {
  return btf::ReadFile(p, ReadOpts<btf::ReadOptions>(o));
}
Result<TensorSet> DecodeBtf(Bytes b, Owner own, const std::string& n) { return btf::Decode(b, own, n); }
Status WriteBtf(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return btf::WriteFile(p, s, WriteOpts<btf::WriteOptions>(o));
}
Result<std::string> EncodeBtf(const TensorSet& s, const FormatWriteOptions&) { return btf::Encode(s); }

// ---- ZIO ----
constexpr std::string_view kZioExt[] = {"zio"};
// A single frame (docs/formats/zio.md §1): the header frame's length prefix
// (one byte below 0xFF, or 0xFF and a big-endian u32), then "ZIO" and the
// level digit.
bool SniffZio(Bytes b) {
  const auto zio_at = [&](std::size_t at) {
    return b.size() >= at + 4 && std::memcmp(b.data() + at, "ZIO", 3) == 0 && static_cast<char>(b[at + 3]) >= '0' &&
           static_cast<char>(b[at + 3]) <= '8';
  };
  return !b.empty() && (static_cast<unsigned char>(b[0]) == 0xFF ? zio_at(5) : zio_at(1));
}
// The tensor's name, once read, need not stay in its metadata too.
Result<TensorSet> ReadZio(const std::string& p, const FormatReadOptions& o) {
  auto ro = ReadOpts<zio::ReadOptions>(o);
  ro.strip_name_key = true;
  return zio::ReadFile(p, ro);
}
Result<TensorSet> DecodeZio(Bytes b, Owner own, const std::string& n) {
  zio::ReadOptions ro;
  ro.strip_name_key = true;
  return zio::Decode(b, own, n, ro);
}
Status WriteZio(const std::string& p, const TensorSet& s, const FormatWriteOptions& o) {
  return zio::WriteFile(p, s, WriteOpts<zio::WriteOptions>(o));
}
Result<std::string> EncodeZio(const TensorSet& s, const FormatWriteOptions&) { return zio::Encode(s); }

// ---- PyTorch checkpoints: read only ----
constexpr std::string_view kTorchAliases[] = {"torch"};
constexpr std::string_view kTorchExt[] = {"pt", "pth", "bin", "ckpt"};
Result<TensorSet> ReadTorch(const std::string& p, const FormatReadOptions& o) {
  auto ro = ReadOpts<pytorch::ReadOptions>(o);
  // Bound for safetensors: shaped as safetensors' convert.py shapes it, so
  // the bytes match that script's.
  ro.safetensors_convention = o.target == Format::kSafetensors;
  ro.discard_names = o.discard_names;
  if (!ro.discard_names.empty() && !ro.safetensors_convention) {
    return InvalidArgument("discard names apply to a PyTorch checkpoint converted to safetensors only");
  }
  return pytorch::ReadFile(p, ro);
}
Result<TensorSet> DecodeTorch(Bytes b, Owner own, const std::string& n) { return pytorch::Decode(b, own, n); }
// Every member's CRC-32 too.
Status VerifyTorch(const std::string& p, std::vector<std::string>*) {
  pytorch::ReadOptions ro;
  ro.verify_crc = true;
  return pytorch::ReadFile(p, ro).status();
}

bool HoldsAny(DType) { return true; }

// The order of every list shown to users, and of detection by magic (the
// magics do not overlap); safetensors' weak sniff is tried last, BTF has none.
constexpr FormatInfo kFormats[] = {
    {.format = Format::kTsafe,
     .name = "tsafe",
     .description = "the native container: aligned, checksummed, updatable (docs/FORMAT.md)",
     .extensions = kTsafeExt,
     .sniff = SniffTsafe,
     .caps = {.file_metadata = Md::kAny,
              .tensor_metadata = Md::kAny,
              .empty_metadata_object = true,
              .holds_dtype = HoldsAny,
              .sparse_coo = true,
              .alignment = true,
              .checksums = true,
              .loads_in_place = true},
     .read_file = internal::ReadTsafe,
     .decode = internal::DecodeTsafe,
     .verify = internal::VerifyTsafe,
     .describe = internal::DescribeTsafe,
     .for_each_info = internal::ForEachTsafeInfo,
     .read_tensor = internal::ReadTsafeTensor,
     .write_file = internal::WriteTsafe,
     .encode = internal::EncodeTsafe},
    {.format = Format::kSafetensors,
     .name = "safetensors",
     .description = "Hugging Face safetensors",
     .aliases = kStAliases,
     .extensions = kStExt,
     .sniff = SniffSafetensors,
     .weak_sniff = true,
     .caps =
         {.file_metadata = Md::kStrings, .empty_metadata_object = true, .holds_dtype = StHolds, .loads_in_place = true},
     .read_file = ReadSt,
     .decode = DecodeSt,
     .describe = DescribeSt,
     .for_each_info = ForEachStInfo,
     .read_tensor = ReadStTensor,
     .write_file = WriteSt,
     .encode = EncodeSt},
    {.format = Format::kNpy,
     .name = "npy",
     .description = "NumPy array: one tensor",
     .extensions = kNpyExt,
     .sniff = SniffNpy,
     .caps = {.holds_dtype = npy::HoldsDType, .check_names = npy::CheckNames},
     .read_file = ReadNpy,
     .decode = DecodeNpy,
     .write_file = WriteNpy,
     .encode = EncodeNpy},
    {.format = Format::kNpz,
     .name = "npz",
     .description = "NumPy archive of arrays",
     .extensions = kNpzExt,
     .sniff = SniffNpz,
     .weak_sniff = true,
     .caps = {.holds_dtype = npy::HoldsDType, .compress = true},
     .read_file = ReadNpz,
     .decode = DecodeNpz,
     .write_file = WriteNpz,
     .encode = EncodeNpz},
    {.format = Format::kGguf,
     .name = "gguf",
     .description = "llama.cpp / ggml",
     .extensions = kGgufExt,
     .sniff = SniffGguf,
     .caps = {.file_metadata = Md::kAny,
              .own_tensor_keys = kGgufKeys,
              .own_tensor_keys_apply = GgufKeysApply,
              .wide_integers = false,
              .holds_dtype = gguf::HoldsDType,
              .max_rank = gguf::kMaxDims,
              .alignment = true,
              .loads_in_place = true},
     .read_file = ReadGguf,
     .decode = DecodeGguf,
     .describe = DescribeGguf,
     .for_each_info = ForEachGgufInfo,
     .read_tensor = ReadGgufTensor,
     .write_file = WriteGguf,
     .encode = EncodeGguf,
     .edit_metadata = EditGguf,
     .metadata_elsewhere = gguf::internal::DropRedundantTypes,
     .write_warnings = GgufWarnings},
    {.format = Format::kTenbin,
     .name = "tenbin",
     .description = "WebDataset / tensorcom tenbin",
     .aliases = kTenbinAliases,
     .extensions = kTenbinExt,
     .sniff = SniffTenbin,
     .caps = {.own_tensor_keys = kTenbinKeys,
              .holds_dtype = tenbin::HoldsDType,
              .max_rank = 9,  // tenbin::WriteOptions::max_rank, webdataset's encoder limit
              .check_names = tenbin::CheckNames},
     .read_file = ReadTenbin,
     .decode = DecodeTenbin,
     .write_file = WriteTenbin,
     .encode = EncodeTenbin},
    {.format = Format::kBtf,
     .name = "btf",
     .description = "TFRT binary tensor format (by extension only)",
     .extensions = kBtfExt,
     .caps = {.own_tensor_keys = kBtfKeys,
              .own_tensor_keys_apply = BtfKeysApply,
              .holds_dtype = btf::HoldsDType,
              .sparse_coo = true,
              .check_names = btf::CheckNames},
     .read_file = ReadBtf,
     .decode = DecodeBtf,
     .write_file = WriteBtf,
     .encode = EncodeBtf},
    {.format = Format::kZio,
     .name = "zio",
     .description = "ZIO TENS message (single frame)",
     .extensions = kZioExt,
     .sniff = SniffZio,
     .caps = {.file_metadata = Md::kAny,
              .tensor_metadata = Md::kAny,
              .wide_integers = false,
              .holds_dtype = zio::HoldsDType,
              .check_names = zio::CheckNames},
     .read_file = ReadZio,
     .decode = DecodeZio,
     .write_file = WriteZio,
     .encode = EncodeZio},
    {.format = Format::kPytorch,
     .name = "pytorch",
     .description = "PyTorch torch.save checkpoint, read without running it (docs/formats/pytorch.md)",
     .aliases = kTorchAliases,
     .extensions = kTorchExt,
     .sniff = pytorch::LooksLikeCheckpoint,
     .read_file = ReadTorch,
     .decode = DecodeTorch,
     .verify = VerifyTorch,
     .reads_for_target = true,
     .not_written = "tensorsafe does not write PyTorch checkpoints: a pickle is code for torch.load to run; write "
                    "safetensors (which torch loads with safetensors.torch.load_file) or tsafe instead"}};

constexpr FormatInfo kUnknownRow{.format = Format::kUnknown, .name = "unknown"};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string LowerExtension(std::string_view path) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) return "";
  return Lower(path.substr(dot + 1));
}

}  // namespace

std::span<const FormatInfo> AllFormats() { return kFormats; }

const FormatInfo& InfoOf(Format format) {
  for (const FormatInfo& row : kFormats) {
    if (row.format == format) return row;
  }
  return kUnknownRow;
}

std::string_view FormatName(Format format) { return InfoOf(format).name; }

std::optional<Format> ParseFormat(std::string_view name) {
  const std::string s = Lower(name);
  for (const FormatInfo& row : kFormats) {
    if (s == row.name) return row.format;
    for (std::string_view alias : row.aliases) {
      if (s == alias) return row.format;
    }
  }
  return std::nullopt;
}

std::string FormatList() {
  std::string out;
  for (const FormatInfo& row : kFormats) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

Format DetectFormatFromBytes(std::span<const std::byte> prefix, std::string_view path) {
  for (bool weak : {false, true}) {
    for (const FormatInfo& row : kFormats) {
      if (row.sniff != nullptr && row.weak_sniff == weak && row.sniff(prefix)) return row.format;
    }
  }
  const std::string ext = LowerExtension(path);
  for (const FormatInfo& row : kFormats) {
    if (std::find(row.extensions.begin(), row.extensions.end(), ext) != row.extensions.end()) return row.format;
  }
  return Format::kUnknown;
}

Result<Format> DetectFormat(const std::string& path, Env* env) {
  TS_ASSIGN_OR_RETURN(auto file, internal::EnvOr(env)->OpenRead(path));
  std::array<std::byte, kSniffBytes> head{};
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(file->size(), head.size()));
  TS_RETURN_IF_ERROR(file->ReadAt(0, std::span(head).first(n)));
  return DetectFormatFromBytes(std::span(head).first(n), path);
}

bool FormatHoldsDType(Format format, DType dtype) {
  const FormatInfo& row = InfoOf(format);
  return row.caps.holds_dtype != nullptr && row.caps.holds_dtype(dtype);
}

}  // namespace tensorsafe
