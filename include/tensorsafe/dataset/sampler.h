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
#include <utility>
#include <vector>

#include "tensorsafe/dataset/partition.h"
#include "tensorsafe/dataset/shuffle.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// Persisted by name in the state JSON ("seed", "elastic"): never rename.
enum class PartitionMode : std::uint8_t { kSeed, kElastic };
std::string_view PartitionModeName(PartitionMode mode);
Result<PartitionMode> ParsePartitionMode(std::string_view name);

// MosaicML streaming's default shuffle block size for `num_canonical_nodes`
// (StreamingDataset.__init__): max(4'000'000 / ncn, 2^18); ncn < 1 counts as 1.
// SamplerState::shuffle_block_size = nullopt means this value.
std::int64_t DefaultShuffleBlockSize(std::int64_t num_canonical_nodes);

// Where one DataLoader worker stands in its own sequence (WorkerIds), for
// loaders that save each worker's state apart (torchdata's
// StatefulDataLoader). Such a position resumes only the same worker of the
// same world; a global position (sample_in_epoch alone) resumes any world.
struct WorkerPosition {
  World world;               // the world it was saved in, with the worker's own coordinates
  std::int64_t samples = 0;  // ids of the worker's sequence already yielded

  bool operator==(const WorkerPosition& o) const {
    return world.num_nodes == o.world.num_nodes && world.ranks_per_node == o.world.ranks_per_node &&
           world.workers_per_rank == o.world.workers_per_rank && world.node == o.world.node &&
           world.rank_of_node == o.world.rank_of_node && world.worker_of_rank == o.world.worker_of_rank &&
           samples == o.samples;
  }
};

// Configuration and progress in one record, as MosaicML's state_dict. The
// configuration fields must stay the same for the whole run; only `epoch`,
// `sample_in_epoch` and `worker` move.
struct SamplerState {
  // Encoded states are version 2 (PARTITION.md §5.1); version 1 (without
  // the worker keys) still decodes.
  static constexpr int kVersion = 2;

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
  // nullopt: DefaultShuffleBlockSize(num_canonical_nodes).
  std::optional<std::int64_t> shuffle_block_size;
  std::optional<std::int64_t> initial_nodes;  // relaxed partition only
  // A position inside one worker's sequence, counted from sample_in_epoch.
  std::optional<WorkerPosition> worker;

  std::int64_t block_size() const {
    return shuffle_block_size ? *shuffle_block_size : DefaultShuffleBlockSize(num_canonical_nodes);
  }
  bool operator==(const SamplerState&) const = default;
};

// One field's value as a JSON object or a Python dict holds it, so both are
// checked by the same code (SamplerStateFromFields).
struct SamplerValue {
  enum class Kind : std::uint8_t { kNull, kBool, kInt, kUInt, kString, kOther };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::int64_t integer = 0;    // kInt
  std::uint64_t uinteger = 0;  // kUInt: an integer above INT64_MAX
  // kString: the string. kOther (a float, list, ...): what it is, for the
  // error message ("number 1.5", "float 1.5").
  std::string text;

  static SamplerValue Null() { return {}; }
  static SamplerValue Bool(bool b) { return {Kind::kBool, b, 0, 0, {}}; }
  static SamplerValue Int(std::int64_t i) { return {Kind::kInt, false, i, 0, {}}; }
  static SamplerValue UInt(std::uint64_t u) { return {Kind::kUInt, false, 0, u, {}}; }
  static SamplerValue String(std::string s) { return {Kind::kString, false, 0, 0, std::move(s)}; }
  static SamplerValue Other(std::string what) { return {Kind::kOther, false, 0, 0, std::move(what)}; }
};
using SamplerFields = std::vector<std::pair<std::string, SamplerValue>>;

// Every key of the version-2 state in encoding order, with its value (null
// where the state has none).
SamplerFields SamplerStateToFields(const SamplerState& state);
// Strict: exactly the keys of version 1 or 2 (each once), exact types (no
// floats for integers, no 0/1 for booleans, no strings for numbers), the
// ranges of PARTITION.md §5.1, and the worker keys all null or all set;
// otherwise kInvalidArgument naming the key.
Result<SamplerState> SamplerStateFromFields(const SamplerFields& fields);

// {"version":2,"mode":"elastic","partition":"orig","epoch":0,...}: the keys of
// SamplerStateToFields in order, every one present (null where unset).
std::string EncodeSamplerState(const SamplerState& state);
// JSON text through SamplerStateFromFields: kInvalidArgument for bad JSON or
// a duplicated key and as that function; kLimitExceeded for more than 64 KiB
// of text.
Result<SamplerState> DecodeSamplerState(std::string_view json);

// The checks that need neither shards nor a world, which EpochPlan::Create
// also runs: seed mode (Composer's get_partition) shuffles not and resumes
// no global mid-epoch position (kUnsupported); elastic mode needs a global
// batch size >= 1 (kInvalidArgument).
Status CheckSamplerState(const SamplerState& state);

// One epoch's plan for a whole world (nodes x ranks x workers).
class EpochPlan {
 public:
  // `samples_per_shard`: the dataset's shards in order. `world` supplies the
  // counts; its indices are ignored. Errors (kInvalidArgument): those of
  // ElasticPartition::Create / EpochShuffle::Create / GetSeedPartition, a
  // global batch not divisible by the ranks, a worker position saved in a
  // world of other counts, and in seed mode shuffle or sample_in_epoch != 0
  // (kUnsupported: Composer had neither).
  static Result<EpochPlan> Create(std::span<const std::int64_t> samples_per_shard, const SamplerState& state,
                                  const World& world);

  // The sample ids world.{node, rank_of_node, worker_of_rank} reads this
  // epoch from state.sample_in_epoch on, in order. Elastic: padding slots (-1)
  // are removed unless `keep_padding` (then the result is the worker's
  // (batches x batch) block, row-major). Seed: the worker's contiguous range.
  // With a worker position: only that worker, its first `samples` ids
  // dropped (kInvalidArgument for another worker, for keep_padding, or for
  // more samples than the worker has).
  Result<std::vector<std::int64_t>> WorkerIds(const World& world, bool keep_padding = false) const;

  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t rank_batch_size() const { return rank_batch_; }
  const std::optional<ElasticPartition>& partition() const { return partition_; }

 private:
  Result<std::vector<std::int64_t>> AllWorkerIds(const World& world, bool keep_padding) const;

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
