// TFRT Binary Tensor Format (.btf) codec: a u64 tensor count, a table of
// absolute u64 record offsets, then records of a 16-byte header (rank, dtype
// code, layout code, 6 reserved bytes), u64 dims and row-major data, each
// padded to 8 bytes. Layout 0 is dense; COO (indices i64 [nnz, rank] and
// values [nnz]) is layout 1 in TFRT's code and 2 in its document: both are
// read, 1 is written. docs/formats/btf.md has the details and deviations.
//
// BTF has no names: dense record i becomes tensor "i"; COO record i becomes
// the native sparse tensor "i" (Layout::kCoo, FORMAT.md §6.2; its coalesced
// flag derived from the indices, since BTF stores none), or, with
// ReadOptions::coo_as_pairs, two tensors "i.indices" (i64 [nnz, rank]) and
// "i.values" ([nnz]), each with metadata {"layout":"coo","shape":[dense
// dims]}. Encode writes native COO tensors, and such pairs (any base name),
// as one COO record each.
//
// Thread safety: all functions are pure or touch only their own files.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/limits.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::btf {

// Persisted layout codes (TFRT include/tfrt/tensor/btf.h): never renumber.
inline constexpr std::uint8_t kLayoutDense = 0;
inline constexpr std::uint8_t kLayoutCoo = 1;            // what TFRT's readers accept
inline constexpr std::uint8_t kLayoutCooDocumented = 2;  // what its document says
inline constexpr std::size_t kRecordAlignment = 8;

struct ReadOptions {
  // Bounds what a file can claim. Used here: max_tensor_count (records,
  // default ~100 M, also bounded by the file size) and max_rank (default 64).
  Limits limits;
  // Accept layout code 2 (the document's COO) as COO.
  bool accept_documented_coo_layout = true;
  // Reject record offsets that are not multiples of 8, as TFRT's btf_info
  // tool does. Files written before mid-2020 have such offsets, so off by
  // default.
  bool require_aligned_offsets = false;
  // Decode: a COO record as the pair "i.indices"/"i.values" (the mapping
  // before native COO existed) instead of one Layout::kCoo tensor.
  bool coo_as_pairs = false;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // WriteFile: fsync the file and its directory.
  bool sync = true;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// A sparse COO tensor: nnz nonzeros of a tensor of `dense_shape`.
struct CooTensor {
  Shape dense_shape;
  Tensor indices;  // i64 [nnz, rank], row-major, each row one coordinate
  Tensor values;   // [nnz] of the tensor's dtype, in the order of `indices`
};

// One decoded record, with the raw header fields for inspection tools.
struct Record {
  std::uint64_t offset = 0;  // of the 16-byte header
  std::uint64_t end = 0;     // one past the payload's last byte (before padding)
  std::uint8_t dtype_code = 0;
  std::uint8_t layout_code = 0;
  std::array<std::uint8_t, 6> reserved{};  // ignored on read, zero on write
  bool coo = false;
  Tensor dense;          // when !coo: shape = dims, data_offset = data start
  CooTensor coo_tensor;  // when coo
  // When coo: the same record as one Layout::kCoo tensor named "i" whose
  // region runs from the indices to the values' end (coo_values_offset =
  // indices bytes + 8, skipping the values' NNZ field).
  Tensor coo_native;
};

// Decodes every record of a .btf buffer. Tensors view `bytes` and share
// `owner` when their data is aligned to the element size; otherwise they own
// a copy. Errors: kCorruption (table or data past the end, negative dims,
// COO shapes that disagree, indices out of bounds), kUnsupported (dtype code
// above 9, unknown layout), kLimitExceeded (count or rank above the limits).
Result<std::vector<Record>> DecodeRecords(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                          const std::string& display_name, const ReadOptions& options = {});
// DecodeRecords mapped to a TensorSet as described above.
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` and decodes it; tensors keep the mapping alive.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// One record to encode.
using Item = std::variant<Tensor, CooTensor>;

// Encodes records as TFRT's writer does: offsets from (1 + n) * 8, zero
// reserved bytes, every record (the last too) padded with zeros to 8 bytes.
// Errors: kUnsupported (a dtype BTF lacks: bool, f16, bf16, f8, complex...),
// kInvalidArgument (data size not matching shape; COO parts of the wrong
// dtype or shape, or indices out of bounds).
Result<std::string> EncodeItems(std::span<const Item> items, const WriteOptions& options = {});
// Encodes a TensorSet: dense tensors as layout 0, native COO tensors and
// COO pairs as layout 1.
// A tensor with {"layout":"coo"} metadata must be named "<base>.indices" or
// "<base>.values" and have its partner (kInvalidArgument otherwise).
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});
// Writes the bytes Encode returns via a temporary file renamed over `path`;
// on error nothing is left behind. Streams: only headers are built in
// memory, each tensor's bytes are written from where they are.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

// True when `dtype` has a TFRT dtype code (ints, unsigned ints, f32, f64).
bool HoldsDType(DType dtype);
// BTF stores no names: dense record r reads back as "r", a COO record as
// "r.indices" and "r.values". OK when every tensor of `set` already has the
// name it will read back with, or `drop_names` consents to positional
// names; else kInvalidArgument naming the first tensor that differs.
Status CheckNames(TensorSet& set, bool drop_names);

}  // namespace tensorsafe::btf
