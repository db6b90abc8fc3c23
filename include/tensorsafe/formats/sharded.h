// Sharded checkpoints: the Hugging Face layout of an index file
// (`model.safetensors.index.json`) beside the shards it names
// (`model-00001-of-00003.safetensors`, ...), read as one set of tensors and
// written byte for byte as huggingface_hub's save_torch_state_dict writes
// them. The same layout holds .tsafe shards (`model.tsafe.index.json`).
// docs/SHARDED.md is the reference: index schema, reader checks, writer
// rules, metadata rules.
//
// Thread safety: the functions are reentrant. A Checkpoint is a value whose
// tensors share ownership of their shards' mappings; const access from many
// threads is safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/formats/detect.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::sharded {

// huggingface_hub's MAX_SHARD_SIZE ("5GB", decimal).
inline constexpr std::uint64_t kDefaultMaxShardSize = 5'000'000'000;

struct ReadOptions {
  // An index file longer than this is refused (kLimitExceeded) before it is
  // read. A 100,000-tensor index is about 6 MB.
  std::uint64_t max_index_bytes = std::uint64_t{256} << 20;
  // Arrays and objects nested deeper than this are refused (kLimitExceeded).
  std::uint32_t max_json_depth = 64;
  // At most this many shards (kLimitExceeded): each is an open mapping.
  std::uint32_t max_shards = 65536;
  // Open: shards are mapped and their headers parsed by this many threads,
  // the caller's included (0: one per core, up to 4).
  unsigned threads = 0;
};

// What an index file says, checked (SHARDED.md §2).
struct Index {
  std::string path;                  // the index file
  std::string directory;             // shard names are relative to it
  Format format = Format::kUnknown;  // of the shards: kSafetensors or kTsafe, from the index's name
  // The "metadata" object as compact JSON, keys in file order ("" when absent).
  std::string metadata_json;
  // The distinct shard names, sorted (byte order: "-00001-of-" before "-00002-of-").
  std::vector<std::string> shards;
  // The weight map in file order: tensor name and its shard (an index into
  // `shards`). The names view `name_arena`, one buffer for all of them (an
  // index of 100,000 names would otherwise be 100,000 allocations), which
  // the Index and its copies keep alive.
  std::vector<std::pair<std::string_view, std::uint32_t>> weight_map;
  std::shared_ptr<const std::string> name_arena;
  // Whether weight_map is in name order (byte order), as the hub writes it.
  bool names_sorted = true;
};

// True when `path` names a sharded checkpoint: an existing directory, or a
// name ending in ".index.json". Never an error (a missing file is false
// unless its name says index). A URL (s3://, http(s)://, or one a
// UrlHandler serves) is true also when it ends in "/" or its last
// component has no tensor-file extension: it may be a checkpoint's folder,
// which ResolveCheckpoint asks the server about.
bool IsShardedPath(const std::string& path);

// True when the name ends in ".index.json".
bool IsIndexName(std::string_view path);

// What a checkpoint path names: `path` itself when it is a file; in a
// directory, its index ("model.safetensors.index.json", then
// "model.tsafe.index.json", then the one other "*.safetensors.index.json" /
// "*.tsafe.index.json"), or else its one tensor file ("model.safetensors",
// "model.tsafe", or the one "*.safetensors" / "*.tsafe"), as
// huggingface_hub's load_torch_model looks. Errors: kNotFound (nothing of
// that kind in the directory), kUnsupported (only PyTorch pickle
// checkpoints there: "*.bin.index.json", "*.bin"), kInvalidArgument
// (several candidates: name one), kIOError.
// A URL that names an object is itself. Otherwise (a missing object, a
// folder of an fsspec filesystem, or a URL ending in "/") it is taken as a
// folder, which servers cannot be asked to list: the first of
// "model.safetensors.index.json", "model.tsafe.index.json",
// "model.safetensors" and "model.tsafe" that exists under it (one request
// each until found). Errors: kNotFound naming the URL and the four names;
// the server's other errors as they come.
Result<std::string> ResolveCheckpoint(const std::string& path);

// Parses an index held in memory. Checks, in this order (SHARDED.md §2):
//   kLimitExceeded   text longer than max_index_bytes; nesting deeper than max_json_depth
//   kCorruption      not UTF-8 JSON; not an object; "weight_map" missing or not
//                    an object of strings; "metadata" not an object; a tensor
//                    listed twice; a shard name that is empty, absolute, has a
//                    "." or ".." component, a backslash or a NUL
//   kUnsupported     an index of PyTorch pickle shards (".bin"), or of another
//                    format than safetensors / tsafe
//   kLimitExceeded   more than max_shards shards
// Messages start with the index's path.
Result<Index> ParseIndex(std::string_view text, const std::string& index_path, const ReadOptions& options = {});
// Reads and parses the index file of `path` (an index, or a directory:
// ResolveCheckpoint, which must find an index).
Result<Index> ReadIndex(const std::string& path, const ReadOptions& options = {});

// One shard as opened.
struct ShardInfo {
  std::string name;  // as the index names it
  std::string path;  // directory / name
  std::uint64_t file_size = 0;
  std::uint64_t tensor_count = 0;
  std::string metadata_json;  // the shard's own file metadata ("" when none)
  // Set for a shard at a URL (docs/REMOTE.md), which Open reads no more of
  // than its header: its tensors hold no bytes (Tensor::data is empty) until
  // FetchData or ReadTensors reads them through this file by ranges.
  std::shared_ptr<const RandomAccessFile> file;
};

// A whole sharded checkpoint open as one set of tensors.
struct Checkpoint {
  Index index;
  std::vector<ShardInfo> shards;  // parallel to index.shards
  // Every tensor, shard by shard (index.shards order), each shard's in data
  // order; views of the shard's mapping (no copy), which they keep alive.
  // metadata_json: the checkpoint's metadata (SHARDED.md §4): the keys of
  // the shards' metadata that every shard has with the same value, then the
  // index's metadata keys except the derived "total_size" and
  // "total_parameters" (an index key that is also a shard key with another
  // value: the index's wins and the key is listed in metadata_conflicts).
  TensorSet set;
  std::vector<std::uint32_t> shard_of;  // per tensor of `set`: its shard
  // Keys of shard metadata that differ between shards (left out of
  // set.metadata_json): Convert refuses to drop them silently.
  std::vector<std::string> metadata_conflicts;
};

// Opens the checkpoint at `path` (an index file or its directory) and
// every shard it names. Checks, after ParseIndex's (SHARDED.md §3):
//   kNotFound     a shard named by the index does not exist
//   (the shard's own reader errors, prefixed with the shard's path)
//   kCorruption   a shard that is not of the index's format; a shard that
//                 holds a tensor the index does not map to it, or lacks one
//                 that it does (naming the index, the shard and the tensor)
// .tsafe shards open lazily (Reader); their data checksums are not checked
// here (Verify does). Shards at URLs are read no further than their
// headers (safetensors) or indexes (.tsafe), by as many threads as there
// are shards, up to 16: their tensors hold no bytes (ShardInfo::file).
Result<Checkpoint> Open(const std::string& path, const ReadOptions& options = {});

// One tensor file of `format` as a checkpoint of that one shard (no index;
// shard_of all 0), read by the format table; a safetensors, .tsafe or GGUF
// file at a URL is opened as Open opens each shard, from its header alone.
// Errors: the format's reader's, prefixed with the path.
Result<Checkpoint> OpenFile(const std::string& path, Format format);

struct FetchOptions {
  unsigned threads = 0;  // runs read at once (0: 4)
  // Where the bytes go: fresh memory when empty; else one unlinked scratch
  // file created in this directory, its blocks reserved up front and
  // mapped, so that memory stays bounded by the page cache rather than by
  // the data's size (a checkpoint at a URL converted into one local file).
  std::string scratch_dir;
};

// Reads the bytes of those of `tensors` that hold none (tensors of a shard
// at a URL: ShardInfo::file), shard_of[i] naming the shard of tensors[i] in
// `shards`: into memory aligned as in the file, one ranged read per run of
// neighbouring tensors (gaps under 1 MiB are read through), runs read on
// several threads. The tensors then view that memory and keep it alive.
// Errors: the shard file's (kIOError, kCorruption when the object is
// shorter than its header said); kIOError when the scratch file cannot be
// created or its space reserved (ENOSPC).
Status FetchData(std::span<const ShardInfo> shards, std::span<const std::uint32_t> shard_of, std::span<Tensor> tensors,
                 const FetchOptions& options = {});

// Every check Open defers: each .tsafe shard's data checksums (safetensors
// shards have none; Open checked all the rest), read in 8 MiB pieces from a
// shard at a URL. Errors: kCorruption naming the shard and the tensor.
Status Verify(const Checkpoint& checkpoint);

// Reads the data of checkpoint.set.tensors[tensors[i]] into outs[i] (each
// exactly that tensor's data_length bytes) with positional reads of the
// shard files, not through the mappings: a copy into fresh memory without
// the page faults of a mapping, in pieces of at most 8 MiB spread over
// `threads` threads (the caller's included; 0 = one per core, up to 4). A
// shard at a URL is read in runs of neighbouring tensors instead, one
// ranged read each (gaps under 1 MiB read through, at most 64 MiB a run).
// For safetensors and tsafe checkpoints and GGUF files (OpenFile), whose
// tensors lie in their files as stored. Errors: kInvalidArgument (another
// format, sizes that differ, lists of different lengths), kIOError /
// kCorruption (a shard shorter than its index said: it changed since it
// was opened).
Status ReadTensors(const Checkpoint& checkpoint, std::span<const std::size_t> tensors,
                   std::span<const std::span<std::byte>> outs, unsigned threads = 0);

// --- writing -----------------------------------------------------------------

// huggingface_hub's size strings: "5GB", "200KB", "1.5MB" (decimal units TB,
// GB, MB, KB, case-insensitive, as parse_size_to_int reads them), or a plain
// number of bytes. kInvalidArgument otherwise.
Result<std::uint64_t> ParseSize(std::string_view text);

// How a tensor is grouped when shards are planned: tensors with the same
// storage id share memory (huggingface_hub's get_torch_storage_id) and go to
// the shard of the first of them; the first counts `storage_size` bytes
// toward its shard, the others nothing. By default (PlanShards without
// storages) each tensor is its own storage of its data's size.
struct Storage {
  std::uint64_t id = 0;
  bool has_id = false;  // false: shares with nothing (a meta tensor in the hub's terms)
  std::uint64_t size = 0;
};

// The hub's split (split_state_dict_into_shards_factory), exactly: tensors in
// order; one bigger than max_shard_size gets a shard of its own; a shard is
// closed when the next tensor would tip it over; tensors sharing storage join
// their first's shard, after it. Returns the shards as lists of positions
// into `storages`, and the total size it counts.
struct ShardPlan {
  std::vector<std::vector<std::size_t>> shards;
  std::uint64_t total_size = 0;
};
ShardPlan PlanShards(std::span<const Storage> storages, std::uint64_t max_shard_size);

struct WriteOptions {
  Format format = Format::kSafetensors;  // kSafetensors or kTsafe
  // Shard names are pattern with "{suffix}" replaced by "" (one shard) or
  // "-00001-of-00003"; "" means "model{suffix}.safetensors" (".tsafe").
  std::string filename_pattern;
  std::uint64_t max_shard_size = kDefaultMaxShardSize;
  // File metadata (a JSON object text, "" for none) of each shard when
  // there are several, and of the one file when there is one.
  std::string shard_metadata_json;
  std::string single_metadata_json;
  // Keys written after "total_size" in the index's "metadata" (JSON object
  // text or "").
  std::string index_metadata_json;
  // Write an index even when everything fits in one shard (named
  // "-00001-of-00001"); the hub writes a single file then.
  bool always_index = false;
  // Before writing: remove the index; after: remove files of the pattern
  // (shards of an earlier save) that this save did not write, as the hub
  // cleans the directory.
  bool remove_stale = true;
  bool sync = true;
  std::uint32_t alignment = 0;  // tsafe shards: 0 = the writer's default
  // Called with the bytes of tensor data written so far (may be empty).
  std::function<void(std::uint64_t)> progress;
};

struct WriteStats {
  std::vector<std::string> files;  // shard names written, in order
  std::string index_path;          // "" when no index was written
  std::uint64_t total_size = 0;
};

// Writes `set` into directory `dir` (created if missing) as sharded
// checkpoint: shards per PlanShards (`storages` parallel to set.tensors, or
// empty), each shard through a temporary file renamed into place, then the
// index (huggingface_hub's json.dump(indent=2) bytes: "metadata" with
// "total_size" first, then "weight_map" in shard order). Errors: kInvalidArgument
// (a pattern without "{suffix}" or with a '/', a storages list of the wrong
// length, metadata that is not an object), then the shard writer's errors
// (a shard's tensors the format cannot hold, kIOError); on error the index
// is not written.
Result<WriteStats> WriteSharded(const std::string& dir, const TensorSet& set, const WriteOptions& options,
                                std::span<const Storage> storages = {});

// The index text huggingface_hub writes: json.dump({"metadata": {"total_size":
// total, <index_metadata keys>}, "weight_map": {...}}, indent=2), ASCII only
// (ensure_ascii), no trailing newline. kInvalidArgument for metadata that is
// not a JSON object, names that are not UTF-8.
Result<std::string> IndexText(std::uint64_t total_size, std::string_view index_metadata_json,
                              std::span<const std::pair<std::string, std::string>> weight_map);

}  // namespace tensorsafe::sharded
