// Writer: produces a .tsafe file in one pass (docs/FORMAT.md).
//
// Tensors are written as they come; the index follows the data, then the
// trailer. A writer to a path writes "<path>.tmp-XXXXXX" in the same directory
// and renames it over `path` in Finish(), so no reader ever sees a partial file
// and nothing is left behind on Abandon() or on an error. A writer to a file
// descriptor (pipe, socket) never seeks: the file it produces is valid through
// its trailer; a seekable descriptor also gets its header slot filled.
// Past its first MiB the temp file reserves disk blocks ahead of the writes
// (fallocate, 8-128 MiB at a time, only while over 1 GiB is free), which
// makes them faster; Finish() gives back what was not used, and Abandon()
// removes the file with its blocks.
//
// The same input gives the same bytes.
//
// Small tensors are copied into 1 MiB buffers that a background thread
// writes while the caller adds more, so a failed write is reported by a
// later call, at the latest by Finish(). Large tensors are written by the
// calling thread while the background thread hashes them. Either way a view
// may be reused as soon as Add (or Append) returns. After a kIOError every
// later call fails, and a writer to a path has removed its temp file.
//
// Thread safety: a Writer is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/env.h"
#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe {

class Writer {
 public:
  // Starts a file that will appear at `path` on Finish(). Errors:
  // kInvalidArgument for bad options, kIOError when the temp file cannot be
  // created.
  static Result<std::unique_ptr<Writer>> Create(const std::string& path, const WriterOptions& options = {});
  // Writes to `fd` (not owned, not closed) from its current position, which
  // must be 0 for the result to be a valid file on its own.
  static Result<std::unique_ptr<Writer>> ToFd(int fd, const WriterOptions& options = {});
  // For tests and embedders: writes through a file object (fault injection).
  static Result<std::unique_ptr<Writer>> ToFile(std::unique_ptr<WritableFile> file, const WriterOptions& options = {});

  ~Writer();  // abandons an unfinished file
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Adds a whole tensor from a contiguous or strided view. `metadata_json` is
  // a JSON object or empty. Errors: kInvalidArgument (duplicate or non-UTF-8
  // name, bad metadata, view size), kLimitExceeded, kIOError,
  // kFailedPrecondition (a streamed tensor is open, or the writer finished).
  Status Add(std::string_view name, const TensorView& view, std::string_view metadata_json = {});
  // Adds a dense tensor whose row-major bytes are exactly `data`: the same
  // file as Add with TensorView::Contiguous, without building a view (no
  // allocation a tensor, which counts at 100,000s of small tensors), and
  // checked: kInvalidArgument when data.size() is not DenseByteSize(dtype,
  // shape). Other errors as Add.
  Status Add(std::string_view name, DType dtype, std::span<const std::uint64_t> shape, std::span<const std::byte> data,
             std::string_view metadata_json = {});

  // Adds a sparse COO tensor of dense shape `shape` (spec 1.1, FORMAT.md
  // §6.2): `indices` holds nnz rows of rank i64 (each within its dimension;
  // strictly increasing rows when `coalesced`), `values` nnz elements.
  // Errors as Add, and kInvalidArgument for out-of-range or unordered indices.
  Status AddCoo(std::string_view name, DType dtype, const Shape& shape, std::span<const std::int64_t> indices,
                std::span<const std::byte> values, bool coalesced, std::string_view metadata_json = {});
  // Copies a tensor as another reader returned it, dense or COO, with its
  // name and metadata (for compaction and conversion).
  Status AddTensor(const Tensor& tensor);

  // Streams a tensor larger than memory: Begin, then Append its bytes in row-
  // major order in chunks of any size, then End. End fails unless exactly
  // DenseByteSize(dtype, shape) bytes were appended.
  Status BeginTensor(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata_json = {});
  Status Append(std::span<const std::byte> bytes);
  Status EndTensor();

  // Sets the file metadata: a JSON object of any nesting (within limits).
  Status SetMetadata(std::string_view json_object);

  // Writes the index and trailer, syncs, renames into place. After an error the
  // writer is abandoned and the destination untouched.
  Status Finish();
  // Discards everything written; the destination is untouched.
  void Abandon();

  std::uint64_t tensor_count() const;
  std::uint64_t bytes_written() const;

  class Impl;
  // Used by the factories; Impl is opaque outside the library.
  explicit Writer(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorsafe
