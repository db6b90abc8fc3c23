// Internals of the sharded-checkpoint code shared by its files, Convert
// (src/convert/sharded.cc) and the tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe::sharded::internal {

// Tensor name -> position in a weight map, open addressing over XXH3 (a
// 100,000-name index is looked up once per tensor at open). Each slot keeps
// 32 bits of the hash beside the position, so a probe compares names only
// when those match: the names lie all over the heap, and comparing each
// probed one missed the cache on most lookups.
class NameTable {
 public:
  explicit NameTable(const std::vector<std::pair<std::string_view, std::uint32_t>>& names);
  // Adds every name in order; on the first that repeats an earlier one,
  // stops and returns {earlier, later}; {-1, -1} when all are distinct.
  std::pair<std::int64_t, std::int64_t> InsertAll();
  // The position of `name`, whose Hash64 is `hash` (computed ahead, its
  // slot Prefetch'ed), or -1.
  std::int64_t Find(std::string_view name, std::uint64_t hash) const;
  // Starts loading the slot `hash` probes first.
  void Prefetch(std::uint64_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }

 private:
  // Adds names[pos]; the position of an earlier equal name (not added), or -1.
  std::int64_t Insert(std::uint32_t pos, std::uint64_t hash);
  const std::vector<std::pair<std::string_view, std::uint32_t>>* names_;
  std::vector<std::uint64_t> slots_;  // (hash >> 32) << 32 | (position + 1); 0 = empty
  std::size_t mask_ = 0;
};

// dir/name; `name` alone when `dir` is "" or ".".
std::string JoinPath(const std::string& dir, const std::string& name);
// The error for a tensor that a weight map lists twice (map[first] and map[second]).
Status ListedTwice(const std::string& index, const std::vector<std::pair<std::string_view, std::uint32_t>>& map,
                   std::size_t first, std::size_t second, const std::vector<std::string>& shards);
// ReadIndex; without `check_duplicates` a tensor listed twice is left to
// the caller (Open finds it while building its own name table).
Result<Index> ReadIndexImpl(const std::string& path, const ReadOptions& opt, bool check_duplicates);

// A shard or file at a URL as Open reads it (sharded_remote.cc): its
// header (safetensors, gguf) or index (.tsafe), none of its data. When the first
// bytes show another format than the one asked for, only `file` and
// `detected` are set.
struct RemoteShard {
  std::shared_ptr<const RandomAccessFile> file;
  Format detected = Format::kUnknown;
  std::vector<TensorInfo> infos;  // in data (safetensors) or index (.tsafe, gguf) order
  std::string metadata_json;      // the file's ("" when none)
};
Result<RemoteShard> OpenRemoteShard(const std::string& path, Format format);

// Bytes of a shard at a URL wanted in a caller's buffer.
struct RemoteRead {
  std::uint32_t shard;
  std::uint64_t offset;
  std::span<std::byte> out;
};
// Reads `reads` from `files` (by shard) as runs of neighbours, gaps under
// 1 MiB read through and at most 64 MiB a run: one ranged read per run,
// through a bounce buffer unless the run is one read, runs on `threads`
// threads. Thousands of small tensors otherwise cost a request, or a
// cached block's lookup and a thread's wait, each (sharded_remote.cc).
Status ReadRemoteRuns(std::span<const std::shared_ptr<const RandomAccessFile>> files, std::vector<RemoteRead> reads,
                      unsigned threads);

// Writes one shard: `set` to `path` as options.format (temp + rename).
using ShardWriter = std::function<Status(const std::string& path, const TensorSet& set)>;

// WriteSharded with a given shard writer and, when `fixed` is not empty, a
// given split (positions into set.tensors per shard) instead of PlanShards;
// total_size is then the data bytes. `per_shard_metadata`, when not empty,
// gives each shard's metadata (parallel to the shards) in place of
// options.shard_metadata_json.
Result<WriteStats> WriteShardedWith(const std::string& dir, const TensorSet& set, const WriteOptions& options,
                                    std::span<const Storage> storages, const ShardWriter& write,
                                    const std::vector<std::vector<std::size_t>>& fixed = {},
                                    const std::vector<std::string>& per_shard_metadata = {},
                                    const std::string* verbatim_index_metadata = nullptr);

// Receives a weight map's entries in file order (views of the text);
// false stops the scan.
using IndexEntrySink = std::function<bool(std::string_view name, std::string_view shard)>;
// The fast path of ParseIndex (index_scan.cc): accepts only UTF-8 text of
// an object with a "weight_map" of strings without escapes and at most one
// "metadata" of strings and unsigned integers (kept as compact JSON in
// `metadata_json`), and no other key. On anything else, or when `add`
// refuses an entry, it returns false, and the general reader, which reports
// every error, reads the text instead.
bool ScanCommonIndex(std::string_view text, std::string& metadata_json, const IndexEntrySink& add);
// ParseIndex with the fast path on or off (tests compare the two).
Result<Index> ParseIndexWith(std::string_view text, const std::string& index_path, const ReadOptions& options,
                             bool fast_path);

// Python's json.dumps of a string with ensure_ascii=True (quotes included);
// false when `s` is not UTF-8.
bool AppendPythonJsonString(std::string& out, std::string_view s);

}  // namespace tensorsafe::sharded::internal
