// NumPy .npy codec: one array per file (docs/formats/npy.md).
//
// Reading never runs pickle: object ('|O') and structured dtypes are refused
// with kUnsupported. Little-endian, C-order data is served zero-copy (the
// tensor views `owner`'s bytes); big-endian data is byte-swapped and Fortran-
// order data transposed into a buffer the tensor owns.
//
// Every codec in include/tensorsafe/formats/ has the same four entry points:
// ReadFile, Decode, WriteFile, Encode.
//
// Thread safety: all functions are reentrant; they share no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::npy {

struct ReadOptions {
  // Header bytes after the length field. A rank-64 header needs under 2 KiB;
  // NumPy itself refuses more than 10000 unless told otherwise.
  std::uint32_t max_header_bytes = 65536;
  std::uint32_t max_rank = 64;
  // How to read a void descr ('<V1', '|V2', ...), which is what NumPy records
  // for ml_dtypes types: the descr has lost the type. When unset, 2-byte void
  // reads as bf16 (ml_dtypes.bfloat16, the common case) and 1-byte void is
  // refused (it may be any float8, float6, float4, int4 or uint4 of ml_dtypes).
  // When set, it must be a whole-byte dtype of the void's size.
  std::optional<DType> void_as;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // fsync the file and its directory (WriteFile only).
  bool sync = true;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// Decodes one .npy image. The tensor is named after `display_name`'s last
// path component without its ".npy" suffix; its data views `bytes` (sharing
// `owner`, which must keep them alive) or, after a byte-order or Fortran-order
// conversion, a buffer it owns. data_offset is the data's offset in `bytes`.
// Errors, each naming `display_name`: kCorruption (bad magic, header syntax,
// sizes), kUnsupported (version, dtype, object/structured arrays),
// kLimitExceeded (header size, rank).
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` and decodes it as Decode does. Adds kIOError (with errno;
// ENOENT for a missing file).
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// The .npy header (magic through the final '\n') NumPy writes for an array
// of `dtype` and `shape` in C order: version 1.0 unless the header needs 2.0,
// data starting at a multiple of 64. kUnsupported for dtypes with no NumPy or
// ml_dtypes encoding (packed f6/f4/i4/u4).
Result<std::string> EncodeHeader(DType dtype, std::span<const std::uint64_t> shape);
// A whole .npy image of `tensor` (its data must be DenseByteSize bytes).
Result<std::string> Encode(const Tensor& tensor, const WriteOptions& options = {});
// Writes the single tensor of `set` to `path` through a temp file renamed into
// place; nothing is left behind on error. kInvalidArgument unless the set
// holds exactly one tensor (use npz for more).
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

// The NumPy descr written for `dtype` ("<f4", "|b1", "<V2" for bf16), or
// kUnsupported.
Result<std::string> DescrOf(DType dtype);
// True when NumPy reads `dtype` back as itself: it has a descr, and not the
// anonymous "<V1" that any of five 1-byte floats would write
// (ReadOptions::void_as).
bool HoldsDType(DType dtype);
// A .npy file holds exactly one array: kInvalidArgument for any other count.
Status CheckNames(TensorSet& set, bool drop_names);

}  // namespace tensorsafe::npy
