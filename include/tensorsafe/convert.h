// Convert: rewrites a tensor file in another format, keeping every name,
// dtype, shape and piece of metadata the target can hold and refusing, with an
// error that names the tensor, whatever it cannot (docs/CONVERT.md has the
// matrix). Nothing is narrowed silently: where the only way to write a file
// is to lose something, ConvertOptions has an explicit consent flag for it.
//
// Memory: sources are mapped, tensors are views of the mapping, and every
// writer streams each tensor from it, so converting a file larger than RAM
// works. Exceptions, documented in CONVERT.md: deflated .npz members, and
// big-endian or Fortran-order .npy data, are decoded into memory; ZIO (and
// old unaligned BTF) payloads that are not aligned to their element size are
// copied when read.
//
// Thread safety: the functions are reentrant. A ConvertOptions::progress
// callback runs on the calling thread or on a writer's background thread
// (the native writer appends large tensors there), one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/formats/registry.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe {

// How far a Convert has come. bytes_total is the tensors' data bytes, which
// the output is close to (plus headers and padding; less for a compressed
// .npz), so bytes_written may pass it slightly.
struct ConvertProgress {
  std::uint64_t bytes_written = 0;
  std::uint64_t bytes_total = 0;
  std::uint64_t tensor_count = 0;
  bool done = false;  // the last call, after the output is in place
};

// Consent (what may be lost) and FormatWriteOptions (alignment, compress,
// sync, env) are the table's (formats/registry.h), shared with
// WriteTensorSet and Python's tensorsafe.write.
struct ConvertOptions : Consent, FormatWriteOptions {
  // kUnknown: detect the input by its magic, then its extension; the output
  // by its extension (DetectFormatFromBytes with no bytes).
  Format from = Format::kUnknown;
  Format to = Format::kUnknown;
  // Convert only these tensors, in this order (empty: all, in file order).
  // A name the input lacks is kNotFound.
  std::vector<std::string> tensors;
  // Every floating tensor as this dtype (f32, f16 or bf16; docs/CAST.md):
  // f64/f32/f16/bf16 tensors cast as torch's Tensor.to() rounds, GGUF
  // block-quantized tensors dequantised as gguf-py does; integer and bool
  // tensors as they are; other floating dtypes (f8, f6, f4, complex)
  // kUnsupported. The new bytes are built in an unlinked scratch file next
  // to the output, so memory stays bounded (it needs their size in free
  // disk space). A GGUF "general.file_type" key follows the new dtype.
  std::optional<DType> dtype;
  // Typed key/values to set, each "KEY=TYPE:VALUE" (gguf_kv.h's
  // ParseKeyValueEdit), replacing the input's value of the key, for a
  // target with typed key/values (gguf: FormatInfo::edit_metadata); any
  // other target: kInvalidArgument.
  std::vector<std::string> gguf_kv;
  // An input whose reader shapes the set for its target (a PyTorch
  // checkpoint bound for safetensors; FormatInfo::reads_for_target):
  // safetensors' convert.py discard_names, the names not to keep of tensors
  // sharing a storage (pytorch.h, ReadOptions::discard_names). Any other
  // input: kInvalidArgument.
  std::vector<std::string> discard_names;
  // An input with checksums (tsafe): check every tensor's data checksum, so
  // damaged data is never carried into a format without checksums. Costs one
  // more read of the data when the target is not tsafe.
  bool verify = true;
  // Sharded output (OUT a directory, a name ending in "/", or a
  // "*.index.json"; docs/SHARDED.md): the most data bytes per shard, as
  // huggingface_hub splits. 0: a sharded input keeps its shards; any other
  // input is split at the hub's default, 5 GB. Not 0: an OUT without a
  // tensor file's extension is a directory to create; one that names a
  // single file is kInvalidArgument.
  std::uint64_t max_shard_size = 0;
  // Called as output bytes are written (about every 4 MiB) and once more
  // with done = true. May be empty.
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertStats {
  Format from = Format::kUnknown;
  Format to = Format::kUnknown;
  std::uint64_t tensor_count = 0;
  std::uint64_t data_bytes = 0;  // the tensors' data bytes
  std::uint64_t file_size = 0;   // of the output
  // What the output lacks for its usual consumers, e.g. a GGUF file without
  // general.architecture, which llama.cpp and transformers cannot load.
  std::vector<std::string> warnings;
};

// Reads `in_path` and writes `out_path` (through a temporary file renamed
// into place, so `out_path` is either untouched or complete; it may equal
// `in_path`). Either side may be a sharded checkpoint: an index file or its
// directory (docs/SHARDED.md). Errors, each naming the file and, where one is at fault, the
// tensor: those of the input's reader (kCorruption, kIOError, ...);
// kNotFound (a selected tensor); kInvalidArgument (no format can be told
// from a name, options that do not apply, a name or a metadata value the
// target cannot hold); kUnsupported (a dtype, per-tensor or file metadata
// the target lacks; a rank it cannot hold); kCorruption (a tsafe tensor
// whose checksum fails); then those of the target's writer.
Result<ConvertStats> Convert(const std::string& in_path, const std::string& out_path,
                             const ConvertOptions& options = {});

}  // namespace tensorsafe
