// Streams tensor data into a file at increasing offsets: pads each tensor to
// the alignment with zeros, hashes the bytes while they are cache-hot, and
// coalesces small writes. Shared by the Writer (a new file) and the Updater
// (bytes past the live end of an existing file).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/background_appender.h"
#include "tensorsafe/env.h"
#include "tensorsafe/limits.h"
#include "tensorsafe/tensor.h"
#include "util/hash.h"

namespace tensorsafe::internal {

class DataWriter {
 public:
  // Writes through `file` (not owned), whose next Append lands at `start`.
  // Full buffers are appended by a background thread: an append's error is
  // returned by a later call, at the latest by Flush.
  DataWriter(WritableFile* file, std::uint64_t start, std::uint32_t alignment);

  // Logical position: bytes accepted so far, buffered or not.
  std::uint64_t position() const { return pos_; }
  Status Put(std::span<const std::byte> bytes);
  Status PutZeros(std::uint64_t n);
  // Writes everything accepted and waits for it: the file may be used
  // directly afterwards.
  Status Flush();
  // Waits for the background writes queued, leaving the buffer unwritten:
  // before the file is closed or truncated on abandon.
  void Quiesce();

  // Tensor streaming: Begin pads to the alignment and checks dtype/shape/
  // metadata (not the name's uniqueness: the caller's job); Append takes the
  // bytes in row-major order; End checks the count and completes the entry,
  // which current() then returns until the next Begin (no copy per tensor).
  Status Begin(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata, const Limits& limits);
  Status Append(std::span<const std::byte> bytes);
  Status End();
  const TensorInfo& current() const { return cur_; }
  // Begin + the view's bytes (contiguous or strided) + End.
  Status WriteView(std::string_view name, const TensorView& view, std::string_view metadata, const Limits& limits);

  // The small-tensor path, for the Writer's Add. StageableSize: the byte
  // size of a view Stage takes (dense, contiguous, within `limits`' rank,
  // under half a buffer with its padding), nullopt for any other. Stage
  // copies the bytes, after zero padding to the alignment, into the pending
  // buffer without accepting them, so the caller can copy while a
  // duplicate-name probe loads; *offset receives where they start. Commit
  // accepts them; anything else drops them. current() is not updated.
  std::optional<std::uint64_t> StageableSize(const TensorView& view, const Limits& limits) const;
  // The same for a contiguous tensor of `dtype` and `shape` at `data`.
  std::optional<std::uint64_t> StageableSize(DType dtype, std::span<const std::uint64_t> shape, const std::byte* data,
                                             const Limits& limits) const;
  Status Stage(std::span<const std::byte> bytes, std::uint64_t* offset);
  void Commit() {
    used_ += staged_;
    pos_ += staged_;
    staged_ = 0;
  }

  // A sparse COO tensor (FORMAT.md §6.2): `indices` i64 [nnz, rank]
  // row-major, each within its dimension (and strictly increasing rows when
  // `coalesced`), `values` nnz elements of `dtype`.
  Status WriteCoo(std::string_view name, DType dtype, const Shape& shape, std::span<const std::int64_t> indices,
                  std::span<const std::byte> values, bool coalesced, std::string_view metadata, const Limits& limits);
  bool in_tensor() const { return in_tensor_; }

 private:
  Status AppendStrided(const TensorView& v);
  // Waits for the background thread, then appends the buffer here: the
  // file holds every byte accepted. A thread is started only by a full
  // buffer of small pieces, so small files and large tensors never start one.
  Status WriteBuffered();
  // Hands the pending buffer (used_ bytes) to the background thread and
  // takes a free one.
  Status SubmitBuffer();

  WritableFile* file_;
  std::uint64_t pos_;
  std::uint32_t alignment_;
  // Pending small writes, flushed at kChunk bytes (a plain array: vector's
  // insert cost as much as the copy itself for 1 KiB tensors).
  std::unique_ptr<std::byte[]> buf_;
  std::size_t used_ = 0;
  std::size_t staged_ = 0;  // bytes past used_ that Stage copied
  std::unique_ptr<BackgroundAppender> background_;
  bool in_tensor_ = false;
  TensorInfo cur_;
  std::uint64_t remaining_ = 0;
  StreamingHash hash_;
  bool streaming_ = false;                 // hash_ holds this tensor's bytes so far
  std::optional<std::uint64_t> one_shot_;  // the checksum, hashed in one call
};

// Checks a tensor name as writers must (FORMAT.md §6.2).
Status ValidateTensorName(std::string_view name, const Limits& limits);

}  // namespace tensorsafe::internal
