// Dataset: random access and iteration over the samples of a sharded dataset.
//
// A Dataset is a list of shards (ShardInfo: sample count, name, ...) and a
// ShardOpener that turns one of them into a ShardSource. Open() builds both
// for a native dataset directory (index.json + .tsafe shards, zstd shards
// decompressed into a cache directory on first use). FromShards() takes any
// list and opener: that is the seam for other shard kinds (MosaicML MDS,
// WebDataset tar) and for remote datasets, whose opener asks a download cache
// for a local path and then opens it (DATASET.md §6).
//
// Sample i of the dataset is sample i - start(s) of the shard s found by
// binary search over the cumulative counts. Shards open lazily; at most
// `max_open_shards` are kept open (least recently used closed first), but a
// Sample or an iterator keeps its shard alive as long as it needs it.
//
// Thread safety: a Dataset is immutable apart from its internally locked
// shard cache; Read() and Verify() may run on many threads at once. A
// SampleIterator is used by one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/dataset/shard.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// One sample: views of its fields in schema order, and the shard that owns
// the bytes they view. The views stay valid while `owner` (or a copy of it)
// lives, also after the Dataset is gone: Python arrays keep `owner` as base.
struct Sample {
  std::uint64_t index = 0;  // global sample index
  std::vector<FieldView> fields;
  std::shared_ptr<const ShardSource> owner;

  // The field named `name`, or nullptr.
  const FieldView* Find(std::string_view name) const;
};

// Typed access to one field view, checking its kind.
Result<std::int64_t> AsInt(const FieldView& v);
Result<double> AsFloat(const FieldView& v);
// kStr, kJson or kBytes as text (bytes not checked for UTF-8).
Result<std::string_view> AsText(const FieldView& v);

// Opens shard `shard_index` of the list; must be thread-safe.
using ShardOpener =
    std::function<Result<std::shared_ptr<const ShardSource>>(const ShardInfo& shard, std::size_t shard_index)>;

// Told which shards will be read soon (nearest first), so it can fetch them
// in the background; must be thread-safe and must not block on downloads.
using ShardPrefetcher = std::function<void(std::span<const std::size_t> shards)>;

struct DatasetOptions {
  // Shards kept open (mapped) at once; at least 1.
  std::size_t max_open_shards = 64;
  // Where zstd shards are decompressed (the .tsafe file appears there under
  // the shard's name, written atomically, its XXH3 checked). Empty: the
  // dataset directory itself.
  std::string cache_dir;
  // Hash each shard file against the index when it is first opened (a full
  // read of the shard); decompressed shards are always checked.
  bool verify_on_open = false;
  ShardOptions shard;
  // Remote datasets (OpenAny with an http:// or https:// URL): the download
  // cache's options. Its cache_dir, when empty, is `cache_dir` above, else
  // DefaultCacheDir(). Decompressed zstd shards go to
  // <cache>/decompressed/, outside the size-limited files/.
  ShardCacheOptions remote;
  // Shards handed to the prefetcher (FromShards) ahead of the reader: an
  // iterator names the next distinct shards of its own order (shuffled or
  // not) each time it enters a shard; Read() names the shards after the one
  // it opened, in index order. 0 turns prefetching off.
  std::size_t prefetch_shards = 2;
};

class SampleIterator;

class Dataset {
 public:
  // Opens the native dataset in `dir`: reads and checks index.json; shards
  // open on first use. Errors: those of ReadIndexFile (kIOError with ENOENT
  // when `dir` holds no index.json, kCorruption, kUnsupported).
  static Result<std::shared_ptr<Dataset>> Open(const std::string& dir, const DatasetOptions& options = {});
  // Any shard list with its opener. `location` names the dataset in
  // messages. `prefetch`, when given, is told of the shards about to be read
  // (DatasetOptions::prefetch_shards). Errors: kInvalidArgument (no opener,
  // total overflow).
  static Result<std::shared_ptr<Dataset>> FromShards(std::string location, Schema schema, std::vector<ShardInfo> shards,
                                                     ShardOpener opener, const DatasetOptions& options = {},
                                                     std::string metadata_json = {}, ShardPrefetcher prefetch = {});
  // The opener Open() uses for the native dataset rooted at `root`: resolves
  // the name under root (refusing symlinks that escape it), decompresses zstd
  // shards into options.cache_dir, opens a TsafeShard checked against
  // `schema`. For adapters that reuse native shards.
  static ShardOpener NativeOpener(std::string root, Schema schema, DatasetOptions options);

  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::string& location() const;
  std::uint64_t num_samples() const;
  const Schema& schema() const;
  const std::vector<ShardInfo>& shards() const;
  const std::string& metadata_json() const;  // "" when none
  // First global index of shard s (s == shards().size() gives num_samples()).
  std::uint64_t shard_start(std::size_t s) const;

  // The shard holding global sample `i` and i's index within it, in
  // O(log shards). kOutOfRange for i >= num_samples().
  struct Location {
    std::size_t shard = 0;
    std::uint64_t local = 0;
  };
  Result<Location> Locate(std::uint64_t i) const;

  // The shard `s`, opened (or taken from the cache). Errors of the opener,
  // with kCorruption when its schema or sample count differ from the list.
  Result<std::shared_ptr<const ShardSource>> OpenShard(std::size_t s) const;

  // Reads global sample `i` into `out` (reusing its vectors). Errors:
  // kOutOfRange, the opener's errors, the shard's Read() errors.
  Status Read(std::uint64_t i, Sample& out) const;

  // Iterates over the global ids in `order` (any order, repeats allowed; the
  // partition/shuffle code produces them). Consecutive ids of one shard cost
  // no lookup.
  SampleIterator Iterate(std::vector<std::uint64_t> order) const;
  // Iterates over [begin, end) in order.
  SampleIterator IterateRange(std::uint64_t begin, std::uint64_t end) const;

  // Checks every shard: size and XXH3 of each stored file (compressed and
  // decompressed), full shard validation, sample count and schema against
  // the index, and every tsafe data checksum. Stops at the first problem
  // unless `problems` is given, which then receives every one (the Status
  // is the first). `progress(done, total)` is called after each shard.
  Status Verify(std::vector<Status>* problems = nullptr,
                const std::function<void(std::size_t, std::size_t)>& progress = {}) const;

  class Impl;
  explicit Dataset(std::shared_ptr<Impl> impl);

 private:
  friend class SampleIterator;
  std::shared_ptr<Impl> impl_;
};

// Opens any supported dataset location (DATASET.md "Locations"), detected in
// this order:
//   1. "http://" or "https://" URL: the base of a native dataset, read
//      through a ShardCache (index.json fetched into memory, every shard name
//      checked with ValidateRelativeName at open, shards fetched hash-checked
//      and pinned while open);
//   2. a name containing '{': WebDataset shards, expanded by
//      wds::ExpandBraces (every name must be an existing file);
//   3. a regular file ending in ".tar": one WebDataset shard;
//   4. a directory with index.json: native when "format" is
//      "tensorsafe-dataset", MosaicML MDS when "version" is 2;
//   5. a directory without index.json: its *.tar files (not recursive, in
//      name order) as WebDataset shards.
// WebDataset shards are scanned (headers only) at open to count samples.
// MDS and WebDataset shards whose schemas differ only in dims get one merged
// schema (differing dims become kAnyDim); other differences fail. Errors:
// kIOError with ENOENT (nothing there, or a directory with neither
// index.json nor .tar files, as Open()), kNotFound (a pattern names a file
// that does not exist), kUnsupported (an
// index.json of another format, shards with incompatible schemas), and those
// of the format's reader (ReadIndexFile, ShardCache, mds::OpenDataset,
// wds::OpenShard).
Result<std::shared_ptr<Dataset>> OpenAny(const std::string& location, const DatasetOptions& options = {});

// LevelDB-style: Next() returns false at the end or on an error, and status()
// tells which.
class SampleIterator {
 public:
  // Fills `out` with the next sample; false when done or failed.
  bool Next(Sample& out);
  const Status& status() const { return status_; }
  // Ids consumed so far (the position in the order).
  std::uint64_t position() const { return pos_; }

 private:
  friend class Dataset;
  SampleIterator(std::shared_ptr<const Dataset::Impl> ds, std::vector<std::uint64_t> order, std::uint64_t begin,
                 std::uint64_t end, bool ranged);
  bool Fail(Status s);
  void Prefetch(std::uint64_t id);
  // Names the next distinct shards after shard `s` in this iterator's order.
  void HintShardsAfter(std::size_t s);

  std::shared_ptr<const Dataset::Impl> ds_;
  std::vector<std::uint64_t> order_;
  bool ranged_ = false;
  std::uint64_t begin_ = 0, end_ = 0;
  std::uint64_t pos_ = 0;
  // The shard of the previous id: its global range and source.
  std::uint64_t cur_start_ = 0, cur_end_ = 0;
  std::shared_ptr<const ShardSource> cur_;
  Status status_;
  // Shards this iterator used recently, by shard index modulo Slots(): a
  // shuffled order changes shard at almost every id, and the slots spare it
  // the dataset's lock. Up to Slots() shards (kSlots, at most the dataset's
  // max_open_shards) stay open while it lives.
  static constexpr std::size_t kSlots = 16;
  std::size_t Slots() const;
  struct Slot {
    std::size_t shard = static_cast<std::size_t>(-1);
    std::shared_ptr<const ShardSource> src;
  };
  std::array<Slot, kSlots> slots_;
  // Views of the sample kAhead positions ahead, whose first bytes are
  // prefetched: in a shuffled order each sample is a cache and TLB miss.
  static constexpr std::uint64_t kAhead = 6;
  std::vector<FieldView> ahead_;
};

}  // namespace tensorsafe::dataset
