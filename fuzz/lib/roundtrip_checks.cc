// "Round trip is exact" checks: tensors built from the input are written and
// read back, and must come back bit for bit (names, dtypes, shapes, bytes,
// metadata). Inputs the writer must refuse are predicted and checked too.
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz_checks.h"
#include "fuzz_util.h"
#include "mem_env.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "util/text.h"

namespace tensorsafe::fuzz {
namespace {

constexpr std::uint64_t kMaxTensorBytes = 64 << 10;

// A tensor to write: its contiguous bytes (what a reader must return).
struct Planned {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  std::string bytes;     // DenseByteSize bytes, or fewer when the shape is impossible
  std::string metadata;  // "" or JSON text (maybe invalid)
  bool size_ok = true;   // DenseByteSize succeeded
};

DType PickDType(Input& in, std::span<const DType> allowed) {
  if (allowed.empty()) return static_cast<DType>(1 + in.Below(kNumDTypes));
  return allowed[in.Below(static_cast<std::uint32_t>(allowed.size()))];
}

Planned Plan(Input& in, std::span<const DType> allowed, std::uint32_t max_rank, std::string name) {
  Planned p;
  p.name = std::move(name);
  p.dtype = PickDType(in, allowed);
  const std::uint32_t rank = in.Below(max_rank + 1);
  for (std::uint32_t d = 0; d < rank; ++d) p.shape.push_back(in.Below(6));
  auto size = DenseByteSize(p.dtype, p.shape);
  p.size_ok = size.ok();
  if (!size.ok()) return p;
  // High ranks multiply small dims into large tensors: keep each input fast.
  if (*size > kMaxTensorBytes) {
    for (auto& d : p.shape) d = d > 1 ? 1 : d;
    size = DenseByteSize(p.dtype, p.shape);
    p.size_ok = size.ok();
    if (!size.ok()) return p;
  }
  p.bytes = in.Bytes(*size);
  // Past the input's end, a pattern that still varies per byte.
  for (std::size_t i = p.bytes.size(); i < *size; ++i) p.bytes.push_back(static_cast<char>(i * 37 + 11));
  return p;
}

std::string FuzzName(Input& in) {
  switch (in.Below(4)) {
    case 0: return "";
    case 1: return "t" + std::to_string(in.Byte());
    case 2: return "layer." + std::to_string(in.Below(4)) + "/w";
    default: return in.Bytes(in.Below(9));  // any bytes, maybe not UTF-8
  }
}

std::string FuzzMetadata(Input& in) {
  switch (in.Below(6)) {
    case 0:
    case 1: return "";
    case 2: return R"({"k":)" + std::to_string(in.Byte()) + "}";
    case 3: return R"({"a":[1,{"b":null,"c":"\u00e9"}],"d":{}})";
    case 4: return "{}";
    default: return in.Bytes(in.Below(17));  // maybe not JSON
  }
}

bool ValidMetadata(const std::string& m) { return m.empty() || internal::ValidateJsonObject(m, 64).ok(); }

// ---- native ----

struct Written {
  std::string file;
  std::vector<Planned> accepted;
  std::string metadata;  // as set, "" when none
};

// Runs the writer program the input describes.
Written WriteNative(std::span<const std::byte> data) {
  Input in(data);
  WriterOptions wo;
  wo.alignment = 1u << in.Below(13);
  wo.sync = false;
  const bool seekable = in.Bool();
  Written w;
  auto writer = Writer::ToFile(std::make_unique<MemWritableFile>(&w.file, seekable), wo);
  TS_FUZZ_CHECK(writer.ok(), Describe(writer.status()));
  Writer& wr = **writer;
  std::set<std::string> names;
  const std::uint32_t n = in.Below(9);
  for (std::uint32_t i = 0; i < n; ++i) {
    Planned p = Plan(in, {}, 4, FuzzName(in));
    p.metadata = FuzzMetadata(in);
    const bool valid = internal::IsValidUtf8(p.name) && !names.count(p.name) && ValidMetadata(p.metadata) && p.size_ok;
    const std::uint32_t mode = in.Below(4);
    Status s;
    const std::uint32_t es = ElementSize(p.dtype);
    if (mode == 0 || (mode <= 2 && (es == 0 || p.shape.empty()))) {
      s = wr.Add(p.name, TensorView{p.dtype, p.shape, reinterpret_cast<const std::byte*>(p.bytes.data()), {}},
                 p.metadata);
    } else if (mode == 1 || mode == 2) {
      // A strided view: rows reversed (negative stride), or rows with gaps.
      std::uint64_t row = es;
      for (std::size_t d = 1; d < p.shape.size(); ++d) row *= p.shape[d];
      const std::uint64_t rows = p.shape[0];
      const std::uint64_t gap = mode == 2 ? 1 + in.Below(7) : 0;
      std::string buf(rows * (row + gap), '\xee');
      std::vector<std::int64_t> strides(p.shape.size());
      std::int64_t st = es;
      for (std::size_t d = p.shape.size(); d-- > 1;) {
        strides[d] = st;
        st *= static_cast<std::int64_t>(p.shape[d]);
      }
      const std::byte* start = reinterpret_cast<const std::byte*>(buf.data());
      if (p.size_ok) {
        for (std::uint64_t r = 0; r < rows; ++r) {
          const std::uint64_t at = mode == 1 ? (rows - 1 - r) * row : r * (row + gap);
          std::memcpy(buf.data() + at, p.bytes.data() + r * row, row);
        }
      }
      if (mode == 1) {
        strides[0] = -static_cast<std::int64_t>(row);
        if (rows > 0) start += (rows - 1) * row;
      } else {
        strides[0] = static_cast<std::int64_t>(row + gap);
      }
      s = wr.Add(p.name, TensorView{p.dtype, p.shape, start, strides}, p.metadata);
    } else {
      // Streamed in chunks of fuzzed sizes.
      s = wr.BeginTensor(p.name, p.dtype, p.shape, p.metadata);
      if (s.ok()) {
        std::size_t off = 0;
        while (off < p.bytes.size()) {
          const std::size_t k = std::min<std::size_t>(p.bytes.size() - off, 1 + in.Below(16));
          Status a = wr.Append(AsBytes(p.bytes).subspan(off, k));
          TS_FUZZ_CHECK(a.ok(), "Append: " + Describe(a));
          off += k;
        }
        s = wr.EndTensor();
        TS_FUZZ_CHECK(s.ok(), "EndTensor: " + Describe(s));
      }
    }
    TS_FUZZ_CHECK(s.ok() == valid, "writing \"" + p.name + "\" " + std::string(DTypeName(p.dtype)) +
                                       ShapeToString(p.shape) + " meta '" + p.metadata + "' mode " +
                                       std::to_string(mode) + ": " + Describe(s));
    if (!s.ok()) {
      TS_FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kLimitExceeded, Describe(s));
      continue;
    }
    names.insert(p.name);
    w.accepted.push_back(std::move(p));
  }
  if (in.Bool()) {
    std::string m = FuzzMetadata(in);
    Status s = wr.SetMetadata(m);
    const bool valid = !m.empty() && ValidMetadata(m);
    if (s.ok()) w.metadata = m;
    TS_FUZZ_CHECK(s.ok() == valid || (m.empty() && s.ok()), "SetMetadata('" + m + "'): " + Describe(s));
  }
  Status f = wr.Finish();
  TS_FUZZ_CHECK(f.ok(), "Finish: " + Describe(f));
  return w;
}

void CompareNative(const Reader& r, const Written& w, std::uint32_t alignment) {
  Status v = r.Verify();
  TS_FUZZ_CHECK(v.ok(), "a written file does not verify: " + Describe(v));
  TS_FUZZ_CHECK(r.size() == w.accepted.size(), "tensor count");
  auto meta = r.Metadata();
  TS_FUZZ_CHECK(meta.ok() && *meta == (w.metadata.empty() ? "{}" : w.metadata), "file metadata");
  std::size_t i = 0;
  Status s = r.ForEach([&](const TensorInfo& t) {
    const Planned& p = w.accepted[i++];
    TS_FUZZ_CHECK(t.name == p.name && t.dtype == p.dtype && t.shape == p.shape && t.metadata_json == p.metadata,
                  "entry " + std::to_string(i - 1) + " \"" + t.name + "\" differs from what was written");
    TS_FUZZ_CHECK(t.data_offset % alignment == 0, "data offset not aligned");
    auto g = r.Get(t.name);
    TS_FUZZ_CHECK(g.ok() && AsText(g->data) == p.bytes, "data of \"" + p.name + "\"");
    return true;
  });
  TS_FUZZ_CHECK(s.ok() && i == w.accepted.size(), Describe(s));
}

}  // namespace

void RoundTripTsafe(std::span<const std::byte> data) {
  const Written w = WriteNative(data);
  const std::uint32_t alignment = 1u << (data.empty() ? 0 : static_cast<std::uint8_t>(data[0]) % 13);
  // The same program writes the same bytes (FORMAT.md §9).
  TS_FUZZ_CHECK(WriteNative(data).file == w.file, "the writer is not deterministic");
  auto buf = std::make_shared<std::string>(w.file);
  for (std::uint64_t eager : {~std::uint64_t{0}, std::uint64_t{0}}) {
    ReaderOptions ro;
    ro.eager_index_bytes = eager;
    auto r = Reader::OpenBuffer(AsBytes(*buf), buf, "rt.tsafe", ro);
    TS_FUZZ_CHECK(r.ok(), "a written file does not open: " + Describe(r.status()));
    CompareNative(**r, w, alignment);
    ro.access = ReaderOptions::Access::kPread;
    MemReadEnv env(AsBytes(*buf));
    ro.env = &env;
    auto p = Reader::Open("rt.tsafe", ro);
    TS_FUZZ_CHECK(p.ok(), "a written file does not open with pread: " + Describe(p.status()));
    CompareNative(**p, w, alignment);
  }
}

// ---- codecs ----

namespace {

// Builds a set of up to 6 tensors of `dtypes` with unique names from `names`.
TensorSet PlanSet(Input& in, std::span<const DType> dtypes, std::uint32_t max_rank,
                  const std::function<std::string(Input&, std::size_t)>& names) {
  TensorSet set;
  std::set<std::string> used;
  const std::uint32_t n = in.Below(7);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string name = names(in, i);
    if (used.count(name)) continue;
    Planned p = Plan(in, dtypes, max_rank, name);
    if (!p.size_ok) continue;
    used.insert(name);
    set.tensors.push_back(OwnedTensor(p.name, p.dtype, p.shape, p.bytes));
  }
  return set;
}

std::string LetterName(Input& in, std::size_t i, std::size_t max_len) {
  std::string s = "n";
  const std::uint32_t len = in.Below(static_cast<std::uint32_t>(max_len));
  for (std::uint32_t k = 0; k < len; ++k) s.push_back(static_cast<char>('a' + in.Below(26)));
  return s;
}

void ExpectSame(std::string_view codec, const TensorSet& a, const TensorSet& b, bool order = true) {
  std::string why;
  TS_FUZZ_CHECK(SameSet(a, b, &why, order), std::string(codec) + ": round trip differs: " + why);
}

}  // namespace

void RoundTripSafetensors(std::span<const std::byte> data) {
  Input in(data);
  static const DType kTypes[] = {DType::kBool,   DType::kU8,     DType::kU16,    DType::kU32,    DType::kU64,
                                 DType::kI8,     DType::kI16,    DType::kI32,    DType::kI64,    DType::kF16,
                                 DType::kBF16,   DType::kF32,    DType::kF64,    DType::kC64,    DType::kF8E4M3FN,
                                 DType::kF8E5M2, DType::kF8E8M0, DType::kF6E2M3, DType::kF6E3M2, DType::kF4E2M1};
  TensorSet set = PlanSet(in, kTypes, 5, [](Input& i, std::size_t) {
    // Any UTF-8 name but "__metadata__"; fuzz bytes when they are UTF-8.
    std::string s = i.Bool() ? i.Bytes(i.Below(9)) : "w" + std::to_string(i.Byte());
    return internal::IsValidUtf8(s) && s != "__metadata__" ? s : "x" + std::to_string(s.size());
  });
  if (in.Bool()) set.metadata_json = R"({"format":"pt","k":")" + std::to_string(in.Byte()) + "\"}";
  auto enc = safetensors::Encode(set);
  TS_FUZZ_CHECK(enc.ok(), "safetensors: Encode refused a valid set: " + Describe(enc.status()));
  auto owner = std::make_shared<std::string>(*enc);
  auto dec = safetensors::Decode(AsBytes(*owner), owner, "rt");
  TS_FUZZ_CHECK(dec.ok(), "safetensors: its own file does not decode: " + Describe(dec.status()));
  ExpectSame("safetensors", set, *dec, /*order=*/false);
  // Encoding the decoded set gives the same bytes (canonical writer).
  auto again = safetensors::Encode(*dec);
  TS_FUZZ_CHECK(again.ok() && *again == *enc, "safetensors: re-encoding changed the bytes");
}

void RoundTripNpy(std::span<const std::byte> data) {
  Input in(data);
  static const DType kTypes[] = {DType::kBool, DType::kU8,  DType::kU16,  DType::kU32,      DType::kU64,   DType::kI8,
                                 DType::kI16,  DType::kI32, DType::kI64,  DType::kF16,      DType::kBF16,  DType::kF32,
                                 DType::kF64,  DType::kC64, DType::kC128, DType::kF8E4M3FN, DType::kF8E5M2};
  Planned p = Plan(in, kTypes, 40, "fuzz");
  if (!p.size_ok) return;
  Tensor t = OwnedTensor(p.name, p.dtype, p.shape, p.bytes);
  auto enc = npy::Encode(t);
  // NumPy cannot hold an array whose non-zero dimensions times the item size
  // pass 2^63 - 1 bytes, even an empty one: the writer refuses it (npy.md).
  std::uint64_t span = ElementSize(p.dtype);
  bool too_big = false;
  for (std::uint64_t d : p.shape) {
    if (d != 0) too_big = too_big || __builtin_mul_overflow(span, d, &span);
  }
  if (too_big || span > std::uint64_t{INT64_MAX}) {
    TS_FUZZ_CHECK(!enc.ok() && enc.status().code() == StatusCode::kUnsupported,
                  "npy: Encode took a shape past 2^63 - 1 bytes: " + ShapeToString(p.shape));
    return;
  }
  TS_FUZZ_CHECK(enc.ok(), "npy: Encode refused " + std::string(DTypeName(p.dtype)) + ": " + Describe(enc.status()));
  auto hdr = npy::EncodeHeader(p.dtype, p.shape);
  TS_FUZZ_CHECK(hdr.ok() && hdr->size() % 64 == 0 && enc->compare(0, hdr->size(), *hdr) == 0, "npy: header");
  auto owner = std::make_shared<std::string>(*enc);
  npy::ReadOptions ro;
  // 1-byte f8 types are written as '<V1'-free descrs? Tell the reader which
  // type a void descr holds, as a caller who knows would.
  if (p.dtype == DType::kF8E4M3FN || p.dtype == DType::kF8E5M2) ro.void_as = p.dtype;
  auto dec = npy::Decode(AsBytes(*owner), owner, "dir/fuzz.npy", ro);
  TS_FUZZ_CHECK(dec.ok(), "npy: its own file does not decode: " + Describe(dec.status()));
  TensorSet want;
  want.tensors.push_back(t);
  ExpectSame("npy", want, *dec);
}

void RoundTripTenbin(std::span<const std::byte> data) {
  Input in(data);
  static const DType kTypes[] = {DType::kF16, DType::kF32, DType::kF64, DType::kI8,  DType::kI16, DType::kI32,
                                 DType::kI64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
  const bool chunks = in.Bool();
  TensorSet set = PlanSet(in, kTypes, 9, [](Input& i, std::size_t k) { return LetterName(i, k, 8); });
  auto enc = tenbin::Encode(set);
  TS_FUZZ_CHECK(enc.ok(), "tenbin: Encode refused a valid set: " + Describe(enc.status()));
  auto owner = std::make_shared<std::string>(*enc);
  auto dec = tenbin::Decode(AsBytes(*owner), owner, "rt.ten");
  TS_FUZZ_CHECK(dec.ok(), "tenbin: its own file does not decode: " + Describe(dec.status()));
  ExpectSame("tenbin", set, *dec);
  if (chunks) {
    // The tensorcom path: payloads as separate frames.
    auto payloads = tenbin::EncodePayloads(set);
    TS_FUZZ_CHECK(payloads.ok(), Describe(payloads.status()));
    TS_FUZZ_CHECK(tenbin::JoinChunks(*payloads) == *enc, "tenbin: JoinChunks(EncodePayloads) != Encode");
    std::vector<std::span<const std::byte>> views;
    for (const auto& pl : *payloads) views.push_back(AsBytes(pl));
    auto dp = tenbin::DecodePayloads(views, nullptr, "rt");
    TS_FUZZ_CHECK(dp.ok(), Describe(dp.status()));
    ExpectSame("tenbin payloads", set, *dp);
  }
}

void RoundTripOtherCodecs(std::span<const std::byte> data) {
  Input in(data);
  const std::uint32_t which = in.Below(4);
  if (which == 0) {
    static const DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                                   DType::kI8,  DType::kI16, DType::kI32,  DType::kI64};
    TensorSet set = PlanSet(in, kTypes, 4, [](Input& i, std::size_t k) { return LetterName(i, k, 20); });
    auto enc = gguf::Encode(set);
    TS_FUZZ_CHECK(enc.ok(), "gguf: Encode refused a valid set: " + Describe(enc.status()));
    auto owner = std::make_shared<std::string>(*enc);
    auto dec = gguf::Decode(AsBytes(*owner), owner, "rt.gguf");
    TS_FUZZ_CHECK(dec.ok(), "gguf: its own file does not decode: " + Describe(dec.status()));
    dec->metadata_json.clear();  // the decoder adds tensorsafe.gguf_types
    ExpectSame("gguf", set, *dec);
    auto again = gguf::Encode(*dec);
    TS_FUZZ_CHECK(again.ok(), Describe(again.status()));
  } else if (which == 1) {
    static const DType kTypes[] = {DType::kI8,  DType::kI16, DType::kI32, DType::kI64, DType::kF32,
                                   DType::kF64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
    TensorSet set = PlanSet(in, kTypes, 6, [](Input&, std::size_t k) { return std::to_string(k); });
    // BTF names records by position: rename in order.
    for (std::size_t k = 0; k < set.tensors.size(); ++k) set.tensors[k].info.name = std::to_string(k);
    auto enc = btf::Encode(set);
    TS_FUZZ_CHECK(enc.ok(), "btf: Encode refused a valid set: " + Describe(enc.status()));
    auto owner = std::make_shared<std::string>(*enc);
    auto dec = btf::Decode(AsBytes(*owner), owner, "rt.btf");
    TS_FUZZ_CHECK(dec.ok(), "btf: its own file does not decode: " + Describe(dec.status()));
    ExpectSame("btf", set, *dec);
  } else if (which == 2) {
    static const DType kTypes[] = {DType::kF16, DType::kF32,  DType::kF64, DType::kI8,  DType::kI16,
                                   DType::kI32, DType::kI64,  DType::kU8,  DType::kU16, DType::kU32,
                                   DType::kU64, DType::kBool, DType::kC64, DType::kC128};
    TensorSet set = PlanSet(in, kTypes, 5, [](Input& i, std::size_t k) { return LetterName(i, k, 6); });
    if (in.Bool()) set.metadata_json = R"({"run":)" + std::to_string(in.Byte()) + "}";
    auto enc = zio::Encode(set);
    TS_FUZZ_CHECK(enc.ok(), "zio: Encode refused a valid set: " + Describe(enc.status()));
    auto owner = std::make_shared<std::string>(*enc);
    auto dec = zio::Decode(AsBytes(*owner), owner, "rt.zio");
    TS_FUZZ_CHECK(dec.ok(), "zio: its own message does not decode: " + Describe(dec.status()));
    // Non-positional names travel as {"name": ...} in the tensor metadata.
    for (auto& t : dec->tensors) t.info.metadata_json.clear();
    ExpectSame("zio", set, *dec);
  } else {
    static const DType kTypes[] = {DType::kBool, DType::kU8,  DType::kU16, DType::kI32,
                                   DType::kI64,  DType::kF32, DType::kF64, DType::kC64};
    TensorSet set = PlanSet(in, kTypes, 4, [](Input& i, std::size_t k) { return LetterName(i, k, 6); });
    npz::WriteOptions wo;
    wo.compress = in.Bool();
    auto enc = npz::Encode(set, wo);
    TS_FUZZ_CHECK(enc.ok(), "npz: Encode refused a valid set: " + Describe(enc.status()));
    auto owner = std::make_shared<std::string>(*enc);
    auto dec = npz::Decode(AsBytes(*owner), owner, "rt.npz");
    TS_FUZZ_CHECK(dec.ok(), "npz: its own archive does not decode: " + Describe(dec.status()));
    ExpectSame("npz", set, *dec);
  }
}

}  // namespace tensorsafe::fuzz
