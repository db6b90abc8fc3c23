// GGUF decoding: header, key/value pairs (kv_read.cc), tensor infos, data.
// Checks follow docs/formats/gguf.md §Reader checks, in file order.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/gguf/internal.h"
#include "io/internal.h"
#include "tensorsafe/formats/gguf.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::gguf {
namespace {

using internal::Cursor;
using tensorsafe::internal::AlignUp;
using tensorsafe::internal::CheckedAdd;
using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::IsValidUtf8;
using tensorsafe::internal::QuoteName;
using tensorsafe::internal::RangeWithin;

using tensorsafe::internal::Str;

// Smallest encodings, used to refuse counts the file cannot hold before
// looping: a key/value pair is a key length, a 1-byte key, a type and a
// 1-byte value; a tensor info is a name length, n_dims, type and offset.
constexpr std::uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

struct Info {
  std::string_view name;
  std::uint32_t n_dims = 0;
  std::uint64_t ne[kMaxDims] = {1, 1, 1, 1};  // ggml order: ne[0] innermost
  GgmlType type{};
  std::uint64_t offset = 0;  // relative to the data section
  std::uint64_t nbytes = 0;
};

class Decoder {
 public:
  // `bytes` is the whole file, or (`attach` false) its first bytes, of a
  // file of `file_size` bytes: the tensors then hold no data.
  Decoder(std::span<const std::byte> bytes, const std::string& file, const ReadOptions& opt, std::uint64_t file_size,
          bool attach)
      : c_(bytes, file), file_(file), opt_(opt), file_size_(file_size), attach_(attach) {}

  Result<TensorSet> Run(std::shared_ptr<const void> owner) {
    TS_RETURN_IF_ERROR(Header());
    TS_ASSIGN_OR_RETURN(internal::KeyValues kv, internal::ReadKeyValues(c_, kv_count_, opt_));
    TS_RETURN_IF_ERROR(TensorInfos());
    return Data(std::move(kv), std::move(owner));
  }
  // Whether a check of a count or length against the bytes remaining failed.
  bool ran_short() const { return c_.ran_short(); }

 private:
  Status Err(Status (*make)(std::string), const std::string& msg) const { return make(file_ + ": " + msg); }

  Status Header() {
    if (!c_.Fits(4)) {
      return Err(Corruption, "file of " + Str(c_.size()) + " bytes is too short for the GGUF magic");
    }
    const std::uint32_t magic = c_.Load32();
    if (magic != internal::kMagic) {
      return Err(Corruption, "bad magic " +
                                 QuoteName(std::string_view(reinterpret_cast<const char*>(c_.bytes().data()), 4)) +
                                 ", expected \"GGUF\"");
    }
    TS_RETURN_IF_ERROR(c_.Need(4, "version"));
    const std::uint32_t version = c_.Load32();
    if (version == 1) {
      return Err(Unsupported, "GGUF version 1 is not supported (only versions 2 and 3 are)");
    }
    if (version != 0 && (version & 0xFFFF) == 0) {
      // A byte-swapped small number: a big-endian file (allowed since v3).
      return Err(Unsupported,
                 "version field " + Str(version) + " looks byte-swapped: big-endian GGUF is not supported");
    }
    if (version != 2 && version != 3) {
      return Err(Unsupported, "GGUF version " + Str(version) + " is not supported (only versions 2 and 3 are)");
    }
    TS_RETURN_IF_ERROR(c_.Need(16, "tensor and key/value counts"));
    tensor_count_ = c_.Load64();
    kv_count_ = c_.Load64();
    if (tensor_count_ > opt_.max_tensor_count) {
      return Err(LimitExceeded,
                 "tensor count " + Str(tensor_count_) + " exceeds the limit of " + Str(opt_.max_tensor_count));
    }
    if (kv_count_ > opt_.max_kv_count) {
      return Err(LimitExceeded,
                 "key/value count " + Str(kv_count_) + " exceeds the limit of " + Str(opt_.max_kv_count));
    }
    auto kv_min = CheckedMul(kv_count_, kMinKeyValueBytes);
    auto ti_min = CheckedMul(tensor_count_, kMinTensorInfoBytes);
    auto min = kv_min && ti_min ? CheckedAdd(*kv_min, *ti_min) : std::nullopt;
    if (!c_.Fits(min)) {
      return Err(Corruption, Str(kv_count_) + " key/value pairs and " + Str(tensor_count_) +
                                 " tensor infos cannot fit in the " + Str(c_.remaining()) + " bytes after the header");
    }
    return Status::OK();
  }

  Status TensorInfos() {
    auto min = CheckedMul(tensor_count_, kMinTensorInfoBytes);
    if (!c_.Fits(min)) {
      return Err(Corruption, Str(tensor_count_) + " tensor infos cannot fit in the " + Str(c_.remaining()) +
                                 " bytes after the key/value pairs");
    }
    infos_.resize(tensor_count_);
    std::unordered_map<std::string_view, std::uint64_t> seen;
    seen.reserve(tensor_count_);
    for (std::uint64_t i = 0; i < tensor_count_; ++i) {
      Info& t = infos_[i];
      const std::string at = "tensor " + Str(i);
      TS_ASSIGN_OR_RETURN(t.name, c_.String(at + " name", opt_.max_string_bytes));
      const std::string ctx = at + " " + QuoteName(t.name);
      if (!IsValidUtf8(t.name)) return Err(Corruption, ctx + ": name is not valid UTF-8");
      // ggml keeps tensor names as C strings (ggml_set_name): it would read
      // this name cut at the NUL, and two names equal up to it as duplicates.
      if (const auto nul = t.name.find('\0'); nul != std::string_view::npos) {
        return Err(Corruption, ctx + ": name has a NUL byte at position " + Str(nul) + "; ggml would read it as " +
                                   QuoteName(t.name.substr(0, nul)));
      }
      if (t.name.size() > opt_.max_tensor_name_bytes) {
        return Err(LimitExceeded, ctx + ": name of " + Str(t.name.size()) + " bytes exceeds the limit of " +
                                      Str(opt_.max_tensor_name_bytes) + " (ggml's is 63)");
      }
      auto [it, inserted] = seen.emplace(t.name, i);
      if (!inserted) return Err(Corruption, ctx + " duplicates tensor " + Str(it->second));
      TS_RETURN_IF_ERROR(c_.Need(4, ctx + " n_dims"));
      t.n_dims = c_.Load32();
      if (t.n_dims > kMaxDims) {
        return Err(Unsupported, ctx + ": " + Str(t.n_dims) + " dimensions; ggml supports at most " + Str(kMaxDims));
      }
      TS_RETURN_IF_ERROR(c_.Need(8 * t.n_dims + 4 + 8, ctx + " dims, type and offset"));
      for (std::uint32_t d = 0; d < t.n_dims; ++d) {
        t.ne[d] = c_.Load64();
        // ggml stores dims as int64.
        if (t.ne[d] > static_cast<std::uint64_t>(INT64_MAX)) {
          return Err(Corruption, ctx + ": dimension " + Str(d) + " is " + Str(t.ne[d]) + ", more than INT64_MAX");
        }
      }
      const std::uint32_t code = c_.Load32();
      t.offset = c_.Load64();
      auto type = LookupGgmlType(code);
      if (!type) return Err(Unsupported, ctx + ": unknown ggml type " + Str(code));
      t.type = *type;
      if (t.ne[0] % t.type.block_elems != 0) {
        return Err(Corruption, ctx + ": row of " + Str(t.ne[0]) + " elements is not a multiple of the " +
                                   std::string(t.type.name) + " block of " + Str(t.type.block_elems));
      }
      // Bytes = blocks per row x block bytes x rows, all checked; ggml also
      // refuses element counts above INT64_MAX.
      // Zero dimensions are skipped in the overflow check and zero the
      // result, as ElementCount does: the verdict does not depend on the
      // order of the dimensions.
      bool zero = t.ne[0] == 0;
      std::optional<std::uint64_t> elems = std::max<std::uint64_t>(t.ne[0], 1);
      std::optional<std::uint64_t> bytes =
          CheckedMul(std::max<std::uint64_t>(t.ne[0], t.type.block_elems) / t.type.block_elems, t.type.block_bytes);
      for (std::uint32_t d = 1; d < kMaxDims && elems && bytes; ++d) {
        if (t.ne[d] == 0) {
          zero = true;
          continue;
        }
        elems = CheckedMul(*elems, t.ne[d]);
        bytes = CheckedMul(*bytes, t.ne[d]);
      }
      if (zero && elems && bytes) elems = bytes = 0;
      if (!elems || !bytes || *elems > static_cast<std::uint64_t>(INT64_MAX)) {
        return Err(Corruption, ctx + ": shape " + GgmlShape(t) + " of " + std::string(t.type.name) +
                                   " overflows: more than INT64_MAX elements or 2^64 bytes");
      }
      t.nbytes = *bytes;
    }
    return Status::OK();
  }

  static std::string GgmlShape(const Info& t) {
    std::string s = "ne=[";
    for (std::uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + Str(t.ne[d]);
    return s + "]";
  }

  Result<TensorSet> Data(internal::KeyValues kv, std::shared_ptr<const void> owner) {
    const std::uint64_t align = kv.alignment;
    auto start = AlignUp(c_.pos(), align);
    if (!start) return Err(Corruption, "data section start overflows");
    // gguf-py and ggml pad the tensor infos whenever there are tensors; with
    // none there is no data section to find.
    if (tensor_count_ > 0 && *start > file_size_) {
      return Err(Corruption, "data section at offset " + Str(*start) + " (tensor infos end at " + Str(c_.pos()) +
                                 ", aligned to " + Str(align) + ") lies past the end of the " + Str(file_size_) +
                                 "-byte file");
    }
    TensorSet set;
    set.metadata_json = std::move(kv.json);
    set.tensors.reserve(infos_.size());
    std::uint64_t expected = 0;  // ggml: each offset is the padded end of the previous
    for (std::uint64_t i = 0; i < infos_.size(); ++i) {
      const Info& t = infos_[i];
      const std::string ctx = "tensor " + Str(i) + " " + QuoteName(t.name);
      if (t.offset % align != 0) {
        return Err(Corruption, ctx + ": offset " + Str(t.offset) + " is not a multiple of the alignment " + Str(align));
      }
      if (t.offset != expected) {
        return Err(Corruption, ctx + ": offset " + Str(t.offset) + " should be " + Str(expected) +
                                   (i == 0 ? " (the first tensor starts the data section)"
                                           : " (the end of tensor " + Str(i - 1) + " padded to " + Str(align) + ")") +
                                   ": tensors must be stored in order, without gaps or overlap");
      }
      auto abs = CheckedAdd(*start, t.offset);
      if (!abs || !RangeWithin(*abs, t.nbytes, file_size_)) {
        return Err(Corruption, ctx + ": data at offset " + Str(*start) + " + " + Str(t.offset) + " + " + Str(t.nbytes) +
                                   " bytes runs past the end of the " + Str(file_size_) + "-byte file");
      }
      auto padded = AlignUp(t.nbytes, align);
      auto next = padded ? CheckedAdd(t.offset, *padded) : std::nullopt;
      if (!next) return Err(Corruption, ctx + ": data end overflows");
      expected = *next;

      Tensor out;
      out.info.name = std::string(t.name);
      out.info.data_offset = *abs;
      out.info.data_length = t.nbytes;
      for (std::uint32_t d = t.n_dims; d-- > 0;) out.info.shape.push_back(t.ne[d]);
      if (t.type.dtype) {
        out.info.dtype = *t.type.dtype;
      } else {
        // Opaque blocks (docs/formats/gguf.md §Quantized tensors).
        out.info.dtype = DType::kU8;
        std::string m = "{\"gguf.type\":\"" + std::string(t.type.name) + "\",\"gguf.shape\":[";
        for (std::size_t d = 0; d < out.info.shape.size(); ++d) {
          m += (d ? "," : "") + Str(out.info.shape[d]);
        }
        m += "],\"block_elems\":" + Str(t.type.block_elems) + ",\"block_bytes\":" + Str(t.type.block_bytes) + "}";
        out.info.metadata_json = std::move(m);
        out.info.shape = {t.nbytes};
      }
      if (attach_) {
        out.data = c_.bytes().subspan(*abs, t.nbytes);
        out.owner = owner;
      }
      set.tensors.push_back(std::move(out));
    }
    return set;
  }

  Cursor c_;
  const std::string& file_;
  const ReadOptions& opt_;
  const std::uint64_t file_size_;
  const bool attach_;
  std::uint64_t tensor_count_ = 0;
  std::uint64_t kv_count_ = 0;
  std::vector<Info> infos_;
};

}  // namespace

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options) {
  return Decoder(bytes, display_name, options, bytes.size(), /*attach=*/true).Run(std::move(owner));
}

Result<TensorSet> ReadHeader(const RandomAccessFile& file, const ReadOptions& options) {
  // The header's length is known only once it is parsed: parse the first
  // MiB (first_read_bytes) as if it were the file, and read twice as much while the parse
  // fails for want of bytes. A parse that succeeds read only bytes of the
  // prefix, which are the file's, with every size check passed against
  // fewer bytes than the file has: it is the whole file's parse.
  const std::uint64_t size = file.size();
  std::vector<std::byte> prefix;
  std::uint64_t want = std::min<std::uint64_t>(size, std::max<std::uint64_t>(options.first_read_bytes, 1));
  while (true) {
    const std::size_t have = prefix.size();
    prefix.resize(static_cast<std::size_t>(want));
    TS_RETURN_IF_ERROR(file.ReadAt(have, std::span(prefix).subspan(have)));
    Decoder d(prefix, file.name(), options, size, /*attach=*/false);
    Result<TensorSet> r = d.Run(nullptr);
    if (r.ok() || want == size || !d.ran_short()) return r;
    want = want > size / 2 ? size : want * 2;
  }
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(auto region, tensorsafe::internal::EnvOr(options.env)->Map(path));
  const auto bytes = region->bytes();
  return Decode(bytes, std::shared_ptr<const void>(std::move(region)), path, options);
}

}  // namespace tensorsafe::gguf
