// safetensors: reads and writes the Hugging Face safetensors format
// (docs/formats/safetensors.md) to and from a TensorSet.
//
// A file is `[u64 LE N][N bytes of JSON header][byte buffer]`. The reader
// validates the whole header at once, with the checks of the reference Rust
// crate in the crate's order, plus one strictness: duplicate tensor names are
// rejected. The writer produces the same bytes as the reference writer.
//
// Thread safety: all functions are reentrant; distinct calls may run on
// distinct threads. Decoded tensors are views that share ownership of the
// bytes they point into. Each thread that parses a header of up to 16 MiB
// keeps its JSON parser for the next call (memory about 6x that header,
// freed when the thread ends), which saves faulting in fresh buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::safetensors {

// The reference crate's cap on N; it rejects anything larger, on read and
// on write.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// The deepest JSON nesting the reference crate accepts (serde_json's
// recursion limit of 128 leaves 127 levels; the top object is level 1).
inline constexpr std::uint32_t kMaxJsonDepth = 127;

struct ReadOptions {
  // Headers longer than this are refused with kLimitExceeded before any of
  // their bytes are read. Raising it above kMaxHeaderBytes accepts files the
  // reference crate refuses (docs/PERMISSIVE.md).
  std::uint64_t max_header_bytes = kMaxHeaderBytes;
  // Arrays and objects nested deeper than this are refused (kLimitExceeded).
  std::uint32_t max_json_depth = kMaxJsonDepth;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // WriteFile: fsync the file, and its directory after the rename.
  bool sync = true;
  // A header (N, padding included) longer than this is refused
  // (kLimitExceeded), as the reference writer refuses N > kMaxHeaderBytes.
  std::uint64_t max_header_bytes = kMaxHeaderBytes;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// What the header of a valid file says.
struct Header {
  std::uint64_t header_length = 0;  // N, padding included
  std::uint64_t data_start = 0;     // 8 + N: file offset of the byte buffer
  std::uint64_t data_length = 0;    // bytes of the byte buffer
  // In data order (sorted by data_offsets, as the crate validates them).
  // data_offset is absolute (data_start + begin); position is the index in
  // this vector; data_checksum is 0 (the format has none) and
  // metadata_json is "" (the format has no per-tensor metadata).
  std::vector<TensorInfo> tensors;
  // `__metadata__` as a compact JSON object of strings, keys in file order;
  // "" when the key is absent or null.
  std::string metadata_json;
};

// The safetensors name of a dtype ("F32", "F8_E4M3" for kF8E4M3FN, "F4" for
// kF4E2M1); nullopt for dtypes the format lacks (kC128, kI4, kU4).
std::optional<std::string_view> DTypeToName(DType dtype);
// The dtype of a safetensors name, which is case-sensitive as in the crate;
// nullopt when unknown.
std::optional<DType> DTypeFromName(std::string_view name);

// Parses and validates the header of a file of `file_size` bytes whose first
// bytes are `prefix` (at least 8 + N of them; the data is never read).
// Checks, in this order (docs/formats/safetensors.md, "Reader checks"):
//   kCorruption      file shorter than 8 bytes
//   kLimitExceeded   N > options.max_header_bytes
//   kCorruption      8 + N past the end of the file
//   kInvalidArgument `prefix` shorter than 8 + N
//   kCorruption      header not UTF-8; not JSON; not the schema
//   kLimitExceeded   JSON nested deeper than options.max_json_depth
//   kCorruption      duplicate tensor name
//   kUnsupported     unknown dtype in an otherwise valid header
//   kCorruption      per tensor in data order: offsets not contiguous from 0,
//                    size overflow, bits not a whole byte, size mismatch;
//                    then data not ending exactly at the end of the file
Result<Header> ParseHeader(std::span<const std::byte> prefix, std::uint64_t file_size, const ReadOptions& options = {});
// The same, for a whole file in memory.
Result<Header> ParseHeader(std::span<const std::byte> file, const ReadOptions& options = {});

// Reads the header of `file` and parses it (ParseHeader): its first 64 KiB,
// then the rest of a longer header; no more of the data than those 64 KiB
// may hold. What a file at a URL costs to open (docs/REMOTE.md). Errors: the file's read errors, and ParseHeader's
// prefixed with file.name().
Result<Header> ReadHeader(const RandomAccessFile& file, const ReadOptions& options = {});
// Decodes a whole file held in `bytes`. The tensors view `bytes` (no copy)
// and share `owner`, which must keep `bytes` alive. Errors are those of
// ParseHeader, prefixed with `display_name` when it is not empty.
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});
// Maps `path` read-only and decodes it; the tensors keep the mapping alive.
// Errors: kIOError when the file cannot be opened or mapped, else Decode's.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// The bytes of a safetensors file holding `set`: `__metadata__` first, then
// the tensors by descending dtype (the crate's order) and then by name,
// compact JSON padded with spaces to a multiple of 8, contiguous data.
// Errors (nothing is produced):
//   kInvalidArgument  metadata_json not "" or a JSON object of strings (values
//                     are never converted); duplicate keys; a tensor name
//                     that is not UTF-8, is "__metadata__" or repeats; data
//                     whose size is not the dtype and shape's
//   kUnsupported      a dtype the format lacks (c128, i4, u4), a sparse
//                     layout, per-tensor metadata
//   kLimitExceeded    header longer than options.max_header_bytes
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});
// Writes the same bytes to `path` through a temporary file in the same
// directory, renamed into place; on any error the temporary file is removed
// and `path` is untouched. Streams: the header, then each tensor's bytes
// (small tensors through a 1 MiB buffer). Errors: Encode's, and kIOError.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

}  // namespace tensorsafe::safetensors
