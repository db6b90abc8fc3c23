// The PyTorch checkpoint codec (pytorch.h): the two containers torch.save
// writes, the storages they hold, and the flattening of the unpickled
// object into a TensorSet. Checks follow docs/formats/pytorch.md "Reader
// checks", in file order.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_set>

#include "formats/npy/zip.h"
#include "formats/pytorch/convention.h"
#include "formats/pytorch/decoder.h"
#include "formats/pytorch/pickle.h"
#include "io/internal.h"
#include "tensorsafe/formats/pytorch.h"
#include "util/aligned_alloc.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::pytorch {
namespace {

using internal::Decoder;
using internal::Entry;
using internal::Kind;
using internal::KindText;
using internal::StorageDecl;
using internal::TensorDecl;
using internal::TorchDTypeAt;
using internal::Value;
using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::QuoteName;
using Json = nlohmann::ordered_json;

using tensorsafe::internal::Str;

// MAGIC_NUMBER of torch/serialization.py (0x1950a86a20f9469cfc6c), as the
// little-endian bytes of its pickle (LONG1), and PROTOCOL_VERSION.
constexpr unsigned char kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr std::int64_t kLegacyProtocol = 1001;
// caffe2/serialize/versions.h: the archive versions torch 2.13 reads.
constexpr std::uint64_t kMinArchiveVersion = 1, kMaxArchiveVersion = 10;

bool IsTorchRecord(std::string_view rec) {
  for (std::string_view r :
       {"data.pkl", "version", ".format_version", ".storage_alignment", "byteorder", "constants.pkl"}) {
    if (rec == r) return true;
  }
  for (std::string_view p : {"data/", ".data/", "code/", "constants/", "extra/"}) {
    if (rec.substr(0, p.size()) == p) return true;
  }
  return false;
}

// The unit to byte-swap for big-endian data: the element, or half of it
// for complex (two floats).
std::uint32_t SwapUnit(DType d, std::uint32_t itemsize) {
  if (d == DType::kC64 || d == DType::kC128) return itemsize / 2;
  return itemsize;
}

void SwapInPlace(std::byte* p, std::uint64_t n, std::uint32_t unit) {
  if (unit <= 1) return;
  for (std::uint64_t i = 0; i + unit <= n; i += unit) std::reverse(p + i, p + i + unit);
}

// Strides of a C-order (row-major) tensor of `shape`, ignoring dims of size
// 1 (their stride is irrelevant), as torch's is_contiguous() does.
bool IsContiguous(const std::vector<std::uint64_t>& shape, const std::vector<std::uint64_t>& stride) {
  std::uint64_t want = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (shape[i] == 0) return true;
    if (stride[i] != want) return false;
    want *= shape[i];
  }
  return true;
}

// Copies a strided view into `out` in C order. `base` is the storage's
// first byte; offset and strides are in elements of `itemsize` bytes.
void StridedCopy(const std::byte* base, const TensorDecl& t, std::uint32_t itemsize, std::byte* out) {
  const std::size_t rank = t.shape.size();
  if (rank == 0) {
    std::memcpy(out, base + t.offset * itemsize, itemsize);
    return;
  }
  const std::uint64_t inner = t.shape.back(), inner_stride = t.stride.back();
  std::vector<std::uint64_t> idx(rank - 1, 0);
  std::uint64_t rows = 1;
  for (std::size_t i = 0; i + 1 < rank; ++i) rows *= t.shape[i];
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::uint64_t src = t.offset;
    for (std::size_t i = 0; i + 1 < rank; ++i) src += idx[i] * t.stride[i];
    if (inner_stride == 1) {
      std::memcpy(out, base + src * itemsize, inner * itemsize);
      out += inner * itemsize;
    } else {
      for (std::uint64_t j = 0; j < inner; ++j, out += itemsize) {
        std::memcpy(out, base + (src + j * inner_stride) * itemsize, itemsize);
      }
    }
    for (std::size_t i = rank - 1; i-- > 0;) {
      if (++idx[i] < t.shape[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

Result<TensorSet> internal::Decoder::Zip() {
  TS_ASSIGN_OR_RETURN(auto entries, tensorsafe::internal::zip::ReadDirectory(bytes_, file_, lim_.max_members));
  if (entries.empty()) return Corruption(file_ + ": the zip archive has no members (torch.save writes data.pkl)");
  // torch's PyTorchStreamReader takes the first member's directory as the
  // archive name; every record lives under it.
  const std::string& first = entries[0].name;
  const std::size_t slash = first.find('/');
  if (slash == std::string::npos) {
    return Corruption(file_ + ": the first zip member " + QuoteName(first) +
                      " is not in a directory; torch.save puts every record under <archive>/");
  }
  prefix_ = first.substr(0, slash + 1);
  for (const auto& e : entries) {
    const std::size_t s = e.name.find('/');
    // torch.load's _is_torchscript_zip: a constants.pkl one level down.
    if (s != std::string::npos && e.name.compare(s + 1, std::string::npos, "constants.pkl") == 0) {
      return Unsupported(file_ + ": a TorchScript archive (member " + QuoteName(e.name) +
                         "): it holds code that torch.jit.load would run (CVE-2025-32434); "
                         "only torch.save checkpoints are read");
    }
    if (e.name.compare(0, prefix_.size(), prefix_) == 0 &&
        !members_.emplace(e.name.substr(prefix_.size()), &e).second) {
      return Corruption(file_ + ": two zip members are named " + QuoteName(e.name));
    }
  }
  TS_RETURN_IF_ERROR(CheckVersion());
  TS_ASSIGN_OR_RETURN(std::optional<std::span<const std::byte>> order, Record("byteorder", false));
  if (order) {
    const std::string_view text(reinterpret_cast<const char*>(order->data()), order->size());
    if (text != "little" && text != "big") {
      return Corruption(Where("byteorder") + ": " + QuoteName(text) + " is neither \"little\" nor \"big\"");
    }
    big_endian_ = text == "big";
  }
  TS_ASSIGN_OR_RETURN(std::optional<std::span<const std::byte>> pkl, Record("data.pkl", true));
  if (pkl->size() > lim_.max_pickle_bytes) {
    return LimitExceeded(Where("data.pkl") + ": " + Str(pkl->size()) + " bytes, more than " +
                         Str(lim_.max_pickle_bytes) + " (Limits::max_pickle_bytes)");
  }
  internal::Unpickler u(*pkl, Where("data.pkl"), lim_, internal::PidForm::kZip);
  std::size_t end = 0;
  TS_ASSIGN_OR_RETURN(Value * root, u.Load(0, &end));
  if (end != pkl->size()) {
    return Corruption(Where("data.pkl") + ": " + Str(pkl->size() - end) + " bytes after the pickle's STOP");
  }
  for (StorageDecl& s : u.tables().storages) {
    TS_ASSIGN_OR_RETURN(std::optional<std::span<const std::byte>> data, Record("data/" + s.key, false));
    if (!data) {
      return Corruption(file_ + ": storage " + QuoteName(s.key) + " has no member " +
                        QuoteName(prefix_ + "data/" + s.key));
    }
    if (data->size() != s.nbytes) {
      // CVE-2026-24747: a declared size beyond the member let torch read
      // past it.
      return Corruption(Where("data/" + s.key) + ": " + Str(data->size()) + " bytes, but the pickle declares " +
                        Str(s.numel) + " elements of " +
                        internal::GlobalName({internal::GlobalKind::kStorageType, s.type}) + " (" + Str(s.nbytes) +
                        " bytes)");
    }
    s.bytes = *data;
    s.file_offset = members_.at("data/" + s.key)->data_offset;
    s.resolved = true;
  }
  return Finish(u, root);
}

// A record's bytes (a view: only stored members are read).
Result<std::optional<std::span<const std::byte>>> internal::Decoder::Record(const std::string& record, bool required) {
  auto it = members_.find(record);
  if (it == members_.end()) {
    if (required) return Corruption(file_ + ": no member " + QuoteName(prefix_ + record));
    return std::optional<std::span<const std::byte>>();
  }
  const auto& e = *it->second;
  if (e.method != tensorsafe::internal::zip::kStored) {
    return Unsupported(Where(record) + ": compression method " + Str(e.method) +
                       "; torch.save stores its records uncompressed, and only stored members are read");
  }
  std::shared_ptr<std::byte> unused;
  TS_ASSIGN_OR_RETURN(auto data,
                      tensorsafe::internal::zip::Extract(bytes_, e, opt_.verify_crc, &unused, Where(record)));
  return std::optional<std::span<const std::byte>>(data);
}

Status internal::Decoder::CheckVersion() {
  TS_ASSIGN_OR_RETURN(auto v, Record("version", false));
  std::string name = "version";
  if (!v) {
    name = ".data/version";
    TS_ASSIGN_OR_RETURN(v, Record(name, false));
  }
  if (!v) return Corruption(file_ + ": no member " + QuoteName(prefix_ + "version") + " (torch.save writes one)");
  std::string_view text(reinterpret_cast<const char*>(v->data()), v->size());
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  std::uint64_t n = 0;
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return Corruption(Where(name) + ": " + QuoteName(text) + " is not a version number");
  }
  for (char c : text) n = n * 10 + static_cast<std::uint64_t>(c - '0');
  if (n < kMinArchiveVersion || n > kMaxArchiveVersion) {
    return Unsupported(Where(name) + ": archive version " + Str(n) + " (torch 2.13 reads " + Str(kMinArchiveVersion) +
                       " to " + Str(kMaxArchiveVersion) + ")");
  }
  return Status::OK();
}

Result<TensorSet> internal::Decoder::Legacy() {
  internal::Unpickler u(bytes_, file_, lim_, internal::PidForm::kLegacy);
  std::size_t pos = 0, end = 0;
  auto magic = u.Load(pos, &end);
  if (!magic.ok() || (*magic)->kind != Kind::kBigInt ||
      (*magic)->s != std::string_view(reinterpret_cast<const char*>(kLegacyMagic), sizeof kLegacyMagic)) {
    return Corruption(file_ + ": not a PyTorch checkpoint: the first pickle is not torch's magic number" +
                      (magic.ok() ? std::string() : " (" + magic.status().message() + ")"));
  }
  TS_ASSIGN_OR_RETURN(Value * protocol, u.Load(pos = end, &end));
  if (protocol->kind != Kind::kInt || protocol->i != kLegacyProtocol) {
    return Unsupported(file_ + ": legacy protocol version " +
                       (protocol->kind == Kind::kInt ? std::to_string(protocol->i) : std::string(KindText(*protocol))) +
                       " (torch writes and reads " + std::to_string(kLegacyProtocol) + ")");
  }
  // sys_info: byte order and C type sizes of the writer. Storages are
  // little-endian whatever it says (torch's _write_file swaps to little-
  // endian), so nothing in it is needed.
  TS_ASSIGN_OR_RETURN(Value * sys_info, u.Load(pos = end, &end));
  if (sys_info->kind != Kind::kDict) {
    return Corruption(file_ + ": offset " + Str(pos) + ": the sys_info pickle is " + std::string(KindText(*sys_info)) +
                      ", not a dict");
  }
  TS_ASSIGN_OR_RETURN(Value * root, u.Load(pos = end, &end));
  TS_ASSIGN_OR_RETURN(Value * keys, u.Load(pos = end, &end));
  if (keys->kind != Kind::kList) {
    return Corruption(file_ + ": offset " + Str(pos) + ": the storage key list is " + std::string(KindText(*keys)));
  }
  internal::Tables& tb = u.tables();
  pos = end;
  for (const Value* k : keys->items) {
    if (k->kind != Kind::kStr && k->kind != Kind::kBytes) {
      return Corruption(file_ + ": the storage key list holds " + std::string(KindText(*k)));
    }
    auto it = tb.storage_by_key.find(k->s);
    if (it == tb.storage_by_key.end()) {
      return Corruption(file_ + ": storage key " + QuoteName(k->s) + " is listed but no tensor declares it");
    }
    StorageDecl& s = tb.storages[it->second];
    if (s.resolved) return Corruption(file_ + ": storage key " + QuoteName(k->s) + " is listed twice");
    if (s.view_of) return Corruption(file_ + ": storage key " + QuoteName(k->s) + " is a view, yet has data");
    // An int64 element count (little-endian), then the elements.
    if (bytes_.size() - pos < 8) {
      return Corruption(file_ + ": offset " + Str(pos) + ": storage " + QuoteName(s.key) +
                        ": the file ends before its element count (truncated)");
    }
    const std::uint64_t numel = tensorsafe::internal::Load64(bytes_.data() + pos);
    const std::uint32_t esize = s.type == internal::kUntyped ? 1 : TorchDTypeAt(s.type).itemsize;
    auto nbytes = CheckedMul(numel, esize);
    if (!nbytes || *nbytes != s.nbytes) {
      return Corruption(file_ + ": offset " + Str(pos) + ": storage " + QuoteName(s.key) + " holds " + Str(numel) +
                        " elements, but the pickle declares " + Str(s.numel));
    }
    pos += 8;
    if (bytes_.size() - pos < s.nbytes) {
      return Corruption(file_ + ": offset " + Str(pos) + ": storage " + QuoteName(s.key) + " needs " + Str(s.nbytes) +
                        " bytes, " + Str(bytes_.size() - pos) + " remain (truncated)");
    }
    s.bytes = bytes_.subspan(pos, s.nbytes);
    s.file_offset = pos;
    s.resolved = true;
    pos += s.nbytes;
  }
  if (pos != bytes_.size()) {
    return Corruption(file_ + ": " + Str(bytes_.size() - pos) + " bytes after the last storage");
  }
  for (StorageDecl& s : tb.storages) {
    if (s.view_of) {
      const StorageDecl& root_storage = tb.storages[*s.view_of];
      if (!root_storage.resolved) continue;  // reported below
      s.bytes = root_storage.bytes.subspan(s.view_offset, s.nbytes);
      s.file_offset = root_storage.file_offset + s.view_offset;
      s.resolved = true;
    }
    if (!s.resolved) {
      return Corruption(file_ + ": storage " + QuoteName(s.key) + " is used by the pickle but has no data");
    }
  }
  return Finish(u, root);
}

Result<Tensor> internal::Decoder::Build(const std::string& name, const TensorDecl& t) {
  const StorageDecl& s = tables_->storages[t.storage];
  const internal::TorchDType& td = TorchDTypeAt(t.dtype);
  const std::uint32_t itemsize = td.itemsize;
  Tensor out;
  out.info.name = name;
  out.info.dtype = *td.dtype;
  out.info.shape = t.shape;
  if (td.f4x2) out.info.shape.back() *= 2;  // checked below by DenseByteSize
  std::uint64_t numel = 1;
  for (std::uint64_t d : t.shape) numel *= d;  // checked by the unpickler
  const std::uint64_t nbytes = numel * itemsize;
  TS_ASSIGN_OR_RETURN(std::uint64_t dense, DenseByteSize(out.info.dtype, out.info.shape));
  if (dense != nbytes) return Internal(file_ + ": tensor " + QuoteName(name) + ": size mismatch");
  out.info.data_offset = numel == 0 ? s.file_offset : s.file_offset + t.offset * itemsize;
  out.info.data_length = nbytes;
  out.owner = owner_;
  if (numel == 0) return out;
  const std::uint32_t unit = big_endian_ ? SwapUnit(out.info.dtype, itemsize) : 1;
  const std::size_t align = std::min<std::size_t>(itemsize, 8);
  if (IsContiguous(t.shape, t.stride) && unit <= 1) {
    std::span<const std::byte> view = s.bytes.subspan(t.offset * itemsize, nbytes);
    if (reinterpret_cast<std::uintptr_t>(view.data()) % align == 0) {
      out.data = view;
      return out;
    }
  }
  TS_RETURN_IF_ERROR(Materialize(name, nbytes));
  // A copy's bytes are nowhere in the file: offset 0 ("unknown"; the
  // file's first bytes are a zip header or the magic pickle, never data),
  // so a reader that maps the file at data_offset never mistakes it.
  out.info.data_offset = 0;
  std::shared_ptr<std::byte> buf = tensorsafe::internal::AllocAligned(nbytes);
  StridedCopy(s.bytes.data(), t, itemsize, buf.get());
  SwapInPlace(buf.get(), nbytes, unit);
  out.data = {buf.get(), static_cast<std::size_t>(nbytes)};
  out.owner = std::move(buf);
  return out;
}

Status internal::Decoder::Materialize(const std::string& name, std::uint64_t n) {
  auto total = CheckedAdd(materialized_, n);
  const std::uint64_t by_ratio =
      CheckedAdd(CheckedMul(bytes_.size(), lim_.max_materialized_ratio).value_or(~0ull), std::uint64_t{64} << 20)
          .value_or(~0ull);
  if (!total || *total > lim_.max_materialized_bytes || *total > by_ratio) {
    const bool ratio = total && *total <= lim_.max_materialized_bytes;
    return LimitExceeded(file_ + ": tensor " + QuoteName(name) + ": copying " + Str(n) +
                         " more bytes (strided views, byte swaps, unaligned storages) passes " +
                         (ratio ? Str(lim_.max_materialized_ratio) + " times the file's " + Str(bytes_.size()) +
                                      " bytes plus 64 MiB (Limits::max_materialized_ratio)"
                                : Str(lim_.max_materialized_bytes) + " (Limits::max_materialized_bytes)"));
  }
  materialized_ = *total;
  return Status::OK();
}

Result<TensorSet> internal::Decoder::Finish(internal::Unpickler& u, Value* root) {
  tables_ = &u.tables();
  visit_budget_ = std::min<std::uint64_t>(lim_.max_values, 2 * std::uint64_t{u.value_count()} + 4096);
  if (opt_.safetensors_convention && root->kind == Kind::kDict) {
    // convert.py: `if "state_dict" in loaded: loaded = loaded["state_dict"]`.
    for (std::size_t i = 0; i < root->items.size(); i += 2) {
      const Value* k = root->items[i];
      if (k->kind == Kind::kStr && k->s == "state_dict") {
        root = root->items[i + 1];
        if (root->kind != Kind::kDict) {
          return Unsupported(file_ + ": its \"state_dict\" entry is " + std::string(KindText(*root)) +
                             ", not a dict (safetensors' convert.py uses it as the state dict)");
        }
        break;
      }
    }
  }
  const bool container = root->kind == Kind::kDict || root->kind == Kind::kList || root->kind == Kind::kTuple;
  TS_RETURN_IF_ERROR(Walk(root, container ? std::string() : StemOfFile(), 0, container));
  Json metadata = Json::object();
  if (opt_.safetensors_convention) {
    TS_ASSIGN_OR_RETURN(metadata, internal::ApplySafetensorsConvention(entries_, *tables_, opt_.discard_names, file_));
  }
  for (auto& [k, v] : values_.items()) {
    if (!metadata.contains(k)) metadata[k] = std::move(v);
  }
  TensorSet set;
  set.tensors.reserve(entries_.size());
  for (const Entry& e : entries_) {
    TS_ASSIGN_OR_RETURN(Tensor t, Build(e.name, tables_->tensors[e.tensor]));
    set.tensors.push_back(std::move(t));
  }
  if (!metadata.empty()) {
    set.metadata_json = metadata.dump();
    if (set.metadata_json.size() > lim_.max_metadata_bytes) {
      return LimitExceeded(file_ + ": the values that are not tensors make " + Str(set.metadata_json.size()) +
                           " bytes of metadata JSON, more than " + Str(lim_.max_metadata_bytes) +
                           " (Limits::max_metadata_bytes)");
    }
  }
  return set;
}

std::string internal::Decoder::StemOfFile() const {
  std::string base = file_.substr(file_.rfind('/') == std::string::npos ? 0 : file_.rfind('/') + 1);
  const std::size_t dot = base.rfind('.');
  if (dot != std::string::npos && dot > 0) base.resize(dot);
  return base;
}

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options) {
  Decoder d(bytes, std::move(owner), display_name, options);
  return d.Run();
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(auto region, tensorsafe::internal::EnvOr(options.env)->Map(path));
  std::span<const std::byte> bytes = region->bytes();
  return Decode(bytes, std::move(region), path, options);
}

bool LooksLikeCheckpoint(std::span<const std::byte> b) {
  auto at = [&](std::size_t i) { return static_cast<unsigned char>(b[i]); };
  if (b.size() >= 30 && std::memcmp(b.data(), "PK\x03\x04", 4) == 0) {
    const std::size_t nlen = tensorsafe::internal::Load16(b.data() + 26);
    if (b.size() < 30 + nlen) return false;
    const std::string_view name(reinterpret_cast<const char*>(b.data() + 30), nlen);
    const std::size_t slash = name.find('/');
    return slash != std::string_view::npos && slash > 0 && IsTorchRecord(name.substr(slash + 1));
  }
  // The legacy stream: PROTO 2..5, a FRAME from protocol 4 on, then the
  // magic number as LONG1 of 10 bytes.
  std::size_t i = 0;
  if (b.size() < 2 || at(0) != 0x80 || at(1) < 2 || at(1) > 5) return false;
  i = 2;
  if (b.size() > i && at(i) == 0x95) i += 9;
  if (b.size() < i + 2 + sizeof kLegacyMagic || at(i) != 0x8a || at(i + 1) != sizeof kLegacyMagic) return false;
  return std::memcmp(b.data() + i + 2, kLegacyMagic, sizeof kLegacyMagic) == 0;
}

}  // namespace tensorsafe::pytorch
