// MosaicML `streaming` MDS datasets, read as tensorsafe dataset shards
// (docs/formats/mds.md says exactly what is accepted, refused, and how each
// column encoding maps to a field).
//
// A dataset is a directory with index.json (version 2) listing shards; each
// shard is an MDS file (`u32 n, u32 offsets[n+1], config JSON, samples`),
// possibly compressed as MDSWriter does it (`<basename>.br`, `.bz2`, `.gz`,
// `.snappy`, `.zstd`). OpenIndex parses and
// validates the index; OpenShard gives one shard as a dataset::ShardSource
// with O(1) Read(i) over the mapped raw shard, decompressing a compressed
// shard into a cache directory first (temp + rename, hash-checked).
//
// Never unpickles: `pkl` columns are refused with kUnsupported.
//
// Thread safety: Index is a value. A ShardSource from OpenShard is immutable
// and its Read() may be called from several threads at once. Several
// processes may decompress the same shard into one cache directory at once:
// each writes its own temporary file and renames it into place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/status.h"

namespace tensorsafe::mds {

// What index.json and shard files may claim. Defaults are far above what
// MosaicML writes (one shard per 64 MiB, a few dozen columns).
struct Limits {
  std::uint64_t max_index_bytes = 256ull << 20;  // index.json
  std::uint32_t max_json_depth = 32;             // index.json and shard configs
  std::uint64_t max_shards = 1u << 22;
  std::uint32_t max_columns = 4096;
  std::uint32_t max_name_bytes = 4096;         // column names and basenames
  std::uint64_t max_shard_bytes = 1ull << 32;  // raw shard: u32 offsets cap it at 4 GiB
  std::uint32_t max_rank = 63;                 // the writer's own limit
};

// How a column is stored (docs/formats/mds.md, "Column encodings").
enum class ColumnCodec : std::uint8_t {
  kBytes,    // bytes, and encodings kept as their bytes: jpeg, png, pil, jpeg_array, list[...]
  kStr,      // str, str_int, str_float, str_decimal (UTF-8 text)
  kInt,      // int: int64
  kScalar,   // uint8..uint64, int8..int64, float16/32/64: one value
  kNdarray,  // ndarray[:dtype[:shape]]
  kJson,     // json
};

struct Column {
  std::string name;
  std::string encoding;  // as in the index, e.g. "ndarray:float32:2,3"
  ColumnCodec codec = ColumnCodec::kBytes;
  // Fixed byte size of every value, or -1 when each sample stores a u32 size.
  std::int64_t size = -1;
  // kScalar, and kNdarray with a fixed dtype.
  bool dtype_fixed = false;
  DType dtype = DType::kU8;
  // kNdarray with a fixed shape (ndarray:dtype:d0,d1,...).
  bool shape_fixed = false;
  std::vector<std::int64_t> shape;
};

struct HashDigest {
  std::string algorithm;  // "xxh3_64", "sha1", ...
  std::string hex;        // as written: lower-case hex
};

struct FileRef {
  std::string basename;  // relative to the dataset directory; may hold '/' (merged indexes)
  std::uint64_t bytes = 0;
  std::vector<HashDigest> hashes;
};

struct ShardEntry {
  std::uint64_t samples = 0;
  std::vector<Column> columns;  // in stored order (the writer sorts them by name)
  std::string compression;      // "" or compression.py's name: "gz", "zstd:7", "snappy", ...
  FileRef raw;
  bool compressed = false;
  FileRef zip;  // when compressed
};

struct Index {
  std::string root;  // the dataset directory
  std::vector<ShardEntry> shards;
  std::uint64_t total_samples = 0;
};

// Parses and validates index.json bytes (docs/formats/mds.md, "Reader
// checks"). `display_name` prefixes messages. Errors: kCorruption (not JSON,
// a field missing or of the wrong type, sizes that contradict the encodings,
// unsafe basenames), kUnsupported (version != 2, format != "mds",
// compression other than br, bz2, gz, snappy, zstd, pkl or unknown
// encodings), kLimitExceeded.
Result<Index> ParseIndex(std::span<const std::byte> bytes, const std::string& display_name, const Limits& limits = {});
// Reads `<dir>/index.json` and parses it; sets root = dir. Adds kIOError.
Result<Index> OpenIndex(const std::string& dir, const Limits& limits = {});

// The names before 2026-11-28, when they collided with dataset::Dataset and
// dataset::ShardInfo; kept for one release.
using Dataset [[deprecated("use mds::Index")]] = Index;
using ShardInfo [[deprecated("use mds::ShardEntry")]] = ShardEntry;
[[deprecated("use mds::OpenIndex")]] inline Result<Index> OpenDataset(const std::string& dir,
                                                                      const Limits& limits = {}) {
  return OpenIndex(dir, limits);
}

struct ShardOptions {
  // Where compressed shards are decompressed (created if missing), under a
  // name from the index's xxh digest or the zip file's identity, never the
  // shard's basename (docs/formats/mds.md, "Compression and hashes"); the
  // dataset directory itself keeps the basename. Empty: compressed shards
  // can only be read when their raw file already sits in the dataset
  // directory.
  std::string cache_dir;
  // Check the raw shard against the index's xxh* hashes when it is used as
  // found (in the dataset directory or cache) rather than just decompressed.
  // Decompression always checks every xxh* hash of both files.
  bool verify_existing = false;
  Limits limits;
};

// Opens shard `index` of `dataset`. A raw shard is mapped from the dataset
// directory; a compressed one is used raw if `<root>/<raw>` or its cache
// file (see cache_dir) exists with the right size, else decompressed from
// `<root>/<zip>` into that cache file. The whole offset table and the
// config are checked here; each sample's bytes when read, and the index's
// hashes by the source's VerifyData(). The source keeps its mapping alive.
// Errors: kOutOfRange (index), kNotFound/kIOError,
// kCorruption (sizes, offsets, hashes, config disagreeing with the index),
// kLimitExceeded, kFailedPrecondition (compressed, no raw file, no cache_dir).
Result<std::unique_ptr<dataset::ShardSource>> OpenShard(const Index& dataset, std::size_t index,
                                                        const ShardOptions& options = {});
// Opens a raw MDS shard file described by `info` (tests, tools).
Result<std::unique_ptr<dataset::ShardSource>> OpenShardFile(const std::string& path, const ShardEntry& info,
                                                            const Limits& limits = {});

}  // namespace tensorsafe::mds
