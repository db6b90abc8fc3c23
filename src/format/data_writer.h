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
#include "io/env.h"
#include "tensorsafe/options.h"
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
  // Waits for the background write in flight, leaving the buffer unwritten:
  // before the file is closed or truncated on abandon.
  void Quiesce();

  // Tensor streaming: Begin pads to the alignment and checks dtype/shape/
  // metadata (not the name's uniqueness: the caller's job); Append takes the
  // bytes in row-major order; End checks the count and completes the entry,
  // which current() then returns until the next Begin (no copy per tensor).
  Status Begin(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata,
               const Limits& limits);
  Status Append(std::span<const std::byte> bytes);
  Status End();
  const TensorInfo& current() const { return cur_; }
  // Begin + the view's bytes (contiguous or strided) + End. `checksum`:
  // the view's SmallChecksum when the caller computed it already.
  Status WriteView(std::string_view name, const TensorView& view, std::string_view metadata,
                   const Limits& limits, std::optional<std::uint64_t> checksum = std::nullopt);
  // The checksum of a view WriteView writes in one piece (contiguous, at most
  // one buffer), nullopt for others or a malformed view. Lets the Writer hash
  // the bytes while its duplicate-name probe is still loading.
  static std::optional<std::uint64_t> SmallChecksum(const TensorView& view);
  // A sparse COO tensor (FORMAT.md §6.2): `indices` i64 [nnz, rank]
  // row-major, each within its dimension (and strictly increasing rows when
  // `coalesced`), `values` nnz elements of `dtype`.
  Status WriteCoo(std::string_view name, DType dtype, const Shape& shape,
                              std::span<const std::int64_t> indices, std::span<const std::byte> values,
                              bool coalesced, std::string_view metadata, const Limits& limits);
  bool in_tensor() const { return in_tensor_; }

 private:
  Status AppendStrided(const TensorView& v);
  // Waits for the background thread, then appends the buffer here: the
  // file holds every byte accepted. A thread is started only by a full
  // buffer of small pieces, so small files and large tensors never start one.
  Status WriteBuffered();

  WritableFile* file_;
  std::uint64_t pos_;
  std::uint32_t alignment_;
  // Pending small writes, flushed at kChunk bytes (a plain array: vector's
  // insert cost as much as the copy itself for 1 KiB tensors).
  std::unique_ptr<std::byte[]> buf_;
  std::size_t used_ = 0;
  std::unique_ptr<BackgroundAppender> background_;
  bool in_tensor_ = false;
  TensorInfo cur_;
  std::uint64_t remaining_ = 0;
  StreamingHash hash_;
  bool streaming_ = false;       // hash_ holds this tensor's bytes so far
  std::optional<std::uint64_t> one_shot_;  // the checksum, hashed in one call
};

// Checks a tensor name as writers must (FORMAT.md §6.2).
Status ValidateTensorName(std::string_view name, const Limits& limits);

}  // namespace tensorsafe::internal
