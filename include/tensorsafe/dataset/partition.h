// Partitioning a dataset's samples over nodes x ranks x DataLoader workers
// (docs/PARTITION.md). Pure arithmetic on sample counts: no I/O.
//
// Two modes:
//   * "seed" (GetSeedPartition): the old Composer streaming
//     `StreamingDatasetIndex.get_partition(world, batch_size)`, reproduced
//     exactly: each worker gets one contiguous inclusive range of sample ids.
//   * "elastic" (ElasticPartition): MosaicML streaming's `orig` and `relaxed`
//     partitions over canonical nodes, reproduced exactly: a 5-D array
//     (nodes, ranks_per_node, workers_per_rank, batches, batch_size) of
//     canonical sample ids with -1 padding, whose sequence of global batches
//     does not depend on the world size.
//
// Thread safety: World, SeedPartition, ElasticParams are values; an
// ElasticPartition is immutable after Create() and may be read from several
// threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// Upper bounds on the inputs, so every intermediate product fits in int64
// (PARTITION.md §1): samples < 2^48, each world dimension and the batch size
// <= 2^20.
inline constexpr std::int64_t kMaxPartitionSamples = std::int64_t{1} << 48;
inline constexpr std::int64_t kMaxWorldDim = std::int64_t{1} << 20;

// Where one DataLoader worker sits. `rank_of_node` is the device (GPU) index
// within the node; `worker_of_rank` the DataLoader worker index of that rank.
struct World {
  std::int64_t num_nodes = 1;
  std::int64_t ranks_per_node = 1;
  std::int64_t workers_per_rank = 1;
  std::int64_t node = 0;
  std::int64_t rank_of_node = 0;
  std::int64_t worker_of_rank = 0;

  std::int64_t num_ranks() const { return num_nodes * ranks_per_node; }
  std::int64_t global_rank() const { return node * ranks_per_node + rank_of_node; }
  // Composer's node_worker: the worker's index among all workers of its node.
  std::int64_t node_worker() const { return rank_of_node * workers_per_rank + worker_of_rank; }

  // kInvalidArgument unless every count is in [1, kMaxWorldDim] and every
  // index in [0, count).
  Status Validate() const;
};

// ---------------------------------------------------------------------------
// Mode 1: seed (Composer get_partition). PARTITION.md §2.

struct SeedPartition {
  std::int64_t min_id = 0;       // first sample id of this worker (inclusive)
  std::int64_t max_id = 0;       // last sample id of this worker (inclusive)
  std::int64_t shard_begin = 0;  // shards [shard_begin, shard_end) overlap [min_id, max_id]
  std::int64_t shard_end = 0;
  // This worker downloads [shard_begin, download_end): the last shard is left
  // to the next worker unless Composer's single-downloader rule says otherwise.
  std::int64_t download_end = 0;
};

// The partition of `world`'s worker over shards holding `samples_per_shard`
// samples each (zero-sample shards allowed). `batch_size` (per device) is
// Composer's hint; nullopt or 0 means no hint.
// Errors: kInvalidArgument for a bad world, a negative shard size, a total
// of 0 or >= kMaxPartitionSamples, a negative batch size, and when this
// worker's partition is empty (Composer raises IndexError there or returns an
// inverted range; PARTITION.md §2.4).
Result<SeedPartition> GetSeedPartition(std::span<const std::int64_t> samples_per_shard, const World& world,
                                       std::optional<std::int64_t> batch_size);

// ---------------------------------------------------------------------------
// Mode 2: elastic (MosaicML orig / relaxed). PARTITION.md §3.

// Persisted by name in the resumption state ("orig", "relaxed"): never rename.
enum class PartitionAlgo : std::uint8_t { kOrig, kRelaxed };
std::string_view PartitionAlgoName(PartitionAlgo algo);
Result<PartitionAlgo> ParsePartitionAlgo(std::string_view name);

struct ElasticParams {
  PartitionAlgo algo = PartitionAlgo::kOrig;
  std::int64_t num_samples = 0;
  std::int64_t num_canonical_nodes = 1;
  std::int64_t num_nodes = 1;
  std::int64_t ranks_per_node = 1;
  std::int64_t workers_per_rank = 1;
  std::int64_t batch_size = 1;  // per rank
  std::int64_t drop_first = 0;  // global samples already consumed this epoch
  // kRelaxed only: physical nodes of the run that began the training.
  std::optional<std::int64_t> initial_nodes;
};

// The 5-D partition as a function: At() computes any element in O(1) without
// materialising the array (a worker needs only its own row).
class ElasticPartition {
 public:
  // Validates like MosaicML's get_partitions(): kInvalidArgument when a count
  // is out of range, neither of num_canonical_nodes / nodes divides the other
  // (orig, or relaxed on its first run), drop_first exceeds num_samples plus
  // the repeated samples, relaxed's global batch is not divisible by the
  // initial devices, or where numpy would fail to broadcast (tiny datasets
  // split over more physical than canonical nodes; PARTITION.md §3.6).
  static Result<ElasticPartition> Create(const ElasticParams& params);

  // (nodes, ranks_per_node, workers_per_rank, batches_per_worker, batch_size).
  const std::array<std::int64_t, 5>& shape() const { return shape_; }
  std::int64_t size() const;  // product of shape()

  // The canonical sample id at that position, or -1 for padding.
  // Precondition: each index within shape().
  std::int64_t At(std::int64_t node, std::int64_t rank, std::int64_t worker, std::int64_t batch,
                  std::int64_t slot) const;

  // One worker's (batches, batch_size) block, row-major, -1 kept.
  std::vector<std::int64_t> WorkerIds(std::int64_t node, std::int64_t rank, std::int64_t worker) const;

  // The whole array, row-major. kLimitExceeded beyond `max_elements`.
  Result<std::vector<std::int64_t>> Materialize(std::int64_t max_elements = std::int64_t{1} << 31) const;

 private:
  struct Orig {  // the `orig` partition over `nodes` physical nodes (§3.2–3.5)
    std::int64_t n = 0, ncn = 0, nodes = 0, ranks = 0, workers = 0, bs = 0, drop = 0;
    bool tiled = false;                            // N small: canonical rows tile 0..N-1 (§3.3)
    std::int64_t spcn = 0;                         // samples per canonical node, ceil(N / ncn)
    std::int64_t padding = 0, width = 0;           // node-ratio padding; padded row width
    std::int64_t pad_src = 0;                      // first source column of the node-ratio padding
    std::int64_t per_node = 0;                     // samples per node after the drop (S)
    std::int64_t rank_pad = 0;                     // repeats appended per node (u)
    bool rank_pad_tail = true;                     // repeats come from the tail (else cyclic)
    std::int64_t per_rank = 0;                     // samples per rank (M)
    std::int64_t batches = 0;                      // batches per worker
    std::int64_t Canonical(std::int64_t t) const;  // element t of the flattened canonical matrix
    std::int64_t AtRank(std::int64_t node, std::int64_t rank, std::int64_t i) const;  // -1 past M
    std::int64_t At(std::int64_t node, std::int64_t rank, std::int64_t worker, std::int64_t batch,
                    std::int64_t slot) const;
  };
  static Result<Orig> MakeOrig(std::int64_t n, std::int64_t ncn, std::int64_t nodes, std::int64_t ranks,
                               std::int64_t workers, std::int64_t bs, std::int64_t drop);

  Orig orig_;
  bool relaxed_ = false;  // reshape of orig_ (over the initial nodes) to the new world
  std::int64_t nodes_ = 0, ranks_ = 0, workers_ = 0, bs_ = 0;
  std::array<std::int64_t, 5> shape_{};
};

}  // namespace tensorsafe::dataset
