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
// Thread safety: the functions are reentrant; a ConvertOptions::progress
// callback runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/formats/detect.h"
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

struct ConvertOptions {
  // kUnknown: detect the input by its magic, then its extension; the output
  // by its extension (DetectFormatFromBytes with no bytes).
  Format from = Format::kUnknown;
  Format to = Format::kUnknown;
  // Convert only these tensors, in this order (empty: all, in file order).
  // A name the input lacks is kNotFound.
  std::vector<std::string> tensors;

  // Consents to losing what the target cannot hold. Each defaults to false,
  // and then the conversion fails instead (CONVERT.md §3).
  // safetensors: write non-string metadata values as their compact JSON text
  // (a nested object becomes the string "{\"a\":1}").
  bool stringify_metadata = false;
  // File metadata into a format without any (npy, npz, tenbin, btf): dropped.
  bool drop_metadata = false;
  // Per-tensor metadata into a format without it (all but tsafe and zio;
  // tenbin and btf keep their own keys, see CONVERT.md): dropped.
  bool drop_tensor_metadata = false;
  // Names into a format that cannot hold them (btf: positions only; tenbin:
  // 8 ASCII bytes): tensors are written under their position instead.
  bool drop_names = false;
  // Sparse COO tensors into a format without sparse tensors (all but tsafe
  // and btf): written as their dense equivalent, built in memory (zeros
  // where no element is stored; duplicate coordinates summed for integer,
  // f32 and f64 values, kUnsupported for other dtypes). A dense result
  // larger than max_densify_bytes is kLimitExceeded.
  bool densify = false;
  std::uint64_t max_densify_bytes = std::uint64_t{1} << 30;

  // tsafe: the data alignment (0 = the writer's default, 64). gguf: written
  // as general.alignment (uint32), replacing the input's. Other targets
  // have a fixed layout: kInvalidArgument when set.
  std::uint32_t alignment = 0;
  // npz: deflate the members (np.savez_compressed).
  bool compress = false;
  // tsafe input: check every tensor's data checksum, so damaged data is
  // never carried into a format without checksums. Costs one more read of
  // the data when the target is not tsafe.
  bool verify = true;
  // fsync the output and its directory.
  bool sync = true;
  // Sharded output (OUT a directory, a name ending in "/", or a
  // "*.index.json"; docs/SHARDED.md): the most data bytes per shard, as
  // huggingface_hub splits. 0: a sharded input keeps its shards; any other
  // input is split at the hub's default, 5 GB.
  std::uint64_t max_shard_size = 0;
  // Called as output bytes are written (about every 8 MiB) and once more
  // with done = true. May be empty.
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertStats {
  Format from = Format::kUnknown;
  Format to = Format::kUnknown;
  std::uint64_t tensor_count = 0;
  std::uint64_t data_bytes = 0;  // the tensors' data bytes
  std::uint64_t file_size = 0;   // of the output
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

// Opens any supported file as a TensorSet: tensors view the file's mapping
// (see the exceptions above) and keep it alive. A sharded checkpoint (an
// index or its directory) opens as one set (sharded.h). `format` kUnknown detects
// it. A .tsafe file's tensors carry their checksums in info.data_checksum
// (unchecked here) and an empty metadata object reads as "". Errors: those
// of DetectFormat and of the format's reader; kUnsupported for an
// unrecognised file.
Result<TensorSet> ReadTensorSet(const std::string& path, Format format = Format::kUnknown);

// Checks that `set` can be written as `to` without losing anything the
// options do not consent to, and returns the set to hand to the writer
// (metadata stringified or dropped, names replaced, as consented). Errors as
// for Convert's checks.
Result<TensorSet> PrepareForFormat(const TensorSet& set, Format to, const ConvertOptions& options);

// Writes `set` as `format` to `path` after PrepareForFormat, streaming
// every tensor. Errors as for Convert.
Status WriteTensorSet(const std::string& path, const TensorSet& set, Format format,
                      const ConvertOptions& options = {});

// A format from its name ("tsafe", "safetensors", "npy", "npz", "gguf",
// "tenbin", "btf", "zio"; also "st" and "ten"), case-insensitive; nullopt
// for anything else.
std::optional<Format> ParseFormat(std::string_view name);

// True when `dtype` can be written as `format` and read back as the same
// dtype (CONVERT.md §2).
bool FormatHoldsDType(Format format, DType dtype);

}  // namespace tensorsafe
