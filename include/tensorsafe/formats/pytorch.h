// PyTorch checkpoints (torch.save: pytorch_model.bin, .pt, .pth, .ckpt),
// read without running anything (docs/formats/pytorch.md).
//
// Both container forms torch.save writes are read: the zip archive
// (`<archive>/data.pkl`, `<archive>/data/<key>`, `byteorder`, `version`;
// torch >= 1.6) and the legacy stream (`_use_new_zipfile_serialization=False`:
// magic, protocol and sys_info pickles, the object, the storage keys, then
// the raw storages). The object pickle is interpreted by a restricted
// unpickler written in C++: it builds plain values (None, bools, ints,
// floats, strings, bytes, tuples, lists, dicts, sets) and tensors, and
// accepts only the opcodes and globals that torch.save emits for state dicts
// and optimizer states (the tables in docs/formats/pytorch.md). Anything
// else -- a `__reduce__` to os.system, builtins.eval, getattr, a class, a
// TorchScript archive -- is refused with kUnsupported naming the opcode or
// the global; nothing in the file is ever called.
//
// Mapping to a TensorSet:
// - Nested containers are flattened to dotted names: dict keys (str, int,
//   bool or None, spelt as Python's str() does) and list/tuple positions
//   ("state.0.exp_avg", "layers.3.weight"). A top-level tensor is named after
//   the file, as .npy does.
// - Values that are not tensors go into the set's metadata_json, one member
//   per dotted name, holding the largest tensor-free subtree there as JSON
//   ("param_groups": [{"lr": 0.001, "betas": [0.9, 0.999], ...}]); the
//   mapping of Python types to JSON is in docs/formats/pytorch.md. A
//   checkpoint of tensors only has no metadata.
// - Tensors keep torch's dtype (float4_e2m1fn_x2 becomes f4_e2m1 with its
//   last dimension doubled) and logical shape. Contiguous views of storages
//   are zero-copy views of the mapping when their address is aligned to the
//   element size (the zip writer aligns storages to 64 bytes); strided
//   views, byte-swapped (big-endian) data and unaligned legacy storages are
//   copied into buffers the tensors own. Tensors sharing a storage share its
//   bytes. data_offset is the file offset of a tensor served from the file
//   (its bytes are exactly the file's there), and 0 for a copy (offset 0
//   of a checkpoint is never tensor data).
//
// Thread safety: the functions are reentrant; a decoded TensorSet is a value
// (see tensor_set.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::pytorch {

// Bounds on what an untrusted checkpoint can make Decode do. Exceeding one is
// kLimitExceeded naming the limit. Memory for the unpickler's values is at
// most about 100 bytes a value plus the pickle's strings, so the defaults
// bound it near 3 GiB (a 2^20-tensor state dict makes ~2^24 values).
struct Limits {
  // The object pickle (data.pkl; the legacy stream's pickles together).
  std::uint64_t max_pickle_bytes = std::uint64_t{1} << 30;
  // Values the unpickler creates. Flattening visits a shared value once
  // per reference, and may visit at most twice the values created (and at
  // most this many), so a pickle of nested shared lists (a billion laughs)
  // cannot multiply its size.
  std::uint64_t max_values = std::uint64_t{1} << 25;
  // Memo entries (BINPUT, MEMOIZE).
  std::uint64_t max_memo_entries = std::uint64_t{1} << 24;
  // Nesting: open MARKs in the pickle, and containers inside containers
  // (the flattening walk recurses once per level, a few hundred bytes of
  // stack each: keep it well below the thread's stack size / 1 KiB).
  std::uint32_t max_depth = 256;
  // Items of one tuple, list, dict or set.
  std::uint64_t max_container_items = std::uint64_t{1} << 24;
  // Tensor dimensions.
  std::uint32_t max_rank = 64;
  // Bytes of tensor data copied (strided views, byte swaps, unaligned
  // storages): a stride-0 view of one element can describe any size. Both
  // bounds apply: at most max_materialized_bytes, and at most
  // max_materialized_ratio times the file's size plus 64 MiB (a transposed
  // copy of every weight of a checkpoint needs a ratio of 1).
  std::uint64_t max_materialized_bytes = std::uint64_t{64} << 30;
  std::uint32_t max_materialized_ratio = 4;
  // The metadata JSON text built from the values that are not tensors.
  std::uint64_t max_metadata_bytes = std::uint64_t{256} << 20;
  // Zip archive members.
  std::uint64_t max_members = std::uint64_t{1} << 24;
};

struct ReadOptions {
  Limits limits;
  // Check the CRC-32 of every zip member read (one pass over all tensor
  // data). torch.load does not; `tensorsafe verify` does.
  bool verify_crc = false;
  // Shape the set as safetensors' bindings/python/convert.py does before it
  // calls save_file (docs/formats/pytorch.md "Conversion to safetensors"):
  // a top-level "state_dict" entry replaces the whole; of tensors sharing a
  // storage only the one covering it is kept, the others recorded in the
  // metadata as `removed: kept`; metadata starts with {"format": "pt"}.
  // Convert() sets it when writing safetensors from a PyTorch checkpoint.
  bool safetensors_convention = false;
  // With safetensors_convention: convert.py's discard_names. Of the names
  // covering a shared storage, one not listed here is kept when there is
  // one. Hugging Face's conversion passes the model class's
  // _tied_weights_keys (["lm_head.weight"] for GPT-2), so that the input
  // embedding transformers ties to is the name kept.
  std::vector<std::string> discard_names;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

// Decodes a checkpoint held in `bytes` (the whole file). Tensors view
// `bytes` and share `owner` (which must keep them alive) or own copies, as
// above. Errors, each naming `display_name` and, where one is at fault, the
// zip member, the pickle offset, the opcode, the global or the entry:
// kUnsupported (an opcode or global outside the allowlist; a TorchScript
// archive; compressed or encrypted members; quantized, sparse, nested or
// meta tensors; dtypes tensorsafe lacks; dict keys that cannot name an
// entry; the pre-1.0 tar format; bytes that start like no checkpoint at
// all, "not a tensor file tensorsafe recognises"); kCorruption (bytes that contradict the
// format: zip structure, truncated or malformed pickles, stack misuse, a
// missing memo entry, storages missing or of the wrong size, views past
// their storage, CRC-32 when verify_crc); kLimitExceeded (a Limits bound).
Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options = {});

// Maps the file at `path` read-only and decodes it; tensors keep the mapping
// alive. Adds kIOError (with errno) when the file cannot be opened or mapped.
Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options = {});

// Whether the first bytes of a file look like a PyTorch checkpoint: a zip
// whose first member is a torch.save record (`<archive>/data.pkl`, ...), or
// the legacy stream's magic-number pickle. `prefix` holds the file's first
// bytes: 64 are enough for the legacy magic, a zip needs its first local
// header and name (30 + name length). Used by format detection.
bool LooksLikeCheckpoint(std::span<const std::byte> prefix);

// The `.metadata` file of a checkpoint of torch.distributed.checkpoint's
// default back-end (FileSystemWriter: a pickle of DCP's Metadata dataclass),
// read by the restricted unpickler with DCP's eight metadata dataclasses and
// the three helpers their states use allowed as data, nothing else (the
// schema and the rules are docs/DCP.md "DCP's own checkpoints"). Returns a
// JSON document:
//   {"version": "1.0.0" or null,
//    "items": [{"fqn", "kind": "tensor", "dtype": "float32", "size": [..],
//               "layout", "requires_grad", "memory_format", "pin_memory",
//               "chunks": [{"offsets": [..], "sizes": [..]}]},
//              {"fqn", "kind": "bytes"}],
//    "storage": [{"fqn", "offset": [..] or null, "index": int or null,
//                 "relative_path", "file_offset", "length", "transforms": []}],
//    "planner_data": the value as JSON, "storage_meta": {...} or null}
// in the pickle's order. Errors name `display_name`: kUnsupported (any other
// global or opcode, as for checkpoints), kCorruption (a malformed pickle, a
// field of the wrong type or missing, a chunk outside its tensor, a
// relative_path leaving the directory), kLimitExceeded (Limits).
Result<std::string> DcpMetadataJson(std::span<const std::byte> bytes, const std::string& display_name,
                                    const Limits& limits = {});

}  // namespace tensorsafe::pytorch
