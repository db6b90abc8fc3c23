// GGUF (the ggml/llama.cpp model format): decode v2 and v3 files into a
// TensorSet, and encode a TensorSet of plain dtypes and carried ggml blocks
// as GGUF v3.
//
// Mapping (docs/formats/gguf.md has the normative description):
// - Shapes: GGUF lists ne[0] (the innermost, fastest-varying dimension) first;
//   TensorSet shapes are outermost-first, so dims are reversed both ways.
// - F32 F16 BF16 F64 I8 I16 I32 I64 become the matching tensorsafe dtypes.
//   Block-quantized ggml types (Q4_0, Q4_K, IQ2_XXS, TQ1_0, MXFP4, ...) are
//   carried opaquely as dtype u8, shape [nbytes], with per-tensor metadata
//   {"gguf.type":"Q4_0","gguf.shape":[...],"block_elems":32,"block_bytes":18}.
// - Key/value pairs become the set's metadata_json: one member per key holding
//   its value, in file order, plus "tensorsafe.gguf_types" mapping each key to
//   its GGUF type ("uint32", "array<string>", ...) so the trip GGUF ->
//   TensorSet -> GGUF is lossless.
//
// Thread safety: the functions are reentrant; a decoded TensorSet is a value
// (see tensor_set.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::gguf {

// Bounds on what an untrusted file can make Decode do. Counts and lengths are
// also always checked against the bytes that remain in the file. Exceeding a
// limit is kLimitExceeded.
struct ReadOptions {
  std::uint64_t max_tensor_count = std::uint64_t{1} << 20;  // tensor infos
  std::uint64_t max_kv_count = std::uint64_t{1} << 20;      // key/value pairs
  // One string (key, value or tensor name); ggml refuses more than 1 GiB.
  std::uint64_t max_string_bytes = std::uint64_t{1} << 30;
  // Elements of one array; ggml refuses more than 1 Gi.
  std::uint64_t max_array_elems = std::uint64_t{1} << 30;
  // Nesting of arrays of arrays (1 = a plain array). ggml accepts no nesting,
  // the GGUF spec and gguf-py allow it.
  std::uint32_t max_array_depth = 8;
  // ggml's GGML_MAX_NAME is 64 including the NUL, so it refuses names of 64
  // bytes or more; set higher to accept files that only other readers take.
  std::uint32_t max_tensor_name_bytes = 63;
  // The metadata JSON text built from the key/value pairs.
  std::uint64_t max_metadata_bytes = std::uint64_t{256} << 20;
  // ReadHeader's first read; it reads twice as much while the header runs
  // past what it has (at least 1).
  std::uint64_t first_read_bytes = std::uint64_t{1} << 20;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

struct WriteOptions {
  // WriteFile: fsync the file and its directory before returning.
  bool sync = true;
  // Nesting accepted in the input metadata JSON.
  std::uint32_t max_json_depth = 64;
  // 0: general.alignment from the metadata, or kDefaultAlignment. Else this
  // alignment, written as general.alignment (uint32) in place of the
  // metadata's: a power of two (kInvalidArgument otherwise).
  std::uint32_t alignment = 0;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// The GGUF spec version the writer emits.
inline constexpr std::uint32_t kWriteVersion = 3;
// Alignment when the file has no general.alignment key.
inline constexpr std::uint32_t kDefaultAlignment = 32;
// ggml's GGML_MAX_DIMS: the most dimensions a tensor info may have.
inline constexpr std::uint32_t kMaxDims = 4;

// One ggml tensor type. Codes are ggml's (persisted in GGUF files).
struct GgmlType {
  std::uint32_t code;
  std::string_view name;      // ggml's spelling: "F32", "Q4_K", "IQ2_XXS"
  std::uint32_t block_elems;  // 1 for plain types
  std::uint32_t block_bytes;
  std::optional<DType> dtype;  // the tensorsafe dtype of a plain type
};
// The type with ggml code `code`, or nullopt for removed/unknown codes.
std::optional<GgmlType> LookupGgmlType(std::uint32_t code);
// The type named `name` (exact ggml spelling), or nullopt.
std::optional<GgmlType> FindGgmlType(std::string_view name);

// Decodes a whole GGUF file held in `bytes`.
// On success every tensor's data views `bytes` (zero-copy) and shares
// `owner`, which must keep `bytes` alive; TensorInfo::data_offset is the
// absolute file offset, position the tensor-info index, data_checksum 0.
// Errors (each message starts with `display_name`): kCorruption for bytes
// that contradict the format (including what ggml's reader refuses:
// duplicate keys or tensor names, bad general.alignment, misplaced offsets,
// data past the end; and tensor names with a NUL byte, which ggml would cut
// short); kUnsupported for v1, versions above 3, big-endian
// files, more than 4 dims, unknown ggml types and the reserved metadata key;
// kLimitExceeded when a ReadOptions limit is hit.
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});

// Decodes the header of `file` (key/value pairs and tensor infos) with
// Decode's checks, reading its first MiB and then twice as much while the
// header runs past what was read: the tensors hold no data (Tensor::data
// empty), their ranges checked against the file's size. What a file at a
// URL costs to list (docs/REMOTE.md). Errors: Decode's, prefixed with
// file.name(); the file's read errors.
Result<TensorSet> ReadHeader(const RandomAccessFile& file, const ReadOptions& options = {});
// Maps the file at `path` read-only and decodes it; tensors keep the mapping
// alive. kIOError (with errno) when the file cannot be opened or mapped.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// Encodes `set` as GGUF v3, byte-identical to gguf-py's GGUFWriter given the
// same keys (in the same order), tensors and alignment. Tensors must be
// dense, of dtype f32 f16 bf16 f64 i8 i16 i32 i64 (others: kUnsupported),
// rank <= 4, names < 64 bytes without NUL and unique, data of exactly the dense size
// (kInvalidArgument). Per-tensor metadata is ignored except on a tensor
// marked with "gguf.type" as Decode marks ggml blocks: it is written as that
// ggml type with "gguf.shape" as its dims and its bytes as they are, so a
// quantized tensor survives Decode -> Encode byte for byte (an unknown type
// is kUnsupported; a tensor that is not u8 [bytes], a missing or bad
// "gguf.shape", block fields that disagree with the type, or a byte count
// that is not the shape's whole blocks are kInvalidArgument). The metadata JSON follows docs/formats/gguf.md; keys
// without a type in "tensorsafe.gguf_types" get an inferred type; general.alignment, if present, must be a uint32 power
// of two and sets the alignment.
Result<std::string> Encode(const TensorSet& set, const WriteOptions& options = {});

// Like Encode, streamed to a temporary file next to `path` that is renamed
// over `path` on success; on error nothing is left behind. Tensor bytes are
// written straight from the tensors, never gathered in memory.
Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options = {});

// True when `dtype` has a ggml type (f32, f16, bf16, f64, i8-i64); ggml
// blocks travel as u8 tensors marked "gguf.type" (see Encode).
bool HoldsDType(DType dtype);

}  // namespace tensorsafe::gguf
