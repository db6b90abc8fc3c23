// Epoch sampler and resumption state (docs/PARTITION.md §5).
#include "tensorsafe/dataset/sampler.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <utility>

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;
using json = nlohmann::json;

// The state's keys, in encoding order. Decoding requires exactly these.
constexpr std::string_view kKeys[] = {"version", "mode", "partition", "epoch", "sample_in_epoch", "seed",
                                      "num_canonical_nodes", "global_batch_size", "shuffle",
                                      "shuffle_block_size", "initial_nodes"};
constexpr i64 kMaxGlobalBatch = i64{1} << 40;

Status BadKey(std::string_view key, const std::string& why) {
  return InvalidArgument("sampler state: key \"" + std::string(key) + "\": " + why);
}

Result<i64> GetInt(const json& j, std::string_view key, i64 lo, i64 hi) {
  const json& v = j.at(std::string(key));
  i64 out = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) {
      return BadKey(key, std::to_string(u) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out = static_cast<i64>(u);
  } else if (v.is_number_integer()) {
    out = v.get<i64>();
  } else {
    return BadKey(key, std::string("expected an integer, got ") + v.type_name() + " " + v.dump());
  }
  if (out < lo || out > hi) {
    return BadKey(key, std::to_string(out) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return out;
}

Result<std::string> GetString(const json& j, std::string_view key) {
  const json& v = j.at(std::string(key));
  if (!v.is_string()) return BadKey(key, std::string("expected a string, got ") + v.type_name());
  return v.get<std::string>();
}

}  // namespace

std::string_view PartitionModeName(PartitionMode mode) {
  switch (mode) {
    case PartitionMode::kSeed: return "seed";
    case PartitionMode::kElastic: return "elastic";
  }
  return "?";
}

Result<PartitionMode> ParsePartitionMode(std::string_view name) {
  if (name == "seed") return PartitionMode::kSeed;
  if (name == "elastic") return PartitionMode::kElastic;
  return InvalidArgument("unknown partition mode \"" + std::string(name) + "\" (expected seed or elastic)");
}

std::string EncodeSamplerState(const SamplerState& s) {
  // Built by hand so the key order is the documented one (PARTITION.md §5.1).
  std::string out = "{";
  const auto add = [&](std::string_view key, const std::string& value) {
    if (out.size() > 1) out += ",";
    out += "\"" + std::string(key) + "\":" + value;
  };
  add("version", std::to_string(SamplerState::kVersion));
  add("mode", "\"" + std::string(PartitionModeName(s.mode)) + "\"");
  add("partition", "\"" + std::string(PartitionAlgoName(s.partition)) + "\"");
  add("epoch", std::to_string(s.epoch));
  add("sample_in_epoch", std::to_string(s.sample_in_epoch));
  add("seed", std::to_string(s.seed));
  add("num_canonical_nodes", std::to_string(s.num_canonical_nodes));
  add("global_batch_size", std::to_string(s.global_batch_size));
  add("shuffle", s.shuffle ? "true" : "false");
  add("shuffle_block_size", std::to_string(s.shuffle_block_size));
  add("initial_nodes", s.initial_nodes ? std::to_string(*s.initial_nodes) : "null");
  return out + "}";
}

Result<SamplerState> DecodeSamplerState(std::string_view text) {
  // A state is about 300 bytes; refuse megabytes of JSON before parsing them.
  constexpr std::size_t kMaxStateBytes = 64 * 1024;
  if (text.size() > kMaxStateBytes) {
    return LimitExceeded("sampler state: " + std::to_string(text.size()) + " bytes of JSON, more than the limit " +
                         std::to_string(kMaxStateBytes));
  }
  // Duplicate keys are an error (nlohmann keeps the last silently): the
  // parser callback sees every key of the top-level object.
  std::set<std::string> seen;
  std::string duplicate;
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers past a double
    return InvalidArgument(std::string("sampler state: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return InvalidArgument(std::string("sampler state: expected a JSON object, got ") + j.type_name());
  if (!duplicate.empty()) return BadKey(duplicate, "appears more than once");
  for (const auto& item : j.items()) {
    bool known = false;
    for (auto k : kKeys) known = known || item.key() == k;
    if (!known) return BadKey(item.key(), "is not a sampler state key");
  }
  for (auto k : kKeys) {
    if (!j.contains(std::string(k))) return BadKey(k, "is missing");
  }
  TS_ASSIGN_OR_RETURN(i64 version, GetInt(j, "version", 0, i64{1} << 62));
  if (version != SamplerState::kVersion) {
    return BadKey("version", std::to_string(version) + " is not supported (expected 1)");
  }
  SamplerState s;
  TS_ASSIGN_OR_RETURN(std::string mode, GetString(j, "mode"));
  auto m = ParsePartitionMode(mode);
  if (!m.ok()) return BadKey("mode", m.status().message());
  s.mode = *m;
  TS_ASSIGN_OR_RETURN(std::string algo, GetString(j, "partition"));
  auto a = ParsePartitionAlgo(algo);
  if (!a.ok()) return BadKey("partition", a.status().message());
  s.partition = *a;
  TS_ASSIGN_OR_RETURN(s.epoch, GetInt(j, "epoch", 0, i64{1} << 62));
  TS_ASSIGN_OR_RETURN(s.sample_in_epoch, GetInt(j, "sample_in_epoch", 0, kMaxPartitionSamples * 2));
  const json& seed = j.at("seed");
  if (seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<i64>() >= 0)) {
    s.seed = seed.get<std::uint64_t>();
  } else {
    return BadKey("seed", "expected an integer in [0, 2^64), got " + seed.dump());
  }
  TS_ASSIGN_OR_RETURN(s.num_canonical_nodes, GetInt(j, "num_canonical_nodes", 1, kMaxWorldDim));
  TS_ASSIGN_OR_RETURN(s.global_batch_size, GetInt(j, "global_batch_size", 0, kMaxGlobalBatch));
  const json& shuffle = j.at("shuffle");
  if (!shuffle.is_boolean()) return BadKey("shuffle", std::string("expected true or false, got ") + shuffle.dump());
  s.shuffle = shuffle.get<bool>();
  TS_ASSIGN_OR_RETURN(s.shuffle_block_size, GetInt(j, "shuffle_block_size", 1, kMaxPartitionSamples));
  if (!j.at("initial_nodes").is_null()) {
    TS_ASSIGN_OR_RETURN(i64 initial, GetInt(j, "initial_nodes", 1, kMaxWorldDim));
    s.initial_nodes = initial;
  }
  return s;
}

Result<EpochPlan> EpochPlan::Create(std::span<const std::int64_t> samples_per_shard, const SamplerState& state,
                                    const World& world) {
  World counts = world;
  counts.node = counts.rank_of_node = counts.worker_of_rank = 0;
  TS_RETURN_IF_ERROR(counts.Validate());
  EpochPlan plan;
  plan.state_ = state;
  plan.world_ = counts;
  plan.shards_.assign(samples_per_shard.begin(), samples_per_shard.end());
  for (i64 n : plan.shards_) {
    if (n < 0 || n >= kMaxPartitionSamples) {
      return InvalidArgument("sampler: a shard sample count " + std::to_string(n) + " is outside [0, 2^48)");
    }
    plan.num_samples_ += n;
    if (plan.num_samples_ >= kMaxPartitionSamples) return InvalidArgument("sampler: 2^48 samples or more");
  }
  const i64 ranks = counts.num_ranks();
  if (state.global_batch_size < 0 || state.global_batch_size > kMaxGlobalBatch ||
      state.global_batch_size % ranks != 0 ||
      (state.mode == PartitionMode::kElastic && state.global_batch_size == 0)) {
    return InvalidArgument("sampler: global batch size " + std::to_string(state.global_batch_size) +
                           " is not a positive multiple of the " + std::to_string(ranks) + " ranks (" +
                           std::to_string(counts.num_nodes) + " nodes x " + std::to_string(counts.ranks_per_node) +
                           ")");
  }
  plan.rank_batch_ = state.global_batch_size / ranks;
  if (state.epoch < 0) return InvalidArgument("sampler: epoch " + std::to_string(state.epoch) + " is negative");
  if (state.mode == PartitionMode::kSeed) {
    if (state.shuffle) return Unsupported("sampler: seed mode (Composer's get_partition) does not shuffle");
    if (state.sample_in_epoch != 0) {
      return Unsupported("sampler: seed mode cannot resume mid-epoch (sample_in_epoch " +
                         std::to_string(state.sample_in_epoch) + ")");
    }
    return plan;
  }
  ElasticParams p;
  p.algo = state.partition;
  p.num_samples = plan.num_samples_;
  p.num_canonical_nodes = state.num_canonical_nodes;
  p.num_nodes = counts.num_nodes;
  p.ranks_per_node = counts.ranks_per_node;
  p.workers_per_rank = counts.workers_per_rank;
  p.batch_size = plan.rank_batch_;
  p.drop_first = state.sample_in_epoch;
  p.initial_nodes = state.initial_nodes;
  TS_ASSIGN_OR_RETURN(ElasticPartition part, ElasticPartition::Create(p));
  plan.partition_ = std::move(part);
  if (state.shuffle) {
    TS_ASSIGN_OR_RETURN(EpochShuffle shuffle,
                        EpochShuffle::Create(plan.shards_, state.num_canonical_nodes, state.seed,
                                             static_cast<std::uint64_t>(state.epoch), state.shuffle_block_size));
    plan.shuffle_ = std::move(shuffle);
  }
  return plan;
}

Result<std::vector<std::int64_t>> EpochPlan::WorkerIds(const World& world, bool keep_padding) const {
  TS_RETURN_IF_ERROR(world.Validate());
  if (world.num_nodes != world_.num_nodes || world.ranks_per_node != world_.ranks_per_node ||
      world.workers_per_rank != world_.workers_per_rank) {
    return InvalidArgument("sampler: the world's counts differ from the plan's (" +
                           std::to_string(world_.num_nodes) + " nodes x " + std::to_string(world_.ranks_per_node) +
                           " ranks x " + std::to_string(world_.workers_per_rank) + " workers)");
  }
  if (!partition_) {  // seed mode
    const std::optional<i64> hint = rank_batch_ ? std::optional<i64>(rank_batch_) : std::nullopt;
    TS_ASSIGN_OR_RETURN(SeedPartition sp, GetSeedPartition(shards_, world, hint));
    std::vector<i64> out;
    out.reserve(static_cast<std::size_t>(sp.max_id - sp.min_id + 1));
    for (i64 id = sp.min_id; id <= sp.max_id; ++id) out.push_back(id);
    return out;
  }
  std::vector<i64> ids = partition_->WorkerIds(world.node, world.rank_of_node, world.worker_of_rank);
  std::optional<ShuffleCursor> cursor;
  if (shuffle_) cursor.emplace(*shuffle_);
  std::size_t o = 0;
  for (i64 id : ids) {
    if (id < 0) {
      if (keep_padding) ids[o++] = -1;
      continue;
    }
    ids[o++] = cursor ? cursor->Map(id) : id;
  }
  ids.resize(o);
  return ids;
}

Result<std::vector<std::int64_t>> EpochWorkerIds(std::span<const std::int64_t> samples_per_shard,
                                                 const SamplerState& state, const World& world, bool keep_padding) {
  TS_ASSIGN_OR_RETURN(EpochPlan plan, EpochPlan::Create(samples_per_shard, state, world));
  return plan.WorkerIds(world, keep_padding);
}

}  // namespace tensorsafe::dataset
