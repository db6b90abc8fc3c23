#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "format/layout.h"
#include "format/writer_internal.h"
#include "io/env.h"
#include "tensorsafe/writer.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe {

using internal::WritableFile;

namespace {
// Data written in pieces of this size so each is hashed while it is still in
// cache, and small tensors are coalesced into one write.
constexpr std::size_t kChunk = std::size_t{1} << 20;
constexpr std::byte kZeros[4096] = {};
}  // namespace

namespace internal {
Status ValidateTensorName(std::string_view name, const tensorsafe::Limits& limits) {
  if (name.size() > limits.max_name_bytes || name.size() > kSpecMaxNameBytes) {
    return LimitExceeded("tensor name of " + std::to_string(name.size()) +
                         " bytes exceeds the limit of " + std::to_string(limits.max_name_bytes));
  }
  if (!IsValidUtf8(name)) return InvalidArgument("tensor name " + QuoteName(name) + " is not valid UTF-8");
  return Status::OK();
}
}  // namespace internal

class Writer::Impl {
 public:
  enum class State { kOpen, kInTensor, kDone, kFailed };

  Impl(std::unique_ptr<WritableFile> file, const WriterOptions& opt, internal::Env* env,
       std::string final_path, std::string tmp_path)
      : file_(std::move(file)), opt_(opt), env_(env), final_path_(std::move(final_path)),
        tmp_path_(std::move(tmp_path)) {}

  ~Impl() { Abandon(); }

  Status Start() {
    std::byte header[internal::kHeaderSize] = {};
    internal::Identity id;
    id.alignment = opt_.alignment;
    internal::EncodeIdentity(id, header);
    // The slots stay zero until Finish(): a file cut short is never mistaken
    // for a complete one.
    return Fail(Put(std::span<const std::byte>(header, sizeof header)));
  }

  Status CheckOpen() const {
    if (state_ == State::kOpen) return Status::OK();
    if (state_ == State::kInTensor) return FailedPrecondition("a streamed tensor is still open");
    return FailedPrecondition("the writer has finished or failed");
  }

  Status StartTensor(std::string_view name, DType dtype, const Shape& shape,
                     std::string_view metadata, std::uint64_t* nbytes) {
    TS_RETURN_IF_ERROR(CheckOpen());
    TS_RETURN_IF_ERROR(internal::ValidateTensorName(name, opt_.limits));
    if (shape.size() > opt_.limits.max_rank || shape.size() > internal::kSpecMaxRank) {
      return LimitExceeded("tensor " + internal::QuoteName(name) + ": rank " +
                           std::to_string(shape.size()) + " exceeds the limit of " +
                           std::to_string(opt_.limits.max_rank));
    }
    if (!metadata.empty()) {
      if (metadata.size() > opt_.limits.max_metadata_bytes) {
        return LimitExceeded("tensor " + internal::QuoteName(name) + ": metadata of " +
                             std::to_string(metadata.size()) + " bytes exceeds the limit");
      }
      TS_RETURN_IF_ERROR(internal::ValidateJsonObject(metadata, opt_.limits.max_json_depth)
                             .WithContext("tensor " + internal::QuoteName(name) + " metadata"));
    }
    auto size = DenseByteSize(dtype, shape);
    if (!size.ok()) return size.status().WithContext("tensor " + internal::QuoteName(name));
    const std::uint64_t name_hash = internal::NameHash(name);
    if (FindName(name, name_hash) != kNoSlot) {
      return InvalidArgument("duplicate tensor name " + internal::QuoteName(name));
    }
    if (slots_.size() >= opt_.limits.max_tensor_count) {
      return LimitExceeded("more than " + std::to_string(opt_.limits.max_tensor_count) + " tensors");
    }
    // FORMAT.md §4: every tensor's data starts at a multiple of the alignment.
    auto aligned = internal::AlignUp(pos_, opt_.alignment);
    if (!aligned) return OutOfRange("file offset overflows");
    TS_RETURN_IF_ERROR(Fail(PutZeros(*aligned - pos_)));
    // assign() rather than a fresh TensorInfo: the strings and the shape keep
    // their capacity from one tensor to the next.
    cur_.name.assign(name);
    cur_.dtype = dtype;
    cur_.layout = Layout::kDense;
    cur_.shape.assign(shape.begin(), shape.end());
    cur_.data_offset = pos_;
    cur_.data_length = *size;
    cur_.data_checksum = 0;
    cur_.metadata_json.assign(metadata);
    cur_name_hash_ = name_hash;
    hash_.Reset();
    remaining_ = *size;
    *nbytes = *size;
    return Status::OK();
  }

  Status AppendData(std::span<const std::byte> bytes) {
    if (bytes.size() > remaining_) {
      return InvalidArgument("tensor " + internal::QuoteName(cur_.name) + ": " +
                             std::to_string(bytes.size()) + " more bytes but only " +
                             std::to_string(remaining_) + " remain of " +
                             std::to_string(cur_.data_length));
    }
    while (!bytes.empty()) {
      auto piece = bytes.first(std::min(bytes.size(), kChunk));
      hash_.Update(piece);
      TS_RETURN_IF_ERROR(Fail(Put(piece)));
      bytes = bytes.subspan(piece.size());
      remaining_ -= piece.size();
    }
    return Status::OK();
  }

  Status EndData() {
    if (remaining_ != 0) {
      return InvalidArgument("tensor " + internal::QuoteName(cur_.name) + ": " +
                             std::to_string(remaining_) + " of " + std::to_string(cur_.data_length) +
                             " bytes were never appended");
    }
    cur_.data_checksum = one_shot_ ? cur_one_shot_ : hash_.Digest();
    one_shot_ = false;
    const std::uint64_t entry_off = entries_.size();
    if (entry_off / 8 + 1 >= (std::uint64_t{1} << internal::kSlotPosBits)) {
      return Fail(LimitExceeded("index entries exceed 8 TiB"));
    }
    internal::EncodeEntry(cur_, entries_);
    slots_.push_back({cur_name_hash_, entry_off});
    InsertName(slots_.size() - 1);
    data_bytes_ += cur_.data_length;
    state_ = State::kOpen;
    return Status::OK();
  }

  Status AddView(std::string_view name, const TensorView& v, std::string_view metadata) {
    std::uint64_t nbytes = 0;
    if (!v.strides.empty() && v.strides.size() != v.shape.size()) {
      return InvalidArgument("tensor " + internal::QuoteName(name) + ": " +
                             std::to_string(v.strides.size()) + " strides for rank " +
                             std::to_string(v.shape.size()));
    }
    // Refused before StartTensor: an error after it would leave the writer
    // in kInTensor, so every later Add failed with "a streamed tensor is
    // still open".
    if (!IsContiguous(v) && ElementSize(v.dtype) == 0) {
      return InvalidArgument("tensor " + internal::QuoteName(name) +
                             ": packed sub-byte dtypes must be contiguous");
    }
    TS_RETURN_IF_ERROR(StartTensor(name, v.dtype, v.shape, metadata, &nbytes));
    if (v.data == nullptr && nbytes != 0) {
      return InvalidArgument("tensor " + internal::QuoteName(name) + ": null data");
    }
    state_ = State::kInTensor;
    if (IsContiguous(v) && nbytes <= kChunk) {
      // A small tensor: one-shot XXH3 (the same digest as streaming, without
      // the state's reset/update/digest per tensor), then into the buffer.
      std::span<const std::byte> bytes(v.data, static_cast<std::size_t>(nbytes));
      cur_one_shot_ = internal::Hash64(bytes);
      one_shot_ = true;
      TS_RETURN_IF_ERROR(Fail(Put(bytes)));
      remaining_ = 0;
    } else if (IsContiguous(v)) {
      TS_RETURN_IF_ERROR(AppendData({v.data, static_cast<std::size_t>(nbytes)}));
    } else {
      TS_RETURN_IF_ERROR(AppendStrided(v));
    }
    return EndData();
  }

  static bool IsContiguous(const TensorView& v) {
    if (v.strides.empty()) return true;
    const std::uint32_t es = ElementSize(v.dtype);
    if (es == 0) return false;
    std::int64_t expect = es;
    for (std::size_t i = v.shape.size(); i-- > 0;) {
      if (v.shape[i] != 1 && v.strides[i] != expect) return false;
      expect *= static_cast<std::int64_t>(v.shape[i]);
    }
    return true;
  }

  // Gathers a strided view row by row through a staging buffer.
  Status AppendStrided(const TensorView& v) {
    const std::uint32_t es = ElementSize(v.dtype);
    if (es == 0) {
      return InvalidArgument("tensor " + internal::QuoteName(cur_.name) +
                             ": packed sub-byte dtypes must be contiguous");
    }
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
          TS_RETURN_IF_ERROR(AppendData(stage));
          stage.clear();
        }
      }
      std::size_t d = rank - 1;
      while (d > 0) {
        --d;
        if (++idx[d] < v.shape[d]) break;
        idx[d] = 0;
        if (d == 0) {
          d = rank;  // done
          break;
        }
      }
      if (rank == 1 || d == rank) break;
    }
    if (!stage.empty()) TS_RETURN_IF_ERROR(AppendData(stage));
    return Status::OK();
  }

  Status SetMetadata(std::string_view json) {
    TS_RETURN_IF_ERROR(CheckOpen());
    if (json.size() > opt_.limits.max_metadata_bytes) {
      return LimitExceeded("file metadata of " + std::to_string(json.size()) +
                           " bytes exceeds the limit of " +
                           std::to_string(opt_.limits.max_metadata_bytes));
    }
    TS_RETURN_IF_ERROR(internal::ValidateJsonObject(json, opt_.limits.max_json_depth)
                           .WithContext("file metadata"));
    metadata_ = std::string(json);
    return Status::OK();
  }

  Status Finish() {
    TS_RETURN_IF_ERROR(CheckOpen());
    Status s = WriteIndexAndPublish();
    if (!s.ok()) {
      Abandon();
      return s;
    }
    state_ = State::kDone;
    return s;
  }

  Status WriteIndexAndPublish() {
    TS_RETURN_IF_ERROR(PutZeros(((pos_ + 7) & ~std::uint64_t{7}) - pos_));
    const std::uint64_t index_offset = pos_;
    // FORMAT.md §6.3: open addressing, linear probing, in entry order.
    internal::IndexRoot root;
    root.tensor_count = slots_.size();
    root.entries_length = entries_.size();
    root.hash_capacity = internal::HashCapacity(slots_.size());
    root.hash_offset = internal::kRootSize + entries_.size();
    root.metadata_offset = root.hash_offset + root.hash_capacity * 8;
    root.metadata_length = metadata_.size();
    root.data_bytes = data_bytes_;
    std::vector<std::uint64_t> table(root.hash_capacity, 0);
    const std::uint64_t mask = root.hash_capacity - 1;
    for (const auto& [h, off] : slots_) {
      std::uint64_t i = h & mask;
      while (table[i] != 0) i = (i + 1) & mask;
      table[i] = ((h >> internal::kSlotPosBits) << internal::kSlotPosBits) | (off / 8 + 1);
    }
    std::string hash_bytes(table.size() * 8, '\0');
    for (std::size_t i = 0; i < table.size(); ++i) {
      internal::Store64(reinterpret_cast<std::byte*>(hash_bytes.data()) + 8 * i, table[i]);
    }
    root.entries_checksum = internal::Hash64(entries_);
    root.hash_checksum = internal::Hash64(hash_bytes);
    root.metadata_checksum = internal::Hash64(metadata_);
    std::byte root_bytes[internal::kRootSize];
    internal::EncodeRoot(root, root_bytes);
    internal::IndexPointer ptr;
    ptr.index_offset = index_offset;
    ptr.index_length = internal::IndexLength(entries_.size(), root.hash_capacity, metadata_.size());
    ptr.index_checksum = internal::Hash64(std::span<const std::byte>(root_bytes));
    TS_RETURN_IF_ERROR(Put(root_bytes));
    TS_RETURN_IF_ERROR(Put(AsBytes(entries_)));
    TS_RETURN_IF_ERROR(Put(AsBytes(hash_bytes)));
    TS_RETURN_IF_ERROR(Put(AsBytes(metadata_)));
    TS_RETURN_IF_ERROR(PutZeros(index_offset + ptr.index_length - pos_));
    std::byte trailer[internal::kTrailerSize];
    internal::EncodeTrailer(ptr, trailer);
    TS_RETURN_IF_ERROR(Put(trailer));
    TS_RETURN_IF_ERROR(Flush());
    if (file_->seekable() && fill_slot_) {
      internal::Slot slot;
      slot.sequence = 1;
      slot.ptr = ptr;
      std::byte sb[internal::kSlotSize];
      internal::EncodeSlot(slot, sb);
      TS_RETURN_IF_ERROR(file_->WriteAt(internal::SlotOffset(0), sb));
    }
    if (opt_.sync) TS_RETURN_IF_ERROR(file_->Sync());
    if (!tmp_path_.empty()) {
      TS_RETURN_IF_ERROR(file_->Close());
      TS_RETURN_IF_ERROR(env_->Rename(tmp_path_, final_path_));
      tmp_path_.clear();
      if (opt_.sync) TS_RETURN_IF_ERROR(env_->SyncDirOf(final_path_));
    }
    return Status::OK();
  }

  void Abandon() {
    if (state_ == State::kDone) return;
    state_ = State::kFailed;
    if (file_) (void)file_->Close();
    if (!tmp_path_.empty()) {
      (void)env_->Remove(tmp_path_);
      tmp_path_.clear();
    }
  }

  std::uint64_t tensor_count() const { return slots_.size(); }
  std::uint64_t bytes_written() const { return pos_; }
  void set_fill_slot(bool v) { fill_slot_ = v; }
  State state_ = State::kOpen;

 private:
  static std::span<const std::byte> AsBytes(const std::string& s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
  }

  // Marks the writer failed when `s` is an I/O-level error: after a failed
  // write the file's contents are unknown.
  Status Fail(Status s) {
    if (!s.ok()) Abandon();
    return s;
  }

  Status Put(std::span<const std::byte> bytes) {
    pos_ += bytes.size();
    if (buf_.size() + bytes.size() <= kChunk) {
      buf_.insert(buf_.end(), bytes.begin(), bytes.end());
      return Status::OK();
    }
    TS_RETURN_IF_ERROR(Flush());
    if (bytes.size() >= kChunk / 2) return file_->Append(bytes);  // large: no staging copy
    buf_.insert(buf_.end(), bytes.begin(), bytes.end());
    return Status::OK();
  }

  Status PutZeros(std::uint64_t n) {
    while (n > 0) {
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof kZeros));
      TS_RETURN_IF_ERROR(Put({kZeros, k}));
      n -= k;
    }
    return Status::OK();
  }

  Status Flush() {
    if (buf_.empty()) return Status::OK();
    Status s = file_->Append(buf_);
    buf_.clear();
    return s;
  }

  // ---- duplicate names ----
  // An open-addressing set of the names added so far, laid out like the
  // file's own table (FORMAT.md §6.3): 24 bits of name-hash tag over 40 bits
  // of position in slots_ (+1; 0 = empty). Names are compared against the
  // encoded entries, so a name costs 8 bytes here rather than a heap string
  // in a node-based set, and a probe touches other memory only when a tag
  // matches (one cache miss per Add rather than three).
  static constexpr std::uint64_t kNoSlot = ~std::uint64_t{0};
  static constexpr std::uint64_t kPosMask = (std::uint64_t{1} << internal::kSlotPosBits) - 1;

  std::string_view EntryName(std::uint64_t entry_off) const {
    const auto* p = reinterpret_cast<const std::byte*>(entries_.data()) + entry_off;
    const std::uint8_t rank = internal::Load8(p + 10);
    const std::uint32_t len = internal::Load32(p + 12);
    return {entries_.data() + entry_off + internal::kEntryFixedSize + 8 * rank, len};
  }

  std::uint64_t FindName(std::string_view name, std::uint64_t h) const {
    if (dedup_.empty()) return kNoSlot;
    const std::uint64_t mask = dedup_.size() - 1;
    const std::uint64_t tag = h >> internal::kSlotPosBits;
    for (std::uint64_t i = h & mask;; i = (i + 1) & mask) {
      const std::uint64_t v = dedup_[i];
      if (v == 0) return kNoSlot;
      if ((v >> internal::kSlotPosBits) != tag) continue;
      const auto& [sh, off] = slots_[(v & kPosMask) - 1];
      if (sh == h && EntryName(off) == name) return (v & kPosMask) - 1;
    }
  }

  void InsertName(std::uint64_t slot) {
    // Load factor <= 1/2 keeps probes short.
    if (2 * (slot + 1) > dedup_.size()) {
      std::vector<std::uint64_t> bigger(std::max<std::size_t>(64, 2 * dedup_.size()), 0);
      dedup_.swap(bigger);
      for (std::uint64_t v : bigger) {
        if (v != 0) Place((v & kPosMask) - 1);
      }
    }
    Place(slot);
  }

  void Place(std::uint64_t slot) {
    const std::uint64_t mask = dedup_.size() - 1;
    const std::uint64_t h = slots_[slot].first;
    std::uint64_t i = h & mask;
    while (dedup_[i] != 0) i = (i + 1) & mask;
    dedup_[i] = ((h >> internal::kSlotPosBits) << internal::kSlotPosBits) | (slot + 1);
  }

  std::unique_ptr<WritableFile> file_;
  WriterOptions opt_;
  internal::Env* env_;
  std::string final_path_;
  std::string tmp_path_;
  bool fill_slot_ = true;

  std::vector<std::byte> buf_;
  std::uint64_t pos_ = 0;
  std::string entries_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> slots_;  // (name hash, entry offset)
  std::vector<std::uint64_t> dedup_;  // see FindName()
  std::string metadata_;
  std::uint64_t data_bytes_ = 0;

  TensorInfo cur_;
  std::uint64_t cur_name_hash_ = 0;
  bool one_shot_ = false;  // cur_one_shot_ is the data checksum (AddView)
  std::uint64_t cur_one_shot_ = 0;
  internal::StreamingHash hash_;
  std::uint64_t remaining_ = 0;
};

namespace {
Status CheckOptions(const WriterOptions& o) {
  if (!internal::IsPowerOfTwo(o.alignment) || o.alignment > internal::kMaxAlignment) {
    return InvalidArgument("alignment " + std::to_string(o.alignment) +
                           " is not a power of two from 1 to 2^30");
  }
  return Status::OK();
}
}  // namespace

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Writer::~Writer() = default;

namespace internal {
Result<std::unique_ptr<Writer>> CreateWriterWithEnv(const std::string& path,
                                                    const WriterOptions& options, Env* env) {
  TS_RETURN_IF_ERROR(CheckOptions(options));
  std::string tmp;
  TS_ASSIGN_OR_RETURN(auto file, env->NewTempFile(path, &tmp));
  auto impl = std::make_unique<Writer::Impl>(std::move(file), options, env, path, tmp);
  TS_RETURN_IF_ERROR(impl->Start());
  return std::make_unique<Writer>(std::move(impl));
}
}  // namespace internal

Result<std::unique_ptr<Writer>> Writer::Create(const std::string& path, const WriterOptions& options) {
  return internal::CreateWriterWithEnv(path, options, internal::Env::Default());
}

Result<std::unique_ptr<Writer>> Writer::ToFd(int fd, const WriterOptions& options) {
  auto file = internal::Env::Default()->WrapFd(fd, "fd " + std::to_string(fd));
  // A seekable descriptor gets its header slot filled only when the file
  // starts at offset 0 of it; otherwise the trailer alone describes it.
  const bool at_start = file->seekable() && ::lseek(fd, 0, SEEK_CUR) == 0;
  TS_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>(std::move(file), options, internal::Env::Default(), "", "");
  impl->set_fill_slot(at_start);
  TS_RETURN_IF_ERROR(impl->Start());
  return std::make_unique<Writer>(std::move(impl));
}

Result<std::unique_ptr<Writer>> Writer::ToFile(std::unique_ptr<internal::WritableFile> file,
                                               const WriterOptions& options) {
  if (!file) return InvalidArgument("null file");
  TS_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>(std::move(file), options, internal::Env::Default(), "", "");
  TS_RETURN_IF_ERROR(impl->Start());
  return std::make_unique<Writer>(std::move(impl));
}

Status Writer::Add(std::string_view name, const TensorView& view, std::string_view metadata_json) {
  return impl_->AddView(name, view, metadata_json);
}

Status Writer::BeginTensor(std::string_view name, DType dtype, const Shape& shape,
                           std::string_view metadata_json) {
  std::uint64_t n = 0;
  TS_RETURN_IF_ERROR(impl_->StartTensor(name, dtype, shape, metadata_json, &n));
  impl_->state_ = Impl::State::kInTensor;
  return Status::OK();
}

Status Writer::Append(std::span<const std::byte> bytes) {
  if (impl_->state_ != Impl::State::kInTensor) return FailedPrecondition("no streamed tensor is open");
  return impl_->AppendData(bytes);
}

Status Writer::EndTensor() {
  if (impl_->state_ != Impl::State::kInTensor) return FailedPrecondition("no streamed tensor is open");
  return impl_->EndData();
}

Status Writer::SetMetadata(std::string_view json_object) { return impl_->SetMetadata(json_object); }
Status Writer::Finish() { return impl_->Finish(); }
void Writer::Abandon() { impl_->Abandon(); }
std::uint64_t Writer::tensor_count() const { return impl_->tensor_count(); }
std::uint64_t Writer::bytes_written() const { return impl_->bytes_written(); }

}  // namespace tensorsafe
