// Reader: opens a .tsafe file and serves its tensors (docs/FORMAT.md).
//
// Open() reads the header, picks the live header slot, and checks the index
// root; it does not decode every entry, so opening is independent of the
// tensor count. Which checks run at open and which are deferred to first use
// or Verify() is set by ReaderOptions::eager_index_bytes (docs/FORMAT.md §8).
//
// Thread safety: all const methods may be called concurrently from many
// threads. Tensors returned by Get() share ownership of the mapping and stay
// valid after the Reader is destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe {

// One dimension of a hyperslab: elements start, start+step, ... below stop.
struct SliceDim {
  std::uint64_t start = 0;
  std::uint64_t stop = 0;
  std::uint64_t step = 1;  // >= 1
};

// Facts about the open file, for `info`.
struct FileSummary {
  std::uint16_t version_major = 0;
  std::uint16_t version_minor = 0;
  std::uint32_t alignment = 0;
  std::uint64_t file_size = 0;
  std::uint64_t tensor_count = 0;
  std::uint64_t index_offset = 0;
  std::uint64_t index_length = 0;
  std::uint64_t sequence = 0;    // of the live header slot; 0 = via trailer
  int live_slot = -1;            // 0 or 1; -1 for a streamed file
  bool via_trailer = false;      // streamed file with empty header slots
  std::uint64_t data_bytes = 0;  // sum of the live tensors' data lengths
  // Bytes not used by the live state: alignment padding, and data and indexes
  // that updates left behind (tensorsafe compact reclaims them).
  std::uint64_t unused_bytes = 0;
  // Bytes of file metadata: 0 when the file has none (Metadata() then gives
  // "{}"), 2 for an empty object stored as such.
  std::uint64_t metadata_bytes = 0;
};

class Reader {
 public:
  // Opens `path`. Errors: kIOError (with errno) when it cannot be opened;
  // kCorruption naming the field and numbers for bad bytes; kUnsupported for a
  // newer major version or unknown required feature; kLimitExceeded.
  static Result<std::shared_ptr<Reader>> Open(const std::string& path, const ReaderOptions& options = {});
  // Opens bytes already in memory (kept alive by `owner`).
  static Result<std::shared_ptr<Reader>> OpenBuffer(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                                    std::string display_name = "<buffer>",
                                                    const ReaderOptions& options = {});

  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const;
  std::uint64_t size() const;  // number of tensors
  FileSummary summary() const;
  // The file metadata as JSON text ("{}" when none). Verified at first call.
  Result<std::string> Metadata() const;

  // The entry of `name`: kNotFound when absent, kCorruption when the entry
  // that the hash table points at is damaged.
  Result<TensorInfo> Find(std::string_view name) const;
  bool Contains(std::string_view name) const;
  // The tensor's bytes: a zero-copy view of the mapping (kMmap), or a fresh
  // buffer (kPread). Does not verify the data checksum; Verify() and
  // ReadInto(..., verify=true) do.
  Result<Tensor> Get(std::string_view name) const;
  // Visits every tensor in file (index) order with its bytes, as Get() gives
  // them, without a lookup by name: loading a whole file. `fn` returns false
  // to stop. Errors: those of ForEach, and of the reads in kPread mode.
  Status ForEachTensor(const std::function<bool(Tensor&&)>& fn) const;
  // Copies the whole tensor into `out` (exactly data_length bytes), checking
  // its data checksum when `verify`. From 32 MiB the copy (as Get's read in
  // kPread mode) is split into 8 MiB preads that short-lived helper threads
  // share with the caller (ReaderOptions::read_threads).
  Status ReadInto(std::string_view name, std::span<std::byte> out, bool verify = false) const;
  // Copies the hyperslab `slice` (one SliceDim per dimension) into `out` in
  // row-major order, reading only the rows needed. Dense whole-byte dtypes.
  // Errors: kOutOfRange, kInvalidArgument (size of out), kUnsupported.
  Status ReadSlice(std::string_view name, std::span<const SliceDim> slice, std::span<std::byte> out) const;

  // Visits every entry in file (index) order, stopping at the first error or
  // when `fn` returns false. Streams: memory does not grow with the count.
  Status ForEach(const std::function<bool(const TensorInfo&)>& fn) const;
  // All names in file order.
  Result<std::vector<std::string>> Names() const;

  // Checks everything: index checksums, every entry, no overlaps, every
  // tensor's data checksum. Returns the first problem found; `damaged`, when
  // given, receives the names of all tensors whose data checksum fails.
  Status Verify(std::vector<std::string>* damaged = nullptr) const;

  class Impl;
  // Used by the factories; Impl is opaque outside the library.
  explicit Reader(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorsafe
