// NumPy .npz codec: a ZIP archive of .npy members, stored (np.savez) or
// deflated (np.savez_compressed) (docs/formats/npy.md §npz).
//
// Member "w.npy" is tensor "w". Stored members are served zero-copy from the
// mapping (their data is not 64-byte aligned: ZIP places it right after the
// local header); deflated members are inflated into buffers the tensors own,
// within ReadOptions::max_inflated_bytes.
//
// Thread safety: all functions are reentrant; they share no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensorsafe/env.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::npz {

struct ReadOptions {
  npy::ReadOptions npy;  // applied to every member
  // Sum of the declared sizes of deflated members: what a hostile archive can
  // make us allocate. Raise it for larger compressed archives.
  std::uint64_t max_inflated_bytes = std::uint64_t{16} << 30;
  std::uint64_t max_members = std::uint64_t{1} << 24;
  // Check each member's CRC-32 (one pass over its bytes).
  bool verify_crc = true;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  bool compress = false;  // deflate members, as np.savez_compressed does
  int level = -1;         // zlib level when compressing; -1 = zlib's default (6)
  bool sync = true;       // fsync the file and its directory (WriteFile only)
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// Decodes an .npz image held by `owner`. Tensors keep file order.
// Errors, naming `display_name` and the member: kCorruption (zip structure,
// CRC, deflate data, duplicate names, npy errors), kUnsupported (members that
// are not .npy, encryption, other compression methods, npy dtypes),
// kLimitExceeded (members, inflated bytes, npy limits).
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` and decodes it. Adds kIOError (with errno).
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// Writes every tensor of `set` as member "<name>.npy" through a temp file
// renamed into place; nothing is left behind on error. With default options
// the bytes equal np.savez's for the same arrays and names. Errors:
// kInvalidArgument (duplicate names, a NUL in a name, data size; "" is the
// member ".npy", as np.savez writes it), kUnsupported
// (dtypes .npy cannot hold), kIOError.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});
// The same archive in memory.
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});

}  // namespace tensorsafe::npz
