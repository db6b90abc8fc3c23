// The dataset index: `index.json` at a dataset's root (docs/DATASET.md §3),
// listing the shards in order with their sample counts, sizes and hashes, and
// the schema that every shard shares. Parsing and encoding live here so that
// every reader of an index (local directories, the HTTP cache, Python) applies
// the same checks; Merge() combines the indexes of independently written parts.
//
// Thread safety: all functions are reentrant; the structs are values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// DATASET.md §3: the values of "format" and "version" in index.json.
inline constexpr std::string_view kIndexFormatName = "tensorsafe-dataset";
inline constexpr std::int64_t kIndexVersion = 1;
inline constexpr std::string_view kIndexFileName = "index.json";
// Spec version of the whole dataset format (index + shard layout).
inline constexpr std::string_view kDatasetFormatVersion = "1.0";

// A file of a shard as stored: its path relative to the dataset root, its
// size and the XXH3-64 of its bytes as 16 lower-case hex digits.
struct StoredFile {
  std::string name;
  std::uint64_t bytes = 0;
  std::string xxh3;
};

// One shard of a dataset. `name`, `bytes` and `xxh3` describe the
// uncompressed .tsafe shard; when `zstd` is set, the dataset stores only the
// zstd-compressed file it describes and readers decompress it on first use.
struct ShardInfo {
  std::string name;
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;
  std::string xxh3;
  std::optional<StoredFile> zstd;
  // Shard kinds other than native .tsafe (set by the MDS / WebDataset
  // adapters; "tsafe" for native shards, the only kind an index.json holds).
  std::string kind = "tsafe";
};

struct DatasetIndex {
  Schema schema;
  std::uint64_t samples = 0;  // the sum of the shards' samples
  std::vector<ShardInfo> shards;
  std::string metadata_json;  // the user's JSON object, "" when absent
};

struct IndexLimits {
  std::uint64_t max_index_bytes = std::uint64_t{1} << 30;
  std::uint64_t max_shards = std::uint64_t{1} << 24;
  std::uint32_t max_fields = 4096;
  std::uint32_t max_rank = 64;
  std::uint32_t max_json_depth = 64;  // of the user metadata
};

// The schema as the JSON array written in indexes and shard metadata:
// [{"name": "x", "kind": "tensor", "dtype": "f32", "shape": [null, 3]}, ...]
// (null = kAnyDim; DATASET.md §2.1).
std::string SchemaToJson(const Schema& schema);
// The inverse, checking every rule of DATASET.md §2.1 (unique UTF-8 names,
// known kinds and dtypes, dims >= 0 or null, packed dtypes only in shapes
// whose byte size is whole). kCorruption naming `what` and the field.
Result<Schema> SchemaFromJson(std::string_view json, std::string_view what, const IndexLimits& limits = {});
// Checks a schema given by a caller (the writer's declared schema):
// kInvalidArgument naming the field.
Status ValidateSchema(const Schema& schema);
// True when both have the same fields in the same order with the same kind,
// dtype and shape. `why`, when given, receives the first difference.
bool SameSchema(const Schema& a, const Schema& b, std::string* why = nullptr);

// Checks a shard path from an index (DATASET.md §3.2): relative, '/'-separated,
// no empty, "." or ".." component, no backslash or NUL, valid UTF-8.
// kCorruption naming `what` otherwise. A lexical check only: readers also
// check that the path does not resolve outside the root through a symlink.
Status ValidateShardName(std::string_view name, std::string_view what);

// Parses index.json text; `what` names it in messages (its path or URL).
// Checks DATASET.md §5.1 rules I1..I10. Errors: kCorruption, kUnsupported
// (another format or a newer version), kLimitExceeded.
Result<DatasetIndex> ParseIndex(std::string_view json, std::string_view what, const IndexLimits& limits = {});
// Deterministic JSON text (keys in a fixed order, one shard per line).
std::string EncodeIndex(const DatasetIndex& index);
// Reads and parses `<dir>/index.json`.
Result<DatasetIndex> ReadIndexFile(const std::string& dir, const IndexLimits& limits = {});
// Writes `<dir>/index.json` through a temp file renamed into place (fsynced
// with its directory when `sync`).
Status WriteIndexFile(const std::string& dir, const DatasetIndex& index, bool sync = true);

// XXH3-64 as 16 lower-case hex digits, the form indexes store.
std::string HashHex(std::uint64_t h);

struct MergeOptions {
  // The merged index's user metadata (a JSON object); "" keeps none.
  std::string metadata_json;
  bool sync = true;
  // Replace an existing <out_dir>/index.json.
  bool overwrite = false;
};

// Combines the datasets in `parts` (directories inside `out_dir`, given
// relative to it or absolute; each holding an index.json) into one dataset
// rooted at `out_dir`, in the order given, without copying shards: the merged
// index names each shard by its path relative to `out_dir`. Errors:
// kInvalidArgument (a part outside `out_dir`, also through a symlink, or
// listed twice; no parts), kFailedPrecondition (schemas differ: the message
// names both parts and the first difference; index exists without
// `overwrite`), errors of ReadIndexFile and WriteIndexFile.
Result<DatasetIndex> Merge(const std::string& out_dir, const std::vector<std::string>& parts,
                           const MergeOptions& options = {});

}  // namespace tensorsafe::dataset
