#include "tsafe/data_writer.h"

#include <algorithm>
#include <cstring>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "tsafe/layout.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::internal {
namespace {
// Data goes out in pieces of this size so each is hashed while it is still in
// cache, and small tensors are coalesced into one write.
constexpr std::size_t kChunk = std::size_t{1} << 20;
// From this size a piece is hashed on the background thread while it is
// written; smaller ones are hashed here, a buffer at a time, and written
// while still in cache.
constexpr std::size_t kConcurrentHashBytes = 4 * kChunk;
constexpr std::byte kZeros[4096] = {};

// Copies a small tensor into the pending buffer. On x86-64 with non-temporal
// stores: the buffer's lines are next read by the background thread's
// write() on the other core, and ordinary stores had to fetch each line
// back for ownership first, a stall behind every Add once the index probe
// no longer hid it (docs/format-bench.md). Publish with PublishStreamed().
void CopyStreamed(std::byte* dst, const std::byte* src, std::size_t n) {
#if defined(__x86_64__)
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
  if (n >= 256 + head) {
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
    }
  }
#endif
  if (n != 0) std::memcpy(dst, src, n);
}

// Orders the non-temporal stores before the hand-off to another thread: a
// locked instruction (the queue's mutex) does not order them on x86.
void PublishStreamed() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}
}  // namespace

Status ValidateTensorName(std::string_view name, const Limits& limits) {
  if (name.size() > limits.max_name_bytes || name.size() > kSpecMaxNameBytes) {
    return LimitExceeded("tensor name of " + std::to_string(name.size()) + " bytes exceeds the limit of " +
                         std::to_string(limits.max_name_bytes));
  }
  if (!IsAscii(name) && !IsValidUtf8(name))
    return InvalidArgument("tensor name " + QuoteName(name) + " is not valid UTF-8");
  return Status::OK();
}

DataWriter::DataWriter(WritableFile* file, std::uint64_t start, std::uint32_t alignment)
    : file_(file),
      pos_(start),
      alignment_(alignment),
      buf_(new std::byte[kChunk]),
      background_(std::make_unique<BackgroundAppender>(file, kChunk)) {}

Status DataWriter::Put(std::span<const std::byte> bytes) {
  pos_ += bytes.size();
  if (used_ + bytes.size() <= kChunk) {
    if (!bytes.empty()) std::memcpy(buf_.get() + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
    return Status::OK();
  }
  if (bytes.size() >= kChunk / 2) {
    // Large: no staging copy; written here, after the bytes before it.
    TS_RETURN_IF_ERROR(WriteBuffered());
    return file_->Append(bytes);
  }
  // Small pieces: the full buffer goes to the background thread.
  TS_RETURN_IF_ERROR(SubmitBuffer());
  std::memcpy(buf_.get(), bytes.data(), bytes.size());
  used_ = bytes.size();
  return Status::OK();
}

Status DataWriter::SubmitBuffer() {
  PublishStreamed();
  const std::size_t n = used_;
  used_ = 0;
  return background_->Submit(buf_, n);
}

Status DataWriter::WriteBuffered() {
  TS_RETURN_IF_ERROR(background_->Wait());
  if (used_ == 0) return Status::OK();
  const std::size_t n = used_;
  used_ = 0;
  return file_->Append({buf_.get(), n});
}

Status DataWriter::PutZeros(std::uint64_t n) {
  while (n > 0) {
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof kZeros));
    TS_RETURN_IF_ERROR(Put({kZeros, k}));
    n -= k;
  }
  return Status::OK();
}

Status DataWriter::Flush() { return WriteBuffered(); }

void DataWriter::Quiesce() { (void)background_->Wait(); }

Status DataWriter::Begin(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata,
                         const Limits& limits) {
  if (in_tensor_) return FailedPrecondition("a streamed tensor is still open");
  TS_RETURN_IF_ERROR(ValidateTensorName(name, limits));
  if (shape.size() > limits.max_rank || shape.size() > kSpecMaxRank) {
    return LimitExceeded("tensor " + QuoteName(name) + ": rank " + std::to_string(shape.size()) +
                         " exceeds the limit of " + std::to_string(limits.max_rank));
  }
  if (!metadata.empty()) {
    if (metadata.size() > limits.max_metadata_bytes) {
      return LimitExceeded("tensor " + QuoteName(name) + ": metadata of " + std::to_string(metadata.size()) +
                           " bytes exceeds the limit of " + std::to_string(limits.max_metadata_bytes));
    }
    TS_RETURN_IF_ERROR(
        ValidateJsonObject(metadata, limits.max_json_depth).WithContext("tensor " + QuoteName(name) + " metadata"));
  }
  auto size = DenseByteSize(dtype, shape);
  if (!size.ok()) return size.status().WithContext("tensor " + QuoteName(name));
  // FORMAT.md §4: every tensor's data starts at a multiple of the alignment.
  auto aligned = AlignUp(pos_, alignment_);
  if (!aligned) return OutOfRange("file offset overflows");
  TS_RETURN_IF_ERROR(PutZeros(*aligned - pos_));
  // assign(): the strings and shape keep their capacity between tensors.
  cur_.name.assign(name);
  cur_.dtype = dtype;
  cur_.layout = Layout::kDense;
  cur_.shape.assign(shape.begin(), shape.end());
  cur_.data_offset = pos_;
  cur_.data_length = *size;
  cur_.data_checksum = 0;
  cur_.metadata_json.assign(metadata);
  cur_.nnz = 0;
  cur_.coo_values_offset = 0;
  cur_.coalesced = false;
  streaming_ = false;
  one_shot_.reset();
  remaining_ = *size;
  in_tensor_ = true;
  return Status::OK();
}

Status DataWriter::Append(std::span<const std::byte> bytes) {
  if (!in_tensor_) return FailedPrecondition("no streamed tensor is open");
  if (bytes.size() > remaining_) {
    return InvalidArgument("tensor " + QuoteName(cur_.name) + ": " + std::to_string(bytes.size()) +
                           " more bytes but only " + std::to_string(remaining_) + " remain of " +
                           std::to_string(cur_.data_length));
  }
  if (!streaming_ && !bytes.empty()) {
    hash_.Reset();  // lazily: a 576-byte state reset costs as much as hashing 1 KiB
    streaming_ = true;
  }
  if (bytes.size() >= kConcurrentHashBytes) {
    // Written here, straight from the caller's memory, while the background
    // thread hashes the same bytes: 1 GiB in 16 tensors went from 0.74-0.90x
    // to 0.93-0.97x of a raw write() (docs/format-bench.md).
    TS_RETURN_IF_ERROR(WriteBuffered());
    background_->StartHash(&hash_, bytes);
    const Status s = file_->Append(bytes);
    (void)background_->Wait();  // the caller's bytes must not outlive the hash; no write is in flight
    TS_RETURN_IF_ERROR(s);
    pos_ += bytes.size();
    remaining_ -= bytes.size();
    return Status::OK();
  }
  while (!bytes.empty()) {
    auto piece = bytes.first(std::min(bytes.size(), kChunk));
    hash_.Update(piece);
    TS_RETURN_IF_ERROR(Put(piece));
    bytes = bytes.subspan(piece.size());
    remaining_ -= piece.size();
  }
  return Status::OK();
}

Status DataWriter::End() {
  if (!in_tensor_) return FailedPrecondition("no streamed tensor is open");
  if (remaining_ != 0) {
    return InvalidArgument("tensor " + QuoteName(cur_.name) + ": " + std::to_string(remaining_) + " of " +
                           std::to_string(cur_.data_length) + " bytes were never appended");
  }
  cur_.data_checksum = one_shot_ ? *one_shot_ : streaming_ ? hash_.Digest() : Hash64(std::span<const std::byte>());
  in_tensor_ = false;
  return Status::OK();
}

namespace {
bool IsContiguous(const TensorView& v) {
  if (v.strides.empty()) return true;
  const std::uint32_t es = ElementSize(v.dtype);
  if (es == 0) return false;
  std::int64_t expect = es;
  for (std::size_t i = v.shape.size(); i-- > 0;) {
    if (v.shape[i] != 1 && v.strides[i] != expect) return false;
    // A product past int64 cannot describe memory; such a view is refused
    // later by the byte-size check, and must not overflow here (UB).
    if (__builtin_mul_overflow(expect, static_cast<std::int64_t>(v.shape[i]), &expect)) return false;
  }
  return true;
}
}  // namespace

std::optional<std::uint64_t> DataWriter::StageableSize(const TensorView& v, const Limits& limits) const {
  if (v.shape.size() > limits.max_rank || v.shape.size() > kSpecMaxRank) return std::nullopt;
  if (!v.strides.empty() && (v.strides.size() != v.shape.size() || !IsContiguous(v))) return std::nullopt;
  return StageableSize(v.dtype, v.shape, v.data, limits);
}

std::optional<std::uint64_t> DataWriter::StageableSize(DType dtype, std::span<const std::uint64_t> shape,
                                                       const std::byte* data, const Limits& limits) const {
  if (shape.size() > limits.max_rank || shape.size() > kSpecMaxRank) return std::nullopt;
  const Result<std::uint64_t> size = DenseByteSize(dtype, shape);
  if (!size.ok() || *size >= kChunk / 2 || (*size != 0 && data == nullptr)) return std::nullopt;
  const std::optional<std::uint64_t> aligned = AlignUp(pos_, alignment_);
  if (!aligned || *aligned - pos_ + *size > kChunk) return std::nullopt;
  return *size;
}

Status DataWriter::Stage(std::span<const std::byte> bytes, std::uint64_t* offset) {
  const std::uint64_t pad = *AlignUp(pos_, alignment_) - pos_;  // StageableSize checked both
  const std::size_t need = static_cast<std::size_t>(pad) + bytes.size();
  if (used_ + need > kChunk) TS_RETURN_IF_ERROR(SubmitBuffer());  // then used_ > 0: need <= kChunk
  std::byte* p = buf_.get() + used_;
  if (pad != 0) std::memset(p, 0, static_cast<std::size_t>(pad));
  CopyStreamed(p + pad, bytes.data(), bytes.size());
  staged_ = need;
  *offset = pos_ + pad;
  return Status::OK();
}

Status DataWriter::WriteView(std::string_view name, const TensorView& v, std::string_view metadata,
                             const Limits& limits) {
  if (!v.strides.empty() && v.strides.size() != v.shape.size()) {
    return InvalidArgument("tensor " + QuoteName(name) + ": " + std::to_string(v.strides.size()) +
                           " strides for rank " + std::to_string(v.shape.size()));
  }
  if (!v.strides.empty() && !IsContiguous(v) && ElementSize(v.dtype) == 0) {
    return InvalidArgument("tensor " + QuoteName(name) + ": packed sub-byte dtypes must be contiguous");
  }
  TS_RETURN_IF_ERROR(Begin(name, v.dtype, v.shape, metadata, limits));
  if (cur_.data_length != 0 && v.data == nullptr) {
    in_tensor_ = false;  // only padding was written
    return InvalidArgument("tensor " + QuoteName(name) + ": null data");
  }
  Status s;
  if (IsContiguous(v) && cur_.data_length <= kChunk) {
    // Small: one XXH3 call (same digest as streaming) and into the buffer.
    const std::span<const std::byte> bytes(v.data, static_cast<std::size_t>(cur_.data_length));
    one_shot_ = Hash64(bytes);
    s = Put(bytes);
    remaining_ = 0;
  } else {
    s = IsContiguous(v) ? Append({v.data, static_cast<std::size_t>(cur_.data_length)}) : AppendStrided(v);
  }
  if (!s.ok()) {
    in_tensor_ = false;
    return s;
  }
  return End();
}

Status DataWriter::WriteCoo(std::string_view name, DType dtype, const Shape& shape,
                            std::span<const std::int64_t> indices, std::span<const std::byte> values, bool coalesced,
                            std::string_view metadata, const Limits& limits) {
  const std::uint64_t rank = shape.size();
  const std::string who = "tensor " + QuoteName(name);
  if (rank == 0 ? !indices.empty() : indices.size() % rank != 0) {
    return InvalidArgument(who + ": " + std::to_string(indices.size()) + " indices do not form rows of rank " +
                           std::to_string(rank));
  }
  // With rank 0 there are no index columns: nnz comes from the values.
  const DTypeInfo& di = GetDTypeInfo(dtype);
  const std::uint64_t nnz = rank ? indices.size() / rank : values.size() / di.block_bytes * di.block_elems;
  const Shape values_shape{nnz};
  auto values_bytes = DenseByteSize(dtype, values_shape);
  if (!values_bytes.ok()) return values_bytes.status().WithContext(who);
  if (*values_bytes != values.size()) {
    return InvalidArgument(who + ": " + std::to_string(values.size()) + " value bytes for " + std::to_string(nnz) +
                           " elements of " + std::string(di.name) + " (" + std::to_string(*values_bytes) + " bytes)");
  }
  for (std::uint64_t r = 0; r < nnz && rank > 0; ++r) {
    int order = r == 0 ? 1 : 0;
    for (std::uint64_t d = 0; d < rank; ++d) {
      const std::int64_t v = indices[r * rank + d];
      if (v < 0 || static_cast<std::uint64_t>(v) >= shape[d]) {
        return InvalidArgument(who + ": COO index of element " + std::to_string(r) + " in dimension " +
                               std::to_string(d) + " is " + std::to_string(v) + ", outside [0, " +
                               std::to_string(shape[d]) + ")");
      }
      if (order == 0 && v != indices[(r - 1) * rank + d]) order = v > indices[(r - 1) * rank + d] ? 1 : -1;
    }
    if (coalesced && order <= 0) {
      return InvalidArgument(who + ": marked coalesced, but element " + std::to_string(r) +
                             " does not follow element " + std::to_string(r - 1) + " in order");
    }
  }
  // The region: indices, zeros up to the alignment, values. Begin() checks
  // name, rank and metadata against a 1-D byte shape of the region's size.
  const std::uint64_t idx_bytes = indices.size() * 8;
  auto values_at = AlignUp(idx_bytes, alignment_);
  if (!values_at) return OutOfRange(who + ": COO region overflows");
  const Shape region{*values_at + values.size()};
  if (shape.size() > limits.max_rank || shape.size() > kSpecMaxRank) {
    return LimitExceeded(who + ": rank " + std::to_string(shape.size()) + " exceeds the limit of " +
                         std::to_string(limits.max_rank));
  }
  TS_RETURN_IF_ERROR(Begin(name, DType::kU8, region, metadata, limits));
  Status s = Append(std::as_bytes(indices));
  if (s.ok()) {
    static constexpr std::byte kPad[4096] = {};
    std::uint64_t pad = *values_at - idx_bytes;
    while (s.ok() && pad > 0) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(pad, sizeof kPad));
      s = Append({kPad, k});
      pad -= k;
    }
  }
  if (s.ok()) s = Append(values);
  if (!s.ok()) {
    in_tensor_ = false;
    return s;
  }
  TS_RETURN_IF_ERROR(End());
  cur_.dtype = dtype;
  cur_.layout = Layout::kCoo;
  cur_.shape = shape;
  cur_.nnz = nnz;
  cur_.coo_values_offset = *values_at;
  cur_.coalesced = coalesced;
  return Status::OK();
}

// Gathers a strided view row by row through a staging buffer.
Status DataWriter::AppendStrided(const TensorView& v) {
  const std::uint32_t es = ElementSize(v.dtype);
  const std::size_t rank = v.shape.size();
  for (std::uint64_t d : v.shape) {
    if (d == 0) return Status::OK();
  }
  const std::uint64_t inner = v.shape[rank - 1];
  const std::int64_t inner_stride = v.strides[rank - 1];
  std::vector<std::uint64_t> idx(rank, 0);
  std::vector<std::byte> stage;
  stage.reserve(kChunk);
  while (true) {
    const std::byte* row = v.data;
    for (std::size_t i = 0; i + 1 < rank; ++i) row += static_cast<std::int64_t>(idx[i]) * v.strides[i];
    for (std::uint64_t j = 0; j < inner; ++j) {
      const std::byte* e = row + static_cast<std::int64_t>(j) * inner_stride;
      stage.insert(stage.end(), e, e + es);
      if (stage.size() >= kChunk) {
        TS_RETURN_IF_ERROR(Append(stage));
        stage.clear();
      }
    }
    // Advance the index of the outer dimensions, last fastest.
    std::size_t d = rank - 1;
    bool done = true;
    while (d-- > 0) {
      if (++idx[d] < v.shape[d]) {
        done = false;
        break;
      }
      idx[d] = 0;
    }
    if (done) break;
  }
  if (!stage.empty()) TS_RETURN_IF_ERROR(Append(stage));
  return Status::OK();
}

}  // namespace tensorsafe::internal
