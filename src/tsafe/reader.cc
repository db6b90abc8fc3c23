// The .tsafe reader, part 2: tensor data (Get, ReadInto, ReadSlice, Verify)
// and the public Reader methods. Open and the index checks are in
// reader_index.cc (docs/FORMAT.md §8).
#include "remote/remote_file.h"
#include "tsafe/reader_impl.h"

namespace tensorsafe {

using internal::CheckedAdd;
using internal::EntryLabel;
using internal::kMaxDims;
using internal::Ordinal;
using internal::QuoteName;
using internal::Str;

Result<Tensor> Reader::Impl::Get(std::string_view name) const {
  TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
  return TensorOf(std::move(info));
}

// `info` is a checked entry of this file (Find, Walk): its data range lies
// within the file.
Result<Tensor> Reader::Impl::TensorOf(TensorInfo info) const {
  Tensor t;
  if (file_ == nullptr) {
    t.data = bytes_.subspan(info.data_offset, info.data_length);
    t.owner = owner_;
  } else {
    auto buf = internal::AllocAligned(info.data_length);
    TS_RETURN_IF_ERROR(
        internal::ReadAtParallel(*file_, info.data_offset, {buf.get(), info.data_length}, opt_.read_threads));
    t.data = {buf.get(), info.data_length};
    t.owner = std::move(buf);
  }
  t.info = std::move(info);
  return t;
}

Status Reader::Impl::CopyOut(std::uint64_t off, std::span<std::byte> out) const {
  // A zero-length tensor's buffer may be null: memcpy(nullptr, p, 0) is UB.
  if (out.empty()) return Status::OK();
  if (file_ == nullptr) {
    // Large copies of a mapped file go through pread on the same inode:
    // the kernel copies from the page cache without faulting the range
    // into our page tables (1 GiB: ~1.3x faster than memcpy from a fresh
    // mapping; the bytes are the same either way).
    if (copy_file_ != nullptr && out.size() >= kPreadCopyBytes)
      return internal::ReadAtParallel(*copy_file_, off, out, opt_.read_threads);
    std::memcpy(out.data(), bytes_.data() + off, out.size());
    return Status::OK();
  }
  return internal::ReadAtParallel(*file_, off, out, opt_.read_threads);
}

Status Reader::Impl::ReadInto(std::string_view name, std::span<std::byte> out, bool verify) const {
  TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
  if (out.size() != info.data_length) {
    return InvalidArgument("tensor " + QuoteName(name) + " has " + Str(info.data_length) + " bytes; the buffer has " +
                           Str(out.size()));
  }
  TS_RETURN_IF_ERROR(CopyOut(info.data_offset, out));
  if (verify) {
    const std::uint64_t got = internal::Hash64(std::span<const std::byte>(out));
    if (got != info.data_checksum) {
      return Err(Corruption("tensor " + QuoteName(name) + ": data checksum mismatch: stored " +
                            Str(info.data_checksum) + ", computed " + Str(got)));
    }
  }
  return Status::OK();
}

Status Reader::Impl::ReadSlice(std::string_view name, std::span<const SliceDim> slice, std::span<std::byte> out) const {
  TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
  if (info.layout != Layout::kDense) {
    return Unsupported("tensor " + QuoteName(name) + ": slicing a sparse COO tensor is not supported");
  }
  const std::uint64_t es = ElementSize(info.dtype);
  if (es == 0) {
    return Unsupported("tensor " + QuoteName(name) + ": slicing packed " + std::string(DTypeName(info.dtype)) +
                       " is not supported");
  }
  const std::size_t rank = info.shape.size();
  if (slice.size() != rank) {
    return InvalidArgument("tensor " + QuoteName(name) + " has rank " + Str(rank) + "; the slice has " +
                           Str(slice.size()) + " dimensions");
  }
  // Per dimension: element count selected, and the byte stride of a step.
  std::vector<std::uint64_t> count(rank), start(rank), step(rank), dim_stride(rank);
  std::uint64_t total = 1;
  std::uint64_t stride = es;
  for (std::size_t d = rank; d-- > 0;) {
    const SliceDim& s = slice[d];
    if (s.step == 0 || s.start > s.stop || s.stop > info.shape[d]) {
      return OutOfRange("tensor " + QuoteName(name) + " dimension " + Str(d) + " of size " + Str(info.shape[d]) +
                        ": slice [" + Str(s.start) + ":" + Str(s.stop) + ":" + Str(s.step) + "] is out of range");
    }
    count[d] = s.stop == s.start ? 0 : (s.stop - s.start - 1) / s.step + 1;  // no wrap for huge steps
    start[d] = s.start;
    step[d] = s.step;
    dim_stride[d] = stride;
    stride *= info.shape[d];  // bounded by data_length, validated
    total *= count[d];
  }
  if (out.size() != total * es) {
    return InvalidArgument("slice of tensor " + QuoteName(name) + " has " + Str(total * es) +
                           " bytes; the buffer has " + Str(out.size()));
  }
  if (total == 0) return Status::OK();
  // Merge trailing dimensions that are selected whole into one contiguous run.
  std::size_t inner = rank;
  std::uint64_t run = es;
  while (inner > 0 && start[inner - 1] == 0 && step[inner - 1] == 1 && count[inner - 1] == info.shape[inner - 1]) {
    --inner;
    run *= count[inner];
  }
  // Dimension inner-1 (if any) is gathered with its step; outer ones iterate.
  std::vector<std::uint64_t> idx(inner, 0);
  std::vector<std::byte> scratch;
  std::byte* dst = out.data();
  const std::size_t gather = inner;  // number of iterated dims, the last strided
  while (true) {
    std::uint64_t off = info.data_offset;
    for (std::size_t d = 0; d + 1 < gather; ++d) off += (start[d] + idx[d] * step[d]) * dim_stride[d];
    if (gather == 0) {
      TS_RETURN_IF_ERROR(CopyOut(off, {dst, run}));
      break;
    }
    const std::size_t g = gather - 1;
    const std::uint64_t first = off + start[g] * dim_stride[g];
    if (step[g] == 1) {
      const std::uint64_t n = count[g] * run;
      TS_RETURN_IF_ERROR(CopyOut(first, {dst, n}));
      dst += n;
    } else {
      const std::uint64_t span_len = ((count[g] - 1) * step[g]) * dim_stride[g] + run;
      if (file_ != nullptr && span_len > (std::uint64_t{1} << 20)) {
        // pread mode, sparse selection: read each run, so memory follows the
        // output's size, not the span's.
        for (std::uint64_t j = 0; j < count[g]; ++j) {
          TS_RETURN_IF_ERROR(CopyOut(first + j * step[g] * dim_stride[g], {dst, run}));
          dst += run;
        }
      } else {
        std::span<const std::byte> src;
        TS_RETURN_IF_ERROR(View(first, span_len, scratch, &src));
        for (std::uint64_t j = 0; j < count[g]; ++j) {
          std::memcpy(dst, src.data() + j * step[g] * dim_stride[g], run);
          dst += run;
        }
      }
    }
    // Advance the outer index (dims 0..g-1).
    std::size_t d = g;
    bool done = true;
    while (d-- > 0) {
      if (++idx[d] < count[d]) {
        done = false;
        break;
      }
      idx[d] = 0;
    }
    if (done) break;
  }
  return Status::OK();
}

Status Reader::Impl::Verify(std::vector<std::string>* damaged) const {
  TS_RETURN_IF_ERROR(CheckWholeIndex(index_));
  Status first;
  std::vector<std::byte> buf;
  TS_RETURN_IF_ERROR(Walk([&](std::uint64_t i, std::uint64_t, const internal::EntryView& e, bool*) -> Status {
    std::uint64_t got;
    if (file_ == nullptr) {
      got = internal::Hash64(bytes_.subspan(e.data_offset, e.data_length));
    } else {
      TS_ASSIGN_OR_RETURN(got, internal::HashAt(*file_, e.data_offset, e.data_length, 1 << 20, buf));
    }
    if (got != e.data_checksum) {
      if (first.ok()) {
        first = Err(Corruption("entry " + Str(i) + " " + QuoteName(e.name) + ": data checksum mismatch: stored " +
                               Str(e.data_checksum) + ", computed " + Str(got)));
      }
      if (damaged) damaged->emplace_back(e.name);
    } else if (e.layout == Layout::kCoo) {
      // Only indices that the checksum vouches for are worth checking.
      Status cs = CheckCooIndices(e, Ordinal(i));
      if (!cs.ok()) {
        if (first.ok()) first = cs;
        if (damaged) damaged->emplace_back(e.name);
      }
    }
    return Status::OK();
  }));
  return first;
}

FileSummary Reader::Impl::Summary() const {
  FileSummary s;
  s.version_major = id_.version_major;
  s.version_minor = id_.version_minor;
  s.alignment = id_.alignment;
  s.file_size = size_;
  s.tensor_count = root_.tensor_count;
  s.index_offset = ptr_.index_offset;
  s.index_length = ptr_.index_length;
  s.sequence = sequence_;
  s.live_slot = live_slot_;
  s.via_trailer = via_trailer_;
  s.data_bytes = root_.data_bytes;
  const std::uint64_t used = internal::kHeaderSize + root_.data_bytes + ptr_.index_length + internal::kTrailerSize;
  s.unused_bytes = size_ > used ? size_ - used : 0;
  s.metadata_bytes = root_.metadata_length;
  return s;
}
Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;

Result<std::shared_ptr<Reader>> Reader::Open(const std::string& path, const ReaderOptions& options) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  // An updater may publish a new index between our reading the file size and
  // our reading the header; the new slot then points past what we mapped.
  // The file only grows while an index is live, so retry with the new size.
  for (int attempt = 0;; ++attempt) {
    auto impl = std::make_unique<Reader::Impl>(path, options);
    // A URL is read by ranges (the index, then the tensors asked for), not
    // downloaded whole to be mapped.
    if (options.access == ReaderOptions::Access::kMmap && !internal::IsRemotePath(path)) {
      TS_ASSIGN_OR_RETURN(auto mapped, env->MapWithFile(path));
      impl->bytes_ = mapped.region->bytes();
      impl->size_ = impl->bytes_.size();
      impl->owner_ = std::move(mapped.region);
      impl->copy_file_ = std::move(mapped.file);
    } else {
      TS_ASSIGN_OR_RETURN(impl->file_, env->OpenRead(path));
      impl->size_ = impl->file_->size();
    }
    Status s = impl->Open();
    if (s.ok()) return std::make_shared<Reader>(std::move(impl));
    if (s.code() != StatusCode::kCorruption || attempt == 3) return s;
    auto again = env->OpenRead(path);
    if (!again.ok() || (*again)->size() == impl->size_) return s;
  }
}

Result<std::shared_ptr<Reader>> Reader::OpenBuffer(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                                   std::string display_name, const ReaderOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(display_name), options);
  impl->bytes_ = bytes;
  impl->size_ = bytes.size();
  impl->owner_ = std::move(owner);
  TS_RETURN_IF_ERROR(impl->Open());
  return std::make_shared<Reader>(std::move(impl));
}

const std::string& Reader::path() const { return impl_->name_; }
std::uint64_t Reader::size() const { return impl_->root_.tensor_count; }
FileSummary Reader::summary() const { return impl_->Summary(); }
Result<std::string> Reader::Metadata() const { return impl_->Metadata(); }
Result<TensorInfo> Reader::Find(std::string_view name) const { return impl_->Find(name); }
bool Reader::Contains(std::string_view name) const { return impl_->Find(name).ok(); }
Result<Tensor> Reader::Get(std::string_view name) const { return impl_->Get(name); }
Status Reader::ReadInto(std::string_view name, std::span<std::byte> out, bool verify) const {
  return impl_->ReadInto(name, out, verify);
}
Status Reader::ReadSlice(std::string_view name, std::span<const SliceDim> slice, std::span<std::byte> out) const {
  return impl_->ReadSlice(name, slice, out);
}
Status Reader::ForEach(const std::function<bool(const TensorInfo&)>& fn) const {
  return impl_->Walk([&](std::uint64_t, std::uint64_t, const internal::EntryView& e, bool* stop) -> Status {
    *stop = !fn(Impl::ToInfo(e));
    return Status::OK();
  });
}
Status Reader::ForEachTensor(const std::function<bool(Tensor&&)>& fn) const {
  return impl_->Walk([&](std::uint64_t, std::uint64_t, const internal::EntryView& e, bool* stop) -> Status {
    TS_ASSIGN_OR_RETURN(Tensor t, impl_->TensorOf(Impl::ToInfo(e)));
    *stop = !fn(std::move(t));
    return Status::OK();
  });
}
Result<std::vector<std::string>> Reader::Names() const {
  std::vector<std::string> names;
  names.reserve(impl_->root_.tensor_count);
  TS_RETURN_IF_ERROR(impl_->Walk([&](std::uint64_t, std::uint64_t, const internal::EntryView& e, bool*) -> Status {
    names.emplace_back(e.name);
    return Status::OK();
  }));
  return names;
}
Status Reader::Verify(std::vector<std::string>* damaged) const { return impl_->Verify(damaged); }

}  // namespace tensorsafe
