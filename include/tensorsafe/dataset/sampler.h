// The epoch sampler and its resumption state (docs/PARTITION.md §5): which
// global sample ids one DataLoader worker reads this epoch, given the shards'
// sample counts, the world and a small state that a training loop saves with
// its checkpoint (state_dict / load_state_dict) and restores, possibly on a
// different number of nodes, ranks or workers.
//
// Thread safety: SamplerState is a value; an EpochPlan is immutable after
// Create() and WorkerIds() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/partition.h"
#include "tensorsafe/dataset/shuffle.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// Persisted by name in the state JSON ("seed", "elastic"): never rename.
enum class PartitionMode : std::uint8_t { kSeed, kElastic };
std::string_view PartitionModeName(PartitionMode mode);
Result<PartitionMode> ParsePartitionMode(std::string_view name);

// Configuration and progress in one record, as MosaicML's state_dict. The
// configuration fields must stay the same for the whole run; only `epoch` and
// `sample_in_epoch` move.
struct SamplerState {
  static constexpr int kVersion = 1;

  PartitionMode mode = PartitionMode::kElastic;
  PartitionAlgo partition = PartitionAlgo::kOrig;  // elastic only
  std::int64_t epoch = 0;
  // Global samples consumed this epoch: the sum over all ranks, padding repeats
  // included, -1 slots excluded; normally steps * global_batch_size.
  std::int64_t sample_in_epoch = 0;
  std::uint64_t seed = 9176;
  std::int64_t num_canonical_nodes = 1;
  // Samples per optimizer step over all ranks; each rank gets
  // global_batch_size / (nodes * ranks_per_node), which must divide evenly.
  std::int64_t global_batch_size = 1;
  bool shuffle = false;
  std::int64_t shuffle_block_size = std::int64_t{1} << 18;
  std::optional<std::int64_t> initial_nodes;  // relaxed partition only

  bool operator==(const SamplerState&) const = default;
};

// {"version":1,"mode":"elastic","partition":"orig","epoch":0,...}: keys in a
// fixed order, every field always present (null for no initial_nodes).
std::string EncodeSamplerState(const SamplerState& state);
// Strict: kInvalidArgument naming the key for bad JSON, a missing, unknown or
// duplicated key, a wrong type, a non-integer or out-of-range number, an
// unknown mode or partition name, or a version other than 1; kLimitExceeded
// for more than 64 KiB of text.
Result<SamplerState> DecodeSamplerState(std::string_view json);

// One epoch's plan for a whole world (nodes x ranks x workers).
class EpochPlan {
 public:
  // `samples_per_shard`: the dataset's shards in order. `world` supplies the
  // counts; its indices are ignored. Errors (kInvalidArgument): those of
  // ElasticPartition::Create / EpochShuffle::Create / GetSeedPartition, a
  // global batch not divisible by the ranks, and in seed mode shuffle or
  // sample_in_epoch != 0 (kUnsupported: Composer had neither).
  static Result<EpochPlan> Create(std::span<const std::int64_t> samples_per_shard, const SamplerState& state,
                                  const World& world);

  // The sample ids world.{node, rank_of_node, worker_of_rank} reads this
  // epoch from state.sample_in_epoch on, in order. Elastic: padding slots (-1)
  // are removed unless `keep_padding` (then the result is the worker's
  // (batches x batch) block, row-major). Seed: the worker's contiguous range.
  Result<std::vector<std::int64_t>> WorkerIds(const World& world, bool keep_padding = false) const;

  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t rank_batch_size() const { return rank_batch_; }
  const std::optional<ElasticPartition>& partition() const { return partition_; }

 private:
  SamplerState state_;
  World world_;
  std::vector<std::int64_t> shards_;
  std::int64_t num_samples_ = 0, rank_batch_ = 1;
  std::optional<ElasticPartition> partition_;
  std::optional<EpochShuffle> shuffle_;
};

// Convenience: EpochPlan::Create(...) then WorkerIds(world).
Result<std::vector<std::int64_t>> EpochWorkerIds(std::span<const std::int64_t> samples_per_shard,
                                                 const SamplerState& state, const World& world,
                                                 bool keep_padding = false);

}  // namespace tensorsafe::dataset
