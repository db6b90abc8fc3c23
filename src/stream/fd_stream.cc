// StreamWriter / StreamReader over a file descriptor (include/tensorsafe/
// stream.h). Native wire: docs/STREAM.md; tenbin wire: docs/formats/tenbin.md.
#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "stream/internal.h"
#include "stream/native_codec.h"
#include "tensorsafe/stream/fd.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe {

using internal::AlignedBuffer;
using internal::kDataAlignment;
using internal::kMessageHeaderSize;

namespace {

using tensorsafe::internal::Str;

iovec Iov(const void* p, std::size_t n) { return iovec{const_cast<void*>(p), n}; }

Status CheckFd(int fd) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return InvalidArgument("fd " + std::to_string(fd) + " is not open");
  return Status::OK();
}

}  // namespace

// ---------------------------------------------------------------- writer

class StreamWriter::Impl {
 public:
  Impl(int fd, bool socket, StreamWriterOptions o) : fd_(fd), socket_(socket), opt_(std::move(o)) {}

  Status Write(const TensorSet& batch) {
    TS_RETURN_IF_ERROR(Usable());
    std::vector<iovec> iov;
    std::string preamble, small;
    internal::EncodedBatch e;
    if (opt_.wire == WireFormat::kNative) {
      if (!started_) {
        preamble = internal::EncodePreamble();
        iov.push_back(Iov(preamble.data(), preamble.size()));
      }
      TS_ASSIGN_OR_RETURN(e, internal::EncodeBatch(batch, sequence_, opt_.limits));
      iov.reserve(iov.size() + 1 + 2 * batch.tensors.size());
      iov.push_back(Iov(e.head.data(), e.head.size()));
      for (std::size_t k = 0; k < batch.tensors.size(); ++k) {
        const auto& d = batch.tensors[k].data;
        iov.push_back(Iov(d.data(), d.size()));
        iov.push_back(Iov(internal::kZeros, e.pads[k]));
      }
    } else {
      TS_ASSIGN_OR_RETURN(auto headers, internal::TenbinHeaders(batch, opt_.tenbin, opt_.drop_metadata));
      // Chunk = magic, int64 length, payload, zeros to 64 (tenbin.md). Small
      // pieces go in one string reserved up front so their pointers hold.
      std::size_t need = 0;
      for (const auto& h : headers) need += 2 * tenbin::kChunkHeaderSize + h.size();
      small.reserve(need);
      for (std::size_t k = 0; k < headers.size(); ++k) {
        const std::size_t at = small.size();
        small += "~TenBin~";
        internal::Put64(small, headers[k].size());
        small += headers[k];
        const std::size_t data_at = small.size();
        small += "~TenBin~";
        const auto& d = batch.tensors[k].data;
        internal::Put64(small, d.size());
        iov.push_back(Iov(small.data() + at, data_at - at));
        iov.push_back(Iov(internal::kZeros, (64 - headers[k].size() % 64) % 64));
        iov.push_back(Iov(small.data() + data_at, tenbin::kChunkHeaderSize));
        iov.push_back(Iov(d.data(), d.size()));
        iov.push_back(Iov(internal::kZeros, (64 - d.size() % 64) % 64));
      }
    }
    std::uint64_t total = 0;
    for (const iovec& v : iov) total += v.iov_len;
    Status s = internal::WriteAllV(fd_, iov, socket_);
    if (!s.ok()) {
      failed_ = true;
      return s;
    }
    started_ = true;
    ++sequence_;
    bytes_ += total;
    return Status::OK();
  }

  Status Finish() {
    TS_RETURN_IF_ERROR(Usable());
    finished_ = true;
    if (opt_.wire != WireFormat::kNative) return Status::OK();
    std::string bytes = started_ ? std::string() : internal::EncodePreamble();
    bytes += internal::EncodeEndMessage(sequence_);
    std::vector<iovec> iov{Iov(bytes.data(), bytes.size())};
    Status s = internal::WriteAllV(fd_, iov, socket_);
    if (!s.ok()) failed_ = true;
    bytes_ += bytes.size();
    return s;
  }

  Status Usable() const {
    if (failed_) return FailedPrecondition("stream writer failed earlier");
    if (finished_) return FailedPrecondition("stream writer is finished");
    return Status::OK();
  }

  int fd_;
  bool socket_;
  StreamWriterOptions opt_;
  bool started_ = false, finished_ = false, failed_ = false;
  std::uint64_t sequence_ = 0, bytes_ = 0;
};

Result<std::unique_ptr<StreamWriter>> StreamWriter::ToFd(int fd, const StreamWriterOptions& options) {
  TS_RETURN_IF_ERROR(CheckFd(fd));
  struct stat st;
  ::fstat(fd, &st);
  return std::make_unique<StreamWriter>(std::make_unique<Impl>(fd, S_ISSOCK(st.st_mode), options));
}
StreamWriter::StreamWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamWriter::~StreamWriter() = default;
Status StreamWriter::Write(const TensorSet& batch) { return impl_->Write(batch); }
Status StreamWriter::Finish() { return impl_->Finish(); }
std::uint64_t StreamWriter::batches_written() const { return impl_->sequence_; }
std::uint64_t StreamWriter::bytes_written() const { return impl_->bytes_; }

// ---------------------------------------------------------------- reader

class StreamReader::Impl {
 public:
  Impl(int fd, StreamReaderOptions o) : fd_(fd), opt_(std::move(o)) {}

  Result<std::optional<TensorSet>> Next() {
    if (failed_) return FailedPrecondition("stream reader failed earlier");
    if (done_) return std::optional<TensorSet>();
    auto r = NextImpl();
    if (!r.ok()) {
      failed_ = true;
      return r.status().WithContext(where());
    }
    if (!*r)
      done_ = true;
    else
      ++batches_;
    return r;
  }

  std::string where() const { return "batch " + Str(batches_) + " (stream offset " + Str(bytes_) + ")"; }

  // Reads exactly out.size() bytes; EOF first is "truncated" naming `what`.
  Status ReadExactly(std::span<std::byte> out, const std::string& what) {
    TS_ASSIGN_OR_RETURN(std::size_t got, internal::ReadFull(fd_, out));
    bytes_ += got;
    if (got != out.size()) {
      return Corruption("truncated: the stream ended after " + Str(got) + " of the " + Str(out.size()) + " bytes of " +
                        what);
    }
    return Status::OK();
  }

  Result<std::optional<TensorSet>> NextImpl() {
    if (!wire_) {
      std::byte magic[8];
      TS_ASSIGN_OR_RETURN(std::size_t got, internal::ReadFull(fd_, magic));
      bytes_ += got;
      if (got == 0) return Corruption("truncated: empty stream (no preamble)");
      if (got == 8 && std::memcmp(magic, "~TenBin~", 8) == 0) {
        wire_ = WireFormat::kTenbin;
        pending_magic_ = true;
      } else {
        std::byte pre[internal::kPreambleSize];
        std::memcpy(pre, magic, got);
        if (got == 8) TS_RETURN_IF_ERROR(ReadExactly(std::span(pre).subspan(8), "the stream preamble"));
        TS_RETURN_IF_ERROR(internal::DecodePreamble(std::span(pre, got == 8 ? sizeof pre : got)));
        wire_ = WireFormat::kNative;
      }
    }
    return *wire_ == WireFormat::kNative ? NextNative() : NextTenbin();
  }

  // A buffer of `size` bytes: one of the last kSpares batches' whose tensors
  // are all gone (nothing else holds it), else a fresh one. Reuse keeps a
  // steady stream from faulting in fresh pages for every message; more than
  // one spare, because a caller typically still holds the previous batch
  // while it asks for the next (`for batch in stream`: 64 MiB batches were
  // mapped and faulted in anew each time, 2026-11-26).
  std::shared_ptr<AlignedBuffer> Buffer(std::size_t size) {
    for (auto& s : spares_) {
      if (s && s.use_count() == 1 && s->capacity() >= size) return s;
    }
    // None fits: take the slot of a free (too small) or empty one, else
    // forget the oldest (its holder keeps it alive).
    std::shared_ptr<AlignedBuffer>* slot = &spares_[next_victim_++ % kSpares];
    for (auto& s : spares_) {
      if (!s || s.use_count() == 1) slot = &s;
    }
    *slot = AlignedBuffer::Allocate(size);
    return *slot;
  }

  Result<std::optional<TensorSet>> NextNative() {
    std::byte head[kMessageHeaderSize];
    TS_ASSIGN_OR_RETURN(std::size_t got, internal::ReadFull(fd_, head));
    bytes_ += got;
    if (got == 0) {
      return Corruption("truncated: the stream ended after " + Str(batches_) +
                        " batches without the end-of-stream marker");
    }
    if (got != sizeof head) return Corruption("truncated: message header is " + Str(got) + " of 64 bytes");
    TS_ASSIGN_OR_RETURN(internal::MessageHeader h, internal::DecodeHeader(head, opt_));
    if (h.sequence != batches_) {  // H8
      return Corruption("message sequence " + Str(h.sequence) + ", expected " + Str(batches_));
    }
    if (h.kind == internal::MessageKind::kEnd) return std::optional<TensorSet>();
    const std::size_t body = h.descriptor_bytes + h.data_bytes;
    auto buf = Buffer(body);
    if (!buf) return LimitExceeded("cannot allocate " + Str(body) + " bytes for a message");
    std::span<std::byte> all(buf->data(), body);
    std::size_t body_got = 0;
    auto read_part = [&](std::span<std::byte> part) -> Status {
      TS_ASSIGN_OR_RETURN(std::size_t n, internal::ReadFull(fd_, part));
      bytes_ += n;
      body_got += n;
      if (n != part.size()) {
        return Corruption("truncated: the stream ended after " + Str(body_got) + " of the " + Str(body) +
                          " bytes of a message body of " + Str(body) + " bytes");
      }
      return Status::OK();
    };
    // Descriptors first, then the data in pieces that fit in L2 cache, each
    // checked (padding, checksum) right after it is read: one pass over the
    // data instead of a read pass and a cold hashing pass (STREAM.md §13).
    TS_RETURN_IF_ERROR(read_part(all.first(h.descriptor_bytes)));
    TS_ASSIGN_OR_RETURN(auto d, internal::DecodeDescriptors(h, all.first(h.descriptor_bytes), opt_));
    auto data = all.subspan(h.descriptor_bytes);
    internal::DataVerifier verifier(d, data.size(), opt_.verify_data);
    for (std::size_t at = 0; at < data.size(); at += kReadPiece) {
      auto piece = data.subspan(at, std::min(kReadPiece, data.size() - at));
      TS_RETURN_IF_ERROR(read_part(piece));
      TS_RETURN_IF_ERROR(verifier.Update(piece));
    }
    TS_RETURN_IF_ERROR(verifier.Finish());
    return std::optional<TensorSet>(internal::BuildBatch(std::move(d), data, buf));
  }

  // 256 KiB: a few pieces fit in the L2 cache (1 MiB per core on the
  // development machine), so hashing a piece reads it from cache.
  static constexpr std::size_t kReadPiece = 256 << 10;

  // One chunk into its own aligned buffer. nullopt at EOF before the magic
  // when `eof_ok`.
  Result<std::optional<std::span<const std::byte>>> Chunk(std::vector<std::shared_ptr<AlignedBuffer>>& keep,
                                                          bool eof_ok) {
    std::byte hdr[tenbin::kChunkHeaderSize];
    std::size_t have = 0;
    if (pending_magic_) {
      std::memcpy(hdr, "~TenBin~", 8);
      have = 8;
      pending_magic_ = false;
    } else {
      TS_ASSIGN_OR_RETURN(have, internal::ReadFull(fd_, std::span(hdr, 8)));
      bytes_ += have;
      if (have == 0 && eof_ok) return std::optional<std::span<const std::byte>>();
      if (have != 8) return Corruption("truncated: tenbin chunk magic is " + Str(have) + " of 8 bytes");
      if (std::memcmp(hdr, "~TenBin~", 8) != 0) return Corruption("bad tenbin chunk magic");
    }
    TS_RETURN_IF_ERROR(ReadExactly(std::span(hdr + 8, 8), "a tenbin chunk length"));
    const auto len = static_cast<std::int64_t>(internal::Load64(hdr + 8));
    if (len < 0 || static_cast<std::uint64_t>(len) > opt_.max_message_bytes) {
      return len < 0 ? Corruption("negative tenbin chunk length " + std::to_string(len))
                     : LimitExceeded("tenbin chunk of " + Str(len) + " bytes exceeds max_message_bytes");
    }
    const std::size_t padded = *internal::AlignUp(static_cast<std::uint64_t>(len), 64);
    auto buf = AlignedBuffer::Allocate(padded);
    if (!buf) return LimitExceeded("cannot allocate " + Str(padded) + " bytes for a tenbin chunk");
    TS_RETURN_IF_ERROR(ReadExactly(std::span(buf->data(), padded), "a tenbin chunk of " + Str(len) + " bytes"));
    keep.push_back(buf);
    return std::optional(std::span<const std::byte>(buf->data(), static_cast<std::size_t>(len)));
  }

  Result<std::optional<TensorSet>> NextTenbin() {
    auto keep = std::make_shared<std::vector<std::shared_ptr<AlignedBuffer>>>();
    std::vector<std::span<const std::byte>> payloads;
    const std::uint32_t per = opt_.tenbin_arrays_per_batch;
    while (per == 0 || payloads.size() < 2 * std::size_t{per}) {
      const bool at_boundary = payloads.size() % 2 == 0;
      TS_ASSIGN_OR_RETURN(auto chunk, Chunk(*keep, at_boundary && (per == 0 || payloads.empty())));
      if (!chunk) break;
      payloads.push_back(*chunk);
      if (payloads.size() / 2 > opt_.limits.max_tensor_count) {
        return LimitExceeded("tenbin batch exceeds max_tensor_count " + Str(opt_.limits.max_tensor_count));
      }
    }
    if (payloads.empty()) {
      if (per == 0 && batches_ == 0) return std::optional<TensorSet>(TensorSet{});
      return std::optional<TensorSet>();
    }
    tenbin::ReadOptions ro;
    ro.limits = opt_.limits;
    TS_ASSIGN_OR_RETURN(TensorSet set, tenbin::DecodePayloads(payloads, keep, "tenbin stream", ro));
    if (per == 0) done_after_ = true;
    return std::optional<TensorSet>(std::move(set));
  }

  int fd_;
  StreamReaderOptions opt_;
  std::optional<WireFormat> wire_;
  bool pending_magic_ = false, failed_ = false, done_ = false, done_after_ = false;
  std::uint64_t batches_ = 0, bytes_ = 0;
  static constexpr std::size_t kSpares = 3;
  std::array<std::shared_ptr<AlignedBuffer>, kSpares> spares_;
  std::size_t next_victim_ = 0;
};

Result<std::unique_ptr<StreamReader>> StreamReader::FromFd(int fd, const StreamReaderOptions& options) {
  TS_RETURN_IF_ERROR(CheckFd(fd));
  return std::make_unique<StreamReader>(std::make_unique<Impl>(fd, options));
}
StreamReader::StreamReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamReader::~StreamReader() = default;
Result<std::optional<TensorSet>> StreamReader::Next() {
  if (impl_->done_after_ && !impl_->done_) {
    impl_->done_ = true;
    return std::optional<TensorSet>();
  }
  return impl_->Next();
}
std::optional<WireFormat> StreamReader::wire_format() const { return impl_->wire_; }
std::uint64_t StreamReader::batches_read() const { return impl_->batches_; }
std::uint64_t StreamReader::bytes_read() const { return impl_->bytes_; }

}  // namespace tensorsafe
