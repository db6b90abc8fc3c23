// The .npy codec (docs/formats/npy.md). Checks run in the order of that
// document's reader checks: size, magic, version, header length, header
// syntax, dtype, rank, data size.
#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "formats/npy/header.h"
#include "formats/npy/internal.h"
#include "io/atomic_file.h"
#include "io/internal.h"
#include "tensorsafe/formats/npy.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe {
namespace npy::internal {

using tensorsafe::internal::AllocAligned;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::IsValidUtf8;
using tensorsafe::internal::Load16;
using tensorsafe::internal::Load32;
using tensorsafe::internal::Load8;
using tensorsafe::internal::RangeWithin;
namespace {

using tensorsafe::internal::Str;

// What a descr means: our dtype, and the unit to byte-swap when the data is
// big-endian (the item size, or half of it for complex).
struct DescrInfo {
  DType dtype;
  std::uint32_t itemsize;
  std::uint32_t swap_unit;
  bool big_endian;
};

Result<DescrInfo> ParseDescr(const std::string& descr, const tensorsafe::npy::ReadOptions& opt) {
  // Quoted with escapes: the descr is untrusted bytes, and messages must
  // stay valid UTF-8 (Python decodes them).
  const std::string q = "descr " + tensorsafe::internal::QuoteName(descr);
  // NumPy (np.dtype) reads the byte order as optional and '|' on a
  // multi-byte number as native, like '=': "f4" and "|f4" are "<f4" on the
  // little-endian hosts we build for (util/endian.h). NumPy never writes
  // them; other writers do.
  const bool has_order = !descr.empty() && std::string_view("<>|=").find(descr[0]) != std::string_view::npos;
  const char order = has_order ? descr[0] : '=';
  const std::string rest = descr.substr(has_order ? 1 : 0);
  if (rest.size() < 2) {
    if (rest == "O") return Unsupported(q + ": object arrays need pickle, which tensorsafe never runs");
    return Corruption(q + " is not a type string of the form '<f4' (byte order, kind letter, item size)");
  }
  const char kind = rest[0];
  if (kind == 'O') {
    return Unsupported(q + ": object arrays need pickle, which tensorsafe never runs");
  }
  const std::string digits = rest.substr(1);
  std::uint32_t size = 0;
  if (digits.empty() || digits.size() > 4 || digits[0] == '0' ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (std::string_view("USamMV").find(kind) != std::string_view::npos) {
      return Unsupported(q + ": this NumPy type has no tensorsafe dtype");
    }
    return Corruption(q + " is not a type string of the form '<f4' (byte order, kind letter, item size)");
  }
  size = static_cast<std::uint32_t>(std::stoul(digits));
  std::optional<DType> dt;
  std::uint32_t unit = size;
  switch (kind) {
    case 'b':
      if (size == 1) dt = DType::kBool;
      break;
    case 'u':
      if (size == 1)
        dt = DType::kU8;
      else if (size == 2)
        dt = DType::kU16;
      else if (size == 4)
        dt = DType::kU32;
      else if (size == 8)
        dt = DType::kU64;
      break;
    case 'i':
      if (size == 1)
        dt = DType::kI8;
      else if (size == 2)
        dt = DType::kI16;
      else if (size == 4)
        dt = DType::kI32;
      else if (size == 8)
        dt = DType::kI64;
      break;
    case 'f':
      // ml_dtypes registers float8_e5m2 with kind 'f', so NumPy records "<f1".
      if (size == 1)
        dt = DType::kF8E5M2;
      else if (size == 2)
        dt = DType::kF16;
      else if (size == 4)
        dt = DType::kF32;
      else if (size == 8)
        dt = DType::kF64;
      break;
    case 'c':
      if (size == 8)
        dt = DType::kC64;
      else if (size == 16)
        dt = DType::kC128;
      unit = size / 2;
      break;
    case 'V':
      // ml_dtypes types are saved as void: the descr keeps only the size.
      if (opt.void_as) {
        if (ElementSize(*opt.void_as) != size) {
          return Unsupported(q + ": ReadOptions::void_as is " + std::string(DTypeName(*opt.void_as)) +
                             ", whose element size is not " + Str(size) + " bytes");
        }
        dt = *opt.void_as;
      } else if (size == 2) {
        dt = DType::kBF16;
      } else if (size == 1) {
        return Unsupported(q +
                           ": a 1-byte void is how ml_dtypes float8/float6/float4/int4/uint4 "
                           "arrays are saved and the type is lost; set ReadOptions::void_as");
      } else {
        return Unsupported(q + ": a " + Str(size) + "-byte void type has no tensorsafe dtype");
      }
      break;
    case 'U':
    case 'S':
    case 'a':
    case 'M':
    case 'm': return Unsupported(q + ": strings, bytes and datetimes have no tensorsafe dtype");
    default: return Corruption(q + ": unknown type kind '" + std::string(1, kind) + "'");
  }
  if (!dt) return Unsupported(q + ": no tensorsafe dtype has this kind and size");
  return DescrInfo{*dt, size, unit, order == '>'};
}

}  // namespace

// NumPy sizes arrays in npy_intp: the product of the non-zero dimensions
// times the item size must fit in 63 bits, even when a zero dimension makes
// the array empty (np.empty((0, 2**61), "<f4") raises "array is too big").
bool WithinNumpySizeLimit(std::span<const std::uint64_t> shape, std::uint64_t itemsize) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::uint64_t n = itemsize;
  for (std::uint64_t d : shape) {
    if (d == 0) continue;
    auto m = CheckedMul(n, d);
    if (!m || *m > kMax) return false;
    n = *m;
  }
  return n <= kMax;
}

namespace {

void SwapBytes(std::byte* p, std::uint64_t n, std::uint32_t unit) {
  for (std::uint64_t i = 0; i + unit <= n; i += unit) std::reverse(p + i, p + i + unit);
}

// Copies Fortran-order data into C order. Walks the destination in C order
// while tracking the source offset, so each element is touched once.
void FortranToC(const std::byte* src, std::byte* dst, const Shape& shape, std::uint32_t item) {
  const std::size_t r = shape.size();
  std::vector<std::uint64_t> fstride(r), idx(r, 0);
  std::uint64_t s = item;
  for (std::size_t i = 0; i < r; ++i) {
    fstride[i] = s;
    s *= shape[i];
  }
  std::uint64_t total = 1;
  for (auto d : shape) total *= d;
  std::uint64_t off = 0;
  for (std::uint64_t n = 0; n < total; ++n) {
    std::memcpy(dst + n * item, src + off, item);
    for (std::size_t k = r; k-- > 0;) {
      if (++idx[k] < shape[k]) {
        off += fstride[k];
        break;
      }
      off -= fstride[k] * (shape[k] - 1);
      idx[k] = 0;
    }
  }
}

}  // namespace

std::string StemOf(const std::string& path, std::string_view suffix) {
  std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    base.resize(base.size() - suffix.size());
  }
  return base;
}

Result<Tensor> DecodeArray(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, const std::string& name,
                           const std::string& where, const tensorsafe::npy::ReadOptions& opt) {
  auto err = [&](Status s) { return s.WithContext(where); };
  const std::uint64_t size = bytes.size();
  // 1. Enough bytes for the smallest prefix.
  if (size < kPrefixV1) {
    return err(Corruption("file is " + Str(size) + " bytes, smaller than the 10-byte .npy prefix"));
  }
  // 2. Magic.
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return err(Corruption("bad magic: not a .npy file (expected \\x93NUMPY)"));
  }
  // 3. Version.
  const std::uint8_t major = Load8(bytes.data() + 6), minor = Load8(bytes.data() + 7);
  if (major < 1 || major > 3 || minor != 0) {
    return err(Unsupported("format version " + Str(major) + "." + Str(minor) + " (supported: 1.0, 2.0, 3.0)"));
  }
  // 4. Header length against the limit and the file.
  std::uint64_t prefix = kPrefixV1, hlen;
  if (major == 1) {
    hlen = Load16(bytes.data() + 8);
  } else {
    if (size < kPrefixV2) {
      return err(
          Corruption("file is " + Str(size) + " bytes, smaller than the 12-byte version " + Str(major) + ".0 prefix"));
    }
    prefix = kPrefixV2;
    hlen = Load32(bytes.data() + 8);
  }
  if (hlen > opt.max_header_bytes) {
    return err(LimitExceeded("header of " + Str(hlen) + " bytes exceeds the limit of " + Str(opt.max_header_bytes)));
  }
  if (!RangeWithin(prefix, hlen, size)) {
    return err(Corruption("header of " + Str(hlen) + " bytes at offset " + Str(prefix) +
                          " runs past the end of the file (" + Str(size) + " bytes)"));
  }
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + prefix), hlen);
  // 1.0 and 2.0 headers are Latin-1 and hold only ASCII in practice; 3.0 is
  // UTF-8. A NUL byte is never valid in either.
  if (text.find('\0') != std::string_view::npos) return err(Corruption("header contains a NUL byte"));
  if (major == 3 && !IsValidUtf8(text)) return err(Corruption("version 3.0 header is not valid UTF-8"));
  // 5. Syntax, 6. dtype, 7. rank (inside the parser).
  auto dict = ParseHeaderDict(text, opt.max_rank);
  if (!dict.ok()) return err(dict.status());
  auto di = ParseDescr(dict->descr, opt);
  if (!di.ok()) return err(di.status());
  // 8. Size limit, then data size: shape product x item size must equal
  // what remains.
  if (!WithinNumpySizeLimit(dict->shape, di->itemsize)) {
    return err(Corruption("shape " + ShapeToString(dict->shape) + " x " + Str(di->itemsize) +
                          "-byte items (zero dimensions aside) exceeds 2^63 - 1 bytes, NumPy's array size limit"));
  }
  auto count = ElementCount(dict->shape);
  std::optional<std::uint64_t> need = count.ok() ? CheckedMul(*count, di->itemsize) : std::nullopt;
  if (!need) return err(Internal("data size of a shape within the size limit overflows"));
  const std::uint64_t data_off = prefix + hlen, have = size - data_off;
  if (have < *need) {
    return err(Corruption("truncated: shape " + ShapeToString(dict->shape) + " of " + dict->descr + " needs " +
                          Str(*need) + " data bytes, only " + Str(have) + " remain"));
  }
  if (have > *need) {
    return err(Corruption(Str(have - *need) + " trailing bytes after the " + Str(*need) + " data bytes of shape " +
                          ShapeToString(dict->shape)));
  }
  Tensor t;
  t.info.name = name;
  t.info.dtype = di->dtype;
  t.info.shape = dict->shape;
  t.info.data_offset = data_off;
  t.info.data_length = *need;
  std::span<const std::byte> data = bytes.subspan(data_off, *need);
  const bool swap = di->big_endian && di->swap_unit > 1;
  const bool transpose = dict->fortran_order && dict->shape.size() > 1;
  if (!swap && !transpose) {
    t.data = data;
    t.owner = std::move(owner);
    return t;
  }
  auto buf = AllocAligned(*need);
  if (transpose) {
    FortranToC(data.data(), buf.get(), dict->shape, di->itemsize);
  } else {
    std::memcpy(buf.get(), data.data(), *need);
  }
  if (swap) SwapBytes(buf.get(), *need, di->swap_unit);
  t.data = {buf.get(), static_cast<std::size_t>(*need)};
  t.owner = std::move(buf);
  return t;
}

}  // namespace npy::internal

namespace npy {

Result<std::string> DescrOf(DType dtype) {
  switch (dtype) {
    case DType::kBool: return std::string("|b1");
    case DType::kU8: return std::string("|u1");
    case DType::kI8: return std::string("|i1");
    case DType::kU16: return std::string("<u2");
    case DType::kU32: return std::string("<u4");
    case DType::kU64: return std::string("<u8");
    case DType::kI16: return std::string("<i2");
    case DType::kI32: return std::string("<i4");
    case DType::kI64: return std::string("<i8");
    case DType::kF16: return std::string("<f2");
    case DType::kF32: return std::string("<f4");
    case DType::kF64: return std::string("<f8");
    case DType::kC64: return std::string("<c8");
    case DType::kC128: return std::string("<c16");
    // What NumPy records for the ml_dtypes types (checked against ml_dtypes
    // 0.6.0): the type name is lost except for float8_e5m2.
    case DType::kBF16: return std::string("<V2");
    case DType::kF8E5M2: return std::string("<f1");
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
    case DType::kF8E8M0: return std::string("<V1");
    case DType::kF6E2M3:
    case DType::kF6E3M2:
    case DType::kF4E2M1:
    case DType::kI4:
    case DType::kU4: break;
  }
  return Unsupported("dtype " + std::string(DTypeName(dtype)) +
                     " is packed below one byte per element; .npy has no faithful encoding for it "
                     "(ml_dtypes stores one element per byte): convert it to a whole-byte dtype first");
}

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(Tensor t,
                      npy::internal::DecodeArray(bytes, std::move(owner), npy::internal::StemOf(display_name, ".npy"),
                                                 display_name, options));
  TensorSet set;
  set.tensors.push_back(std::move(t));
  return set;
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(auto region, tensorsafe::internal::EnvOr(options.env)->Map(path));
  std::span<const std::byte> bytes = region->bytes();
  return Decode(bytes, std::move(region), path, options);
}

Result<std::string> EncodeHeader(DType dtype, std::span<const std::uint64_t> shape) {
  TS_ASSIGN_OR_RETURN(std::string descr, DescrOf(dtype));
  // Readable by NumPy, and by us (reader check 8).
  if (!npy::internal::WithinNumpySizeLimit(shape, ElementSize(dtype))) {
    return Unsupported("shape " + ShapeToString(shape) + " of " + std::string(DTypeName(dtype)) +
                       " exceeds 2^63 - 1 bytes (zero dimensions aside), NumPy's array size limit");
  }
  return npy::internal::WrapHeader(npy::internal::FormatHeaderDict(descr, false, shape));
}

// The data size a dense tensor of its dtype and shape needs.
static Status CheckSize(const Tensor& t) {
  TS_ASSIGN_OR_RETURN(std::uint64_t want, DenseByteSize(t.info.dtype, t.info.shape));
  if (want != t.data.size()) {
    return InvalidArgument("tensor " + tensorsafe::internal::QuoteName(t.info.name) + ": shape " +
                           ShapeToString(t.info.shape) + " of " + std::string(DTypeName(t.info.dtype)) + " needs " +
                           std::to_string(want) + " bytes, data has " + std::to_string(t.data.size()));
  }
  return Status::OK();
}

Result<std::string> Encode(const Tensor& tensor, const WriteOptions& options) {
  TS_RETURN_IF_ERROR(CheckSize(tensor));
  TS_ASSIGN_OR_RETURN(std::string out, EncodeHeader(tensor.info.dtype, tensor.info.shape));
  out.append(reinterpret_cast<const char*>(tensor.data.data()), tensor.data.size());
  return out;
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options) {
  if (set.tensors.size() != 1) {
    return InvalidArgument(path + ": a .npy file holds exactly one array, the set has " +
                           std::to_string(set.tensors.size()) + " (write an .npz instead)");
  }
  const Tensor& t = set.tensors[0];
  Status s = CheckSize(t);
  if (!s.ok()) return s.WithContext(path);
  auto header = EncodeHeader(t.info.dtype, t.info.shape);
  if (!header.ok())
    return header.status().WithContext(path + ": tensor " + tensorsafe::internal::QuoteName(t.info.name));
  return tensorsafe::internal::WriteAtomically(path, options.sync, options.env, [&](WritableFile& f) -> Status {
    TS_RETURN_IF_ERROR(f.Append(std::as_bytes(std::span(*header))));
    return f.Append(t.data);
  });
}

bool HoldsDType(DType dtype) {
  auto descr = DescrOf(dtype);
  return descr.ok() && *descr != "<V1";
}

Status CheckNames(TensorSet& set, bool /*drop_names*/) {
  if (set.tensors.size() == 1) return Status::OK();
  return InvalidArgument("an .npy file holds exactly one tensor and there are " + std::to_string(set.tensors.size()) +
                         " (select one, or write .npz)");
}

}  // namespace npy
}  // namespace tensorsafe
