// Epoch sampler and resumption state (docs/PARTITION.md §5).
#include "tensorsafe/dataset/sampler.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;
using json = nlohmann::json;
using Kind = SamplerValue::Kind;

// The state's keys in encoding order (PARTITION.md §5.1): version 1 has the
// first kV1Keys, version 2 all of them.
constexpr std::string_view kKeys[] = {"version", "mode", "partition", "epoch", "sample_in_epoch", "seed",
                                      "num_canonical_nodes", "global_batch_size", "shuffle", "shuffle_block_size",
                                      "initial_nodes",
                                      // version 2: WorkerPosition, all null or all set
                                      "worker_num_nodes", "worker_ranks_per_node", "worker_workers_per_rank",
                                      "worker_node", "worker_rank_of_node", "worker_of_rank", "worker_samples"};
constexpr std::size_t kV1Keys = 11;
constexpr std::size_t kNumKeys = std::size(kKeys);
constexpr i64 kMaxGlobalBatch = i64{1} << 40;

std::string WorldCounts(const World& w) {
  return std::to_string(w.num_nodes) + " nodes x " + std::to_string(w.ranks_per_node) + " ranks x " +
         std::to_string(w.workers_per_rank) + " workers";
}

std::string WorkerName(const World& w) {
  return "(node " + std::to_string(w.node) + ", rank " + std::to_string(w.rank_of_node) + ", worker " +
         std::to_string(w.worker_of_rank) + ")";
}

Status BadKey(std::string_view key, const std::string& why) {
  return InvalidArgument("sampler state: key \"" + std::string(key) + "\": " + why);
}

std::string Describe(const SamplerValue& v) {
  switch (v.kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return v.boolean ? "true" : "false";
    case Kind::kInt: return "integer " + std::to_string(v.integer);
    case Kind::kUInt: return "integer " + std::to_string(v.uinteger);
    case Kind::kString: return "string \"" + v.text + "\"";
    case Kind::kOther: return v.text;
  }
  return "?";
}

std::string Range(i64 lo, i64 hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

Result<i64> GetInt(std::string_view key, const SamplerValue& v, i64 lo, i64 hi) {
  if (v.kind == Kind::kUInt) return BadKey(key, std::to_string(v.uinteger) + " is outside " + Range(lo, hi));
  if (v.kind != Kind::kInt) return BadKey(key, "expected an integer, got " + Describe(v));
  if (v.integer < lo || v.integer > hi) return BadKey(key, std::to_string(v.integer) + " is outside " + Range(lo, hi));
  return v.integer;
}

Result<std::string> GetString(std::string_view key, const SamplerValue& v) {
  if (v.kind != Kind::kString) return BadKey(key, "expected a string, got " + Describe(v));
  return v.text;
}

// Fields of a parsed JSON object (the parser callback has refused duplicates).
SamplerFields FieldsOfJson(const json& j) {
  SamplerFields out;
  for (const auto& item : j.items()) {
    const json& v = item.value();
    SamplerValue f;
    if (v.is_null())
      f = SamplerValue::Null();
    else if (v.is_boolean())
      f = SamplerValue::Bool(v.get<bool>());
    else if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      f = SamplerValue::UInt(v.get<std::uint64_t>());
    else if (v.is_number_integer())
      f = SamplerValue::Int(v.get<i64>());
    else if (v.is_string())
      f = SamplerValue::String(v.get<std::string>());
    else
      f = SamplerValue::Other(std::string(v.type_name()) + " " + v.dump());
    out.emplace_back(item.key(), std::move(f));
  }
  return out;
}

}  // namespace

std::int64_t DefaultShuffleBlockSize(std::int64_t num_canonical_nodes) {
  return std::max<i64>(4'000'000 / std::max<i64>(num_canonical_nodes, 1), i64{1} << 18);
}

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

SamplerFields SamplerStateToFields(const SamplerState& s) {
  const auto opt = [](const std::optional<i64>& v) { return v ? SamplerValue::Int(*v) : SamplerValue::Null(); };
  const SamplerValue seed = s.seed > static_cast<std::uint64_t>(INT64_MAX)
                                ? SamplerValue::UInt(s.seed)
                                : SamplerValue::Int(static_cast<i64>(s.seed));
  SamplerFields f = {
      {"version", SamplerValue::Int(SamplerState::kVersion)},
      {"mode", SamplerValue::String(std::string(PartitionModeName(s.mode)))},
      {"partition", SamplerValue::String(std::string(PartitionAlgoName(s.partition)))},
      {"epoch", SamplerValue::Int(s.epoch)},
      {"sample_in_epoch", SamplerValue::Int(s.sample_in_epoch)},
      {"seed", seed},
      {"num_canonical_nodes", SamplerValue::Int(s.num_canonical_nodes)},
      {"global_batch_size", SamplerValue::Int(s.global_batch_size)},
      {"shuffle", SamplerValue::Bool(s.shuffle)},
      {"shuffle_block_size", opt(s.shuffle_block_size)},
      {"initial_nodes", opt(s.initial_nodes)},
  };
  const std::optional<WorkerPosition>& w = s.worker;
  const i64 vals[] = {w ? w->world.num_nodes : 0, w ? w->world.ranks_per_node : 0, w ? w->world.workers_per_rank : 0,
                      w ? w->world.node : 0,      w ? w->world.rank_of_node : 0,   w ? w->world.worker_of_rank : 0,
                      w ? w->samples : 0};
  for (std::size_t k = kV1Keys; k < kNumKeys; ++k) {
    f.emplace_back(std::string(kKeys[k]), w ? SamplerValue::Int(vals[k - kV1Keys]) : SamplerValue::Null());
  }
  return f;
}

Result<SamplerState> SamplerStateFromFields(const SamplerFields& fields) {
  // Each key once, known; then the version says which keys must be there.
  const SamplerValue* by_key[kNumKeys] = {};
  for (const auto& [key, value] : fields) {
    std::size_t k = 0;
    while (k < kNumKeys && kKeys[k] != key) ++k;
    if (k == kNumKeys) return BadKey(key, "is not a sampler state key");
    if (by_key[k]) return BadKey(key, "appears more than once");
    by_key[k] = &value;
  }
  if (!by_key[0]) return BadKey("version", "is missing");
  TS_ASSIGN_OR_RETURN(i64 version, GetInt("version", *by_key[0], 0, i64{1} << 62));
  if (version != 1 && version != 2) {
    return BadKey("version", std::to_string(version) + " is not supported (expected 1 or 2)");
  }
  const std::size_t wanted = version == 1 ? kV1Keys : kNumKeys;
  for (std::size_t k = 0; k < kNumKeys; ++k) {
    if (k < wanted && !by_key[k]) return BadKey(kKeys[k], "is missing");
    if (k >= wanted && by_key[k]) return BadKey(kKeys[k], "is not a version 1 sampler state key");
  }
  const auto at = [&](std::string_view key) -> const SamplerValue& {
    std::size_t k = 0;
    while (kKeys[k] != key) ++k;
    return *by_key[k];
  };
  SamplerState s;
  TS_ASSIGN_OR_RETURN(std::string mode, GetString("mode", at("mode")));
  auto m = ParsePartitionMode(mode);
  if (!m.ok()) return BadKey("mode", m.status().message());
  s.mode = *m;
  TS_ASSIGN_OR_RETURN(std::string algo, GetString("partition", at("partition")));
  auto a = ParsePartitionAlgo(algo);
  if (!a.ok()) return BadKey("partition", a.status().message());
  s.partition = *a;
  TS_ASSIGN_OR_RETURN(s.epoch, GetInt("epoch", at("epoch"), 0, i64{1} << 62));
  TS_ASSIGN_OR_RETURN(s.sample_in_epoch, GetInt("sample_in_epoch", at("sample_in_epoch"), 0, kMaxPartitionSamples * 2));
  const SamplerValue& seed = at("seed");
  if (seed.kind == Kind::kUInt) {
    s.seed = seed.uinteger;
  } else if (seed.kind == Kind::kInt && seed.integer >= 0) {
    s.seed = static_cast<std::uint64_t>(seed.integer);
  } else {
    return BadKey("seed", "expected an integer in [0, 2^64), got " +
                              (seed.kind == Kind::kInt ? std::to_string(seed.integer) : Describe(seed)));
  }
  TS_ASSIGN_OR_RETURN(s.num_canonical_nodes, GetInt("num_canonical_nodes", at("num_canonical_nodes"), 1, kMaxWorldDim));
  TS_ASSIGN_OR_RETURN(s.global_batch_size, GetInt("global_batch_size", at("global_batch_size"), 0, kMaxGlobalBatch));
  const SamplerValue& shuffle = at("shuffle");
  if (shuffle.kind != Kind::kBool) return BadKey("shuffle", "expected true or false, got " + Describe(shuffle));
  s.shuffle = shuffle.boolean;
  // Version 1 always named the block size; version 2 may leave it to the default.
  if (version == 1 || at("shuffle_block_size").kind != Kind::kNull) {
    TS_ASSIGN_OR_RETURN(s.shuffle_block_size,
                        GetInt("shuffle_block_size", at("shuffle_block_size"), 1, kMaxPartitionSamples));
  }
  if (at("initial_nodes").kind != Kind::kNull) {
    TS_ASSIGN_OR_RETURN(i64 initial, GetInt("initial_nodes", at("initial_nodes"), 1, kMaxWorldDim));
    s.initial_nodes = initial;
  }
  if (version == 2) {
    std::size_t nulls = 0;
    for (std::size_t k = kV1Keys; k < kNumKeys; ++k) nulls += by_key[k]->kind == Kind::kNull;
    if (nulls != 0 && nulls != kNumKeys - kV1Keys) {
      for (std::size_t k = kV1Keys; k < kNumKeys; ++k) {
        if (by_key[k]->kind == Kind::kNull) return BadKey(kKeys[k], "is null while other worker keys are set");
      }
    }
    if (nulls == 0) {
      WorkerPosition w;
      i64* dims[] = {&w.world.num_nodes, &w.world.ranks_per_node, &w.world.workers_per_rank};
      for (std::size_t k = 0; k < 3; ++k) {
        TS_ASSIGN_OR_RETURN(*dims[k], GetInt(kKeys[kV1Keys + k], *by_key[kV1Keys + k], 1, kMaxWorldDim));
      }
      i64* coords[] = {&w.world.node, &w.world.rank_of_node, &w.world.worker_of_rank};
      for (std::size_t k = 0; k < 3; ++k) {
        // Each coordinate below its count (checked against the count's key).
        TS_ASSIGN_OR_RETURN(*coords[k], GetInt(kKeys[kV1Keys + 3 + k], *by_key[kV1Keys + 3 + k], 0, *dims[k] - 1));
      }
      TS_ASSIGN_OR_RETURN(w.samples, GetInt("worker_samples", at("worker_samples"), 0, kMaxPartitionSamples * 2));
      s.worker = w;
    }
  }
  return s;
}

std::string EncodeSamplerState(const SamplerState& s) {
  // Built by hand so the key order is the documented one (PARTITION.md §5.1).
  std::string out = "{";
  for (const auto& [key, v] : SamplerStateToFields(s)) {
    if (out.size() > 1) out += ",";
    out += "\"" + key + "\":";
    switch (v.kind) {
      case Kind::kNull: out += "null"; break;
      case Kind::kBool: out += v.boolean ? "true" : "false"; break;
      case Kind::kInt: out += std::to_string(v.integer); break;
      case Kind::kUInt: out += std::to_string(v.uinteger); break;
      case Kind::kString: out += "\"" + v.text + "\""; break;  // mode and partition names: no escapes needed
      case Kind::kOther: break;                                // never produced by SamplerStateToFields
    }
  }
  return out + "}";
}

Result<SamplerState> DecodeSamplerState(std::string_view text) {
  // A state is about 500 bytes; refuse megabytes of JSON before parsing them.
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
  if (!j.is_object())
    return InvalidArgument(std::string("sampler state: expected a JSON object, got ") + j.type_name());
  if (!duplicate.empty()) return BadKey(duplicate, "appears more than once");
  return SamplerStateFromFields(FieldsOfJson(j));
}

Status CheckSamplerState(const SamplerState& state) {
  if (state.mode == PartitionMode::kSeed) {
    if (state.shuffle) return Unsupported("sampler: seed mode (Composer's get_partition) does not shuffle");
    if (state.sample_in_epoch != 0) {
      return Unsupported("sampler: seed mode cannot resume mid-epoch (sample_in_epoch " +
                         std::to_string(state.sample_in_epoch) + ")");
    }
  } else if (state.global_batch_size < 1) {
    return InvalidArgument("sampler: elastic mode needs a global batch size >= 1, not " +
                           std::to_string(state.global_batch_size));
  }
  return Status::OK();
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
      state.global_batch_size % ranks != 0 || (state.mode == PartitionMode::kElastic && state.global_batch_size == 0)) {
    return InvalidArgument("sampler: global batch size " + std::to_string(state.global_batch_size) +
                           " is not a positive multiple of the " + std::to_string(ranks) + " ranks (" +
                           std::to_string(counts.num_nodes) + " nodes x " + std::to_string(counts.ranks_per_node) +
                           ")");
  }
  plan.rank_batch_ = state.global_batch_size / ranks;
  if (state.worker) {
    const World& saved = state.worker->world;
    if (saved.num_nodes != counts.num_nodes || saved.ranks_per_node != counts.ranks_per_node ||
        saved.workers_per_rank != counts.workers_per_rank) {
      return InvalidArgument("sampler: the state holds one DataLoader worker's position, saved with " +
                             WorldCounts(saved) + "; it resumes only that world, not " + WorldCounts(counts) +
                             " (a global state, sample_in_epoch alone, resumes any world)");
    }
  }
  if (state.epoch < 0) return InvalidArgument("sampler: epoch " + std::to_string(state.epoch) + " is negative");
  TS_RETURN_IF_ERROR(CheckSamplerState(state));
  if (state.mode == PartitionMode::kSeed) return plan;
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
                                             static_cast<std::uint64_t>(state.epoch), state.block_size()));
    plan.shuffle_ = std::move(shuffle);
  }
  return plan;
}

Result<std::vector<std::int64_t>> EpochPlan::WorkerIds(const World& world, bool keep_padding) const {
  TS_RETURN_IF_ERROR(world.Validate());
  if (world.num_nodes != world_.num_nodes || world.ranks_per_node != world_.ranks_per_node ||
      world.workers_per_rank != world_.workers_per_rank) {
    return InvalidArgument("sampler: the world's counts differ from the plan's (" + std::to_string(world_.num_nodes) +
                           " nodes x " + std::to_string(world_.ranks_per_node) + " ranks x " +
                           std::to_string(world_.workers_per_rank) + " workers)");
  }
  if (state_.worker) {
    const World& saved = state_.worker->world;
    if (saved.node != world.node || saved.rank_of_node != world.rank_of_node ||
        saved.worker_of_rank != world.worker_of_rank) {
      return InvalidArgument("sampler: the state holds the position of worker " + WorkerName(saved) +
                             "; it resumes only that worker, not " + WorkerName(world));
    }
    if (keep_padding) return InvalidArgument("sampler: keep_padding with a worker position");
  }
  TS_ASSIGN_OR_RETURN(std::vector<i64> ids, AllWorkerIds(world, keep_padding));
  if (state_.worker) {
    const i64 skip = state_.worker->samples;
    if (skip > static_cast<i64>(ids.size())) {
      return InvalidArgument("sampler: worker_samples " + std::to_string(skip) + " is more than the " +
                             std::to_string(ids.size()) + " ids of worker " + WorkerName(world) + " from sample " +
                             std::to_string(state_.sample_in_epoch));
    }
    ids.erase(ids.begin(), ids.begin() + skip);
  }
  return ids;
}

Result<std::vector<std::int64_t>> EpochPlan::AllWorkerIds(const World& world, bool keep_padding) const {
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
