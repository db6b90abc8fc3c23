// Descriptions of tensors: shapes, entry metadata, and non-owning or owning
// views of tensor bytes.
//
// Thread safety: plain values. A Tensor shares ownership of the memory it views
// (a file mapping or a heap buffer); copies may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/status.h"

namespace tensorsafe {

using Shape = std::vector<std::uint64_t>;

// Persisted in .tsafe index entries (FORMAT.md §6.2): never renumber.
enum class Layout : std::uint8_t {
  kDense = 0,  // row-major (C order), contiguous, little-endian
  // Sparse coordinate format (spec 1.1): the data region holds the indices,
  // i64 [nnz, rank] row-major, then (at coo_values_offset, aligned) the
  // values, [nnz] of the tensor's dtype. The shape is the dense shape.
  kCoo = 1,
};

// Number of elements of a shape (1 for rank 0), or an out-of-range error when
// the product of its nonzero dimensions overflows 64 bits (as NumPy does: so
// the answer does not depend on the order of the dimensions; a zero
// dimension gives 0 elements).
Result<std::uint64_t> ElementCount(std::span<const std::uint64_t> shape);
// Bytes that a dense tensor of `dtype` and `shape` occupies; errors when the
// product overflows or when the element count is not a multiple of the
// dtype's block (e.g. an odd number of f4 elements).
Result<std::uint64_t> DenseByteSize(DType dtype, std::span<const std::uint64_t> shape);
// "[2, 3]"
std::string ShapeToString(std::span<const std::uint64_t> shape);

// A caller's tensor to write: `data` points at the first element. `strides`
// (in bytes, one per dim, may be negative) describes a strided view; empty
// means contiguous row-major. Packed sub-byte dtypes must be contiguous.
struct TensorView {
  DType dtype = DType::kU8;
  Shape shape;
  const std::byte* data = nullptr;
  std::vector<std::int64_t> strides;  // bytes; empty = contiguous

  // A contiguous view over `bytes`, whose size must be DenseByteSize().
  static TensorView Contiguous(DType dtype, Shape shape, std::span<const std::byte> bytes) {
    return TensorView{dtype, std::move(shape), bytes.data(), {}};
  }
};

// What the index says of one tensor.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  Layout layout = Layout::kDense;
  Shape shape;
  std::uint64_t data_offset = 0;    // absolute file offset
  std::uint64_t data_length = 0;    // bytes
  std::uint64_t data_checksum = 0;  // XXH3-64 of the data bytes
  std::string metadata_json;        // per-tensor metadata, "" when absent
  // Layout::kCoo only: stored elements, where the values start (relative to
  // data_offset), and whether the indices are sorted and unique.
  std::uint64_t nnz = 0;
  std::uint64_t coo_values_offset = 0;
  bool coalesced = false;
};

// The two parts of a COO tensor's data region.
struct CooParts {
  std::span<const std::byte> indices;  // i64 [nnz, rank], row-major
  std::span<const std::byte> values;   // [nnz] of info.dtype
};
// Splits `data` (the whole region of a Layout::kCoo tensor) per `info`;
// kInvalidArgument when it is not a COO tensor or the sizes disagree.
Result<CooParts> SplitCoo(const TensorInfo& info, std::span<const std::byte> data);
// Checks FORMAT.md's R42 on the indices of a COO tensor (`indices` as
// SplitCoo returns them, any alignment): every coordinate lies within its
// dimension and, when info.coalesced, the rows strictly increase. Reader::Get
// defers this check to Verify(); call it before handing indices to code that
// trusts them (torch.sparse_coo_tensor does not bound-check). Errors:
// kCorruption naming the tensor, the element and the dimension;
// kInvalidArgument when `indices` is not nnz x rank x 8 bytes.
Status CheckCooIndices(const TensorInfo& info, std::span<const std::byte> indices);

// A tensor's bytes together with their owner. For a mapped reader the bytes
// are the file mapping itself (zero-copy, read-only) and `owner` keeps the
// mapping alive after the Reader is gone.
struct Tensor {
  TensorInfo info;
  std::span<const std::byte> data;
  std::shared_ptr<const void> owner;
};

}  // namespace tensorsafe
