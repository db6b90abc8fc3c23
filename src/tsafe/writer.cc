#include "tensorsafe/writer.h"

#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "io/atomic_file.h"
#include "tensorsafe/env.h"
#include "tsafe/data_writer.h"
#include "tsafe/index_builder.h"
#include "tsafe/layout.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe {

using internal::QuoteName;

class Writer::Impl {
 public:
  // Writes into `atomic`'s temporary file, published by Finish(), or else
  // into `own`, the caller's file.
  Impl(std::optional<internal::AtomicFile> atomic, std::unique_ptr<WritableFile> own, const WriterOptions& opt,
       bool fill_slot)
      : atomic_(std::move(atomic)),
        own_(std::move(own)),
        file_(atomic_ ? &atomic_->file() : own_.get()),
        opt_(opt),
        fill_slot_(fill_slot),
        data_(file_, 0, opt.alignment) {}

  ~Impl() { Abandon(); }

  Status Start() {
    std::byte header[internal::kHeaderSize] = {};
    internal::Identity id;
    id.alignment = opt_.alignment;
    internal::EncodeIdentity(id, header);
    // The slots stay zero until Finish(): a file cut short is never mistaken
    // for a complete one.
    return Check(data_.Put(header));
  }

  Status CheckOpen() const {
    if (done_ || failed_) return FailedPrecondition("the writer has finished or failed");
    if (data_.in_tensor()) return FailedPrecondition("a streamed tensor is still open");
    return Status::OK();
  }

  // `hashed`: name_hash_ is NameHash(name) already.
  Status CheckNewName(std::string_view name, bool hashed = false) {
    if (!hashed) name_hash_ = internal::NameHash(name);
    if (index_.Contains(name, name_hash_)) return InvalidArgument("duplicate tensor name " + QuoteName(name));
    if (index_.count() >= opt_.limits.max_tensor_count) {
      return LimitExceeded("more than " + std::to_string(opt_.limits.max_tensor_count) + " tensors");
    }
    return Status::OK();
  }

  Status Add(std::string_view name, const TensorView& view, std::string_view metadata) {
    TS_RETURN_IF_ERROR(CheckOpen());
    // The duplicate probe is a cache miss once the table outgrows the caches
    // (16 MiB at 1M names): start its load now.
    name_hash_ = internal::NameHash(name);
    index_.Prefetch(name_hash_);
    if (metadata.empty()) {
      if (const std::optional<std::uint64_t> n = data_.StageableSize(view, opt_.limits)) {
        return AddSmall(name, view.dtype, view.shape, view.data, *n);
      }
    }
    return AddView(name, view, metadata);
  }

  Status Add(std::string_view name, DType dtype, std::span<const std::uint64_t> shape, std::span<const std::byte> data,
             std::string_view metadata) {
    TS_RETURN_IF_ERROR(CheckOpen());
    name_hash_ = internal::NameHash(name);
    index_.Prefetch(name_hash_);
    if (metadata.empty()) {
      if (const std::optional<std::uint64_t> n = data_.StageableSize(dtype, shape, data.data(), opt_.limits)) {
        if (*n != data.size()) return SizeMismatch(name, dtype, shape, *n, data.size());
        return AddSmall(name, dtype, shape, data.data(), *n);
      }
    }
    // A shape with no size (overflow, rank) gets the view path's error.
    const Result<std::uint64_t> size = DenseByteSize(dtype, shape);
    if (size.ok() && *size != data.size()) return SizeMismatch(name, dtype, shape, *size, data.size());
    return AddView(name, TensorView::Contiguous(dtype, Shape(shape.begin(), shape.end()), data), metadata);
  }

  // Add's general path: any view, with metadata, or large.
  Status AddView(std::string_view name, const TensorView& view, std::string_view metadata) {
    TS_RETURN_IF_ERROR(CheckNewName(name, /*hashed=*/true));
    TS_RETURN_IF_ERROR(Check(data_.WriteView(name, view, metadata, opt_.limits)));
    return Record(data_.current());
  }

  static Status SizeMismatch(std::string_view name, DType dtype, std::span<const std::uint64_t> shape,
                             std::uint64_t want, std::size_t got) {
    return InvalidArgument("tensor " + QuoteName(name) + ": data holds " + std::to_string(got) + " bytes, but " +
                           std::string(DTypeName(dtype)) + " " + ShapeToString(shape) + " takes " +
                           std::to_string(want));
  }

  // Add of a small contiguous tensor without metadata, the common case of
  // a many-tensor file: hashed and copied while the probe loads, then
  // checked in WriteView's order, its entry encoded from the arguments.
  Status AddSmall(std::string_view name, DType dtype, std::span<const std::uint64_t> shape, const std::byte* data,
                  std::uint64_t n) {
    const std::span<const std::byte> bytes(data, static_cast<std::size_t>(n));
    const std::uint64_t checksum = internal::Hash64(bytes);
    std::uint64_t offset = 0;
    TS_RETURN_IF_ERROR(Check(data_.Stage(bytes, &offset)));
    TS_RETURN_IF_ERROR(CheckNewName(name, /*hashed=*/true));
    TS_RETURN_IF_ERROR(internal::ValidateTensorName(name, opt_.limits));
    data_.Commit();
    internal::EntryFields e;
    e.name = name;
    e.dtype = dtype;
    e.shape = shape;
    e.data_offset = offset;
    e.data_length = n;
    e.data_checksum = checksum;
    return Check(index_.Add(e, name_hash_));
  }

  Status AddCoo(std::string_view name, DType dtype, const Shape& shape, std::span<const std::int64_t> indices,
                std::span<const std::byte> values, bool coalesced, std::string_view metadata) {
    TS_RETURN_IF_ERROR(CheckOpen());
    TS_RETURN_IF_ERROR(CheckNewName(name));
    TS_RETURN_IF_ERROR(Check(data_.WriteCoo(name, dtype, shape, indices, values, coalesced, metadata, opt_.limits)));
    return Record(data_.current());
  }

  Status Begin(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata) {
    TS_RETURN_IF_ERROR(CheckOpen());
    TS_RETURN_IF_ERROR(CheckNewName(name));
    return Check(data_.Begin(name, dtype, shape, metadata, opt_.limits));
  }

  Status Append(std::span<const std::byte> bytes) {
    if (failed_) return FailedPrecondition("the writer has failed");
    return Check(data_.Append(bytes));
  }

  Status End() {
    if (failed_) return FailedPrecondition("the writer has failed");
    TS_RETURN_IF_ERROR(data_.End());
    return Record(data_.current());
  }

  Status SetMetadata(std::string_view json) {
    TS_RETURN_IF_ERROR(CheckOpen());
    if (json.size() > opt_.limits.max_metadata_bytes) {
      return LimitExceeded("file metadata of " + std::to_string(json.size()) + " bytes exceeds the limit of " +
                           std::to_string(opt_.limits.max_metadata_bytes));
    }
    TS_RETURN_IF_ERROR(internal::ValidateJsonObject(json, opt_.limits.max_json_depth).WithContext("file metadata"));
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
    done_ = true;
    return s;
  }

  void Abandon() {
    if (done_) return;
    failed_ = true;
    data_.Quiesce();  // the background thread must be done with the file
    if (atomic_) {
      atomic_->Abandon();
    } else {
      (void)own_->Close();
    }
  }

  std::uint64_t tensor_count() const { return index_.count(); }
  std::uint64_t bytes_written() const { return data_.position(); }

 private:
  Status Record(const TensorInfo& info) { return Check(index_.Add(info, name_hash_)); }

  // After a failed write the file's contents are unknown: abandon it. Errors
  // about the caller's input (bad name, bad shape) leave the writer usable.
  Status Check(Status s) {
    if (!s.ok() && s.code() == StatusCode::kIOError) Abandon();
    return s;
  }

  Status WriteIndexAndPublish() {
    TS_RETURN_IF_ERROR(data_.PutZeros(((data_.position() + 7) & ~std::uint64_t{7}) - data_.position()));
    internal::IndexPointer ptr;
    TS_RETURN_IF_ERROR(index_.WriteTo(data_, metadata_, &ptr));
    TS_RETURN_IF_ERROR(data_.Flush());
    if (file_->seekable() && fill_slot_) {
      internal::Slot slot;
      slot.sequence = 1;
      slot.ptr = ptr;
      std::byte sb[internal::kSlotSize];
      internal::EncodeSlot(slot, sb);
      TS_RETURN_IF_ERROR(file_->WriteAt(internal::SlotOffset(0), sb));
    }
    if (atomic_) return atomic_->Commit(opt_.sync);
    return opt_.sync ? file_->Sync() : Status::OK();
  }

  std::optional<internal::AtomicFile> atomic_;
  std::unique_ptr<WritableFile> own_;
  WritableFile* file_;  // atomic_'s or own_
  WriterOptions opt_;
  bool fill_slot_;
  bool done_ = false;
  bool failed_ = false;
  internal::DataWriter data_;
  internal::IndexBuilder index_;
  std::uint64_t name_hash_ = 0;  // of the tensor being added (CheckNewName)
  std::string metadata_;
};

namespace {
Status CheckOptions(const WriterOptions& o) {
  if (!internal::IsPowerOfTwo(o.alignment) || o.alignment > internal::kMaxAlignment) {
    return InvalidArgument("alignment " + std::to_string(o.alignment) + " is not a power of two from 1 to 2^30");
  }
  return Status::OK();
}

Result<std::unique_ptr<Writer>> Make(std::optional<internal::AtomicFile> atomic, std::unique_ptr<WritableFile> own,
                                     const WriterOptions& options, bool fill_slot) {
  auto impl = std::make_unique<Writer::Impl>(std::move(atomic), std::move(own), options, fill_slot);
  TS_RETURN_IF_ERROR(impl->Start());
  return std::make_unique<Writer>(std::move(impl));
}
}  // namespace

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Writer::~Writer() = default;

Result<std::unique_ptr<Writer>> Writer::Create(const std::string& path, const WriterOptions& options) {
  TS_RETURN_IF_ERROR(CheckOptions(options));
  TS_ASSIGN_OR_RETURN(internal::AtomicFile file, internal::AtomicFile::Create(path, options.env));
  return Make(std::move(file), nullptr, options, /*fill_slot=*/true);
}

Result<std::unique_ptr<Writer>> Writer::ToFd(int fd, const WriterOptions& options) {
  TS_RETURN_IF_ERROR(CheckOptions(options));
  Env* env = options.env != nullptr ? options.env : Env::Default();
  auto file = env->WrapFd(fd, "fd " + std::to_string(fd));
  // A seekable descriptor gets its header slot filled only when the file
  // starts at offset 0 of it; otherwise the trailer alone describes it.
  const bool at_start = file->seekable() && ::lseek(fd, 0, SEEK_CUR) == 0;
  return Make(std::nullopt, std::move(file), options, at_start);
}

Result<std::unique_ptr<Writer>> Writer::ToFile(std::unique_ptr<WritableFile> file, const WriterOptions& options) {
  if (!file) return InvalidArgument("null file");
  TS_RETURN_IF_ERROR(CheckOptions(options));
  return Make(std::nullopt, std::move(file), options, /*fill_slot=*/true);
}

Status Writer::Add(std::string_view name, const TensorView& view, std::string_view metadata_json) {
  return impl_->Add(name, view, metadata_json);
}
Status Writer::Add(std::string_view name, DType dtype, std::span<const std::uint64_t> shape,
                   std::span<const std::byte> data, std::string_view metadata_json) {
  return impl_->Add(name, dtype, shape, data, metadata_json);
}
Status Writer::AddCoo(std::string_view name, DType dtype, const Shape& shape, std::span<const std::int64_t> indices,
                      std::span<const std::byte> values, bool coalesced, std::string_view metadata_json) {
  return impl_->AddCoo(name, dtype, shape, indices, values, coalesced, metadata_json);
}

Status Writer::AddTensor(const Tensor& t) {
  if (t.info.layout == Layout::kDense) {
    return impl_->Add(t.info.name, t.info.dtype, t.info.shape, t.data, t.info.metadata_json);
  }
  TS_ASSIGN_OR_RETURN(CooParts parts, SplitCoo(t.info, t.data));
  // The indices of a mapped file are 8-aligned (FORMAT.md §4 aligns every
  // region to at least 8 by default) but a caller's buffer may not be.
  std::vector<std::int64_t> aligned;
  std::span<const std::int64_t> idx;
  if (reinterpret_cast<std::uintptr_t>(parts.indices.data()) % alignof(std::int64_t) == 0) {
    idx = {reinterpret_cast<const std::int64_t*>(parts.indices.data()), parts.indices.size() / 8};
  } else {
    aligned.resize(parts.indices.size() / 8);
    if (!aligned.empty()) std::memcpy(aligned.data(), parts.indices.data(), parts.indices.size());
    idx = aligned;
  }
  return impl_->AddCoo(t.info.name, t.info.dtype, t.info.shape, idx, parts.values, t.info.coalesced,
                       t.info.metadata_json);
}

Status Writer::BeginTensor(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata_json) {
  return impl_->Begin(name, dtype, shape, metadata_json);
}
Status Writer::Append(std::span<const std::byte> bytes) { return impl_->Append(bytes); }
Status Writer::EndTensor() { return impl_->End(); }
Status Writer::SetMetadata(std::string_view json_object) { return impl_->SetMetadata(json_object); }
Status Writer::Finish() { return impl_->Finish(); }
void Writer::Abandon() { impl_->Abandon(); }
std::uint64_t Writer::tensor_count() const { return impl_->tensor_count(); }
std::uint64_t Writer::bytes_written() const { return impl_->bytes_written(); }

}  // namespace tensorsafe
