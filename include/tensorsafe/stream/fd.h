// Streams of tensor batches over a file descriptor: a pipe, a TCP or Unix
// socket, a file. A batch is a TensorSet (named tensors + JSON metadata).
//
// The native wire format (docs/STREAM.md) is self-delimiting and checksummed;
// every tensor's data lands 64-byte aligned in the receiver's buffer, and the
// tensors a StreamReader returns are views of that one buffer (no copy after
// the read). StreamWriter sends tensor data straight from the caller's memory
// with writev/sendmsg (no staging copy). The tenbin wire (WebDataset /
// tensorcom `.ten` chunks) is the second option.
//
// Flow control: the writer blocks in the kernel when the reader is slow (a
// full pipe or socket buffer), and holds no queue of its own, so a reader
// that stops consuming never makes the writer's memory grow.
//
// Thread safety: a StreamWriter or StreamReader is used by one thread at a
// time. Batches returned by Next() own their memory (shared) and may be used
// from any thread, after the reader is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe {

enum class WireFormat : std::uint8_t {
  kNative = 0,  // docs/STREAM.md
  kTenbin = 1,  // "~TenBin~" chunks, as webdataset's tenbin.write(); no metadata
};

struct StreamWriterOptions {
  WireFormat wire = WireFormat::kNative;
  // Checks on what is sent (names, metadata JSON depth, rank).
  Limits limits;
  // kTenbin: how infos are written. Batch and tensor metadata cannot travel
  // in tenbin: a batch that has some is refused (kUnsupported) unless
  // `drop_metadata`.
  tenbin::WriteOptions tenbin;
  bool drop_metadata = false;
};

struct StreamReaderOptions {
  // Bounds what a hostile sender can make the reader do: max_tensor_count
  // (per batch), max_rank, max_name_bytes, max_metadata_bytes, max_json_depth.
  Limits limits;
  // A message (header + descriptors + data) above this is refused with
  // kLimitExceeded before anything is allocated for it.
  std::uint64_t max_message_bytes = std::uint64_t{4} << 30;
  // Check every tensor's XXH3-64 data checksum (native wire).
  bool verify_data = true;
  // kTenbin input has no batch boundaries: this many arrays make a batch;
  // 0 = the whole stream (until EOF) is one batch.
  std::uint32_t tenbin_arrays_per_batch = 0;
};

// Writes batches to `fd` (not owned, not closed). For sockets the writes use
// MSG_NOSIGNAL; a writer to a pipe whose reader has gone gets SIGPIPE unless
// the process ignores it (the CLI does).
class StreamWriter {
 public:
  // Writes nothing yet: the native stream preamble goes out with the first
  // batch (or Finish). Errors: kInvalidArgument for a bad fd.
  static Result<std::unique_ptr<StreamWriter>> ToFd(int fd, const StreamWriterOptions& options = {});
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Sends one batch; returns once every byte is in the kernel (the caller may
  // then reuse its memory). Each tensor's data must be dense, exactly
  // DenseByteSize(dtype, shape) bytes; names non-empty, unique, UTF-8.
  // Errors: kInvalidArgument (the batch), kLimitExceeded, kUnsupported
  // (tenbin: dtype, metadata), kIOError (the OS; EPIPE when the reader has
  // gone), kFailedPrecondition (after Finish or an I/O error).
  Status Write(const TensorSet& batch);
  // Native: sends the end-of-stream marker. Tenbin: nothing (EOF ends it).
  // The fd stays open.
  Status Finish();

  std::uint64_t batches_written() const;
  std::uint64_t bytes_written() const;

  class Impl;
  explicit StreamWriter(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Reads batches from `fd` (not owned, not closed). The wire format is
// detected from the first bytes (the native preamble or "~TenBin~").
class StreamReader {
 public:
  static Result<std::unique_ptr<StreamReader>> FromFd(int fd, const StreamReaderOptions& options = {});
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // The next batch, or nullopt at the end of the stream (native: the end
  // marker; tenbin: EOF at a chunk boundary). A batch is delivered only when
  // it arrived whole and every check passed. Errors: kCorruption (bad bytes,
  // a checksum mismatch, or "truncated": EOF inside a message, or before the
  // native end marker), kUnsupported (version, feature), kLimitExceeded,
  // kIOError. After an error every call returns kFailedPrecondition.
  Result<std::optional<TensorSet>> Next();

  // Known after the first Next().
  std::optional<WireFormat> wire_format() const;
  std::uint64_t batches_read() const;
  std::uint64_t bytes_read() const;

  class Impl;
  explicit StreamReader(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- Native messages as bytes (used by LMDB values and tests) ----

// The whole native message of `batch` (header, descriptors, aligned data)
// with sequence number `sequence`, without the stream preamble.
Result<std::string> EncodeMessage(const TensorSet& batch, std::uint64_t sequence = 0, const Limits& limits = {});
// Decodes one native batch message that fills `bytes` exactly. Tensors view
// `bytes` and share `owner` when the data is aligned to its element type
// (always when `bytes` starts 64-byte aligned); otherwise they own a copy.
// Errors as StreamReader::Next; an end-of-stream message is kInvalidArgument.
Result<TensorSet> DecodeMessage(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                const StreamReaderOptions& options = {});

}  // namespace tensorsafe
