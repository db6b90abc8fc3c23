// Seed (Composer) and elastic (MosaicML orig/relaxed) partitions. Every step
// below names its section of docs/PARTITION.md; the numpy slicing of the
// reference is replaced by closed forms so that one element costs O(1).
#include "tensorsafe/dataset/partition.h"

#include <algorithm>
#include <string>

#include "util/checked_math.h"

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;

std::string S(i64 v) { return std::to_string(v); }

Status CheckCount(std::string_view what, i64 v, i64 max) {
  if (v < 1 || v > max) {
    return InvalidArgument(std::string(what) + " " + S(v) + " is outside [1, " + S(max) + "]");
  }
  return Status::OK();
}

// a * b / c without overflow of the product (a*b may exceed 2^63).
using tensorsafe::internal::MulDiv;

// Python's slice normalisation of [start, stop) (both negative here) on a
// dimension of `len`: negative indices count from the end, then clamp.
i64 NormalizeIndex(i64 index, i64 len) {
  if (index < 0) index += len;
  return std::clamp<i64>(index, 0, len);
}

}  // namespace

Status World::Validate() const {
  TS_RETURN_IF_ERROR(CheckCount("num_nodes", num_nodes, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("ranks_per_node", ranks_per_node, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("workers_per_rank", workers_per_rank, kMaxWorldDim));
  if (node < 0 || node >= num_nodes) {
    return InvalidArgument("node " + S(node) + " is outside [0, " + S(num_nodes) + ")");
  }
  if (rank_of_node < 0 || rank_of_node >= ranks_per_node) {
    return InvalidArgument("rank_of_node " + S(rank_of_node) + " is outside [0, " + S(ranks_per_node) + ")");
  }
  if (worker_of_rank < 0 || worker_of_rank >= workers_per_rank) {
    return InvalidArgument("worker_of_rank " + S(worker_of_rank) + " is outside [0, " + S(workers_per_rank) + ")");
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Mode 1: seed. PARTITION.md §2.

namespace {

// §2.1: part `part` of `total` items over `parts` parts; Composer's sizes
// ceil((total - p) / parts) are floor(total / parts) plus one for the first
// total % parts parts, so the prefix sum has a closed form.
struct Range {
  i64 min_id, max_id, size;
};
Range SplitRange(i64 start, i64 total, i64 part, i64 parts) {
  const i64 base = total / parts, rem = total % parts;
  const auto prefix = [&](i64 k) { return k * base + std::min(k, rem); };
  return {start + prefix(part), start + prefix(part + 1) - 1, base + (part < rem ? 1 : 0)};
}

}  // namespace

Result<SeedPartition> GetSeedPartition(std::span<const std::int64_t> samples_per_shard, const World& world,
                                       std::optional<std::int64_t> batch_size) {
  TS_RETURN_IF_ERROR(world.Validate());
  std::vector<i64> ends(samples_per_shard.size());
  i64 total = 0;
  for (std::size_t s = 0; s < samples_per_shard.size(); ++s) {
    const i64 n = samples_per_shard[s];
    if (n < 0 || n >= kMaxPartitionSamples || total + n >= kMaxPartitionSamples) {
      return InvalidArgument("shard " + S(static_cast<i64>(s)) + ": sample count " + S(n) +
                             " is negative or brings the total to 2^48 or more");
    }
    total += n;
    ends[s] = total;
  }
  if (total == 0) return InvalidArgument("seed partition of an empty dataset (0 samples)");
  const i64 bs = batch_size.value_or(0);
  if (bs < 0 || bs > kMaxWorldDim) {
    return InvalidArgument("batch size hint " + S(bs) + " is outside [0, " + S(kMaxWorldDim) + "]");
  }

  // §2.2: the device range, extended one sample backwards when short.
  const i64 num_devices = world.num_ranks();
  Range device = SplitRange(0, total, world.global_rank(), num_devices);
  const i64 expected = (total + num_devices - 1) / num_devices;
  if (device.size < expected) {  // always expected - 1 (SplitRange's sizes differ by at most one)
    device.min_id -= 1;
    device.size += 1;
  }

  const i64 workers = world.workers_per_rank, worker = world.worker_of_rank;
  i64 min_id = 0, max_id = 0;
  if (bs == 0) {  // §2.3
    const Range r = SplitRange(device.min_id, device.size, worker, workers);
    min_id = r.min_id;
    max_id = r.max_id;
  } else {  // §2.4: whole batches per worker; the incomplete one goes to the worker read last
    const i64 device_batches = (device.size + bs - 1) / bs;
    const i64 missing = device_batches * bs - device.size;
    const Range b = SplitRange(0, device_batches, worker, workers);
    const i64 incomplete = (device_batches + workers - 1) % workers;
    const i64 min_offset = worker <= incomplete ? 0 : missing;
    const i64 max_offset = worker < incomplete ? 0 : missing;
    min_id = device.min_id + b.min_id * bs - min_offset;
    max_id = device.min_id + (b.max_id + 1) * bs - max_offset - 1;
  }
  if (min_id > max_id || min_id < 0 || max_id >= total) {
    return InvalidArgument("seed partition: worker " + S(worker) + " of device " + S(world.global_rank()) +
                           " gets an empty range (samples [" + S(min_id) + ", " + S(max_id) + "] of " + S(total) +
                           "; " + S(num_devices) + " devices x " + S(workers) + " workers x batch " + S(bs) +
                           " needs more samples)");
  }

  // §2.5: shards overlapping the range, and the single-downloader rule.
  const auto shard_of = [&](i64 id) {
    return static_cast<i64>(std::upper_bound(ends.begin(), ends.end(), id) - ends.begin());
  };
  SeedPartition p;
  p.min_id = min_id;
  p.max_id = max_id;
  p.shard_begin = shard_of(min_id);
  const i64 max_shard = shard_of(max_id);
  p.shard_end = max_shard + 1;
  const bool last_on_node = world.node_worker() + 1 == world.ranks_per_node * workers;
  const bool ends_at_shard_end = max_id + 1 < total && shard_of(max_id + 1) != max_shard;
  p.download_end = (last_on_node || ends_at_shard_end) ? p.shard_end : p.shard_end - 1;
  return p;
}

// ---------------------------------------------------------------------------
// Mode 2: elastic. PARTITION.md §3.

std::string_view PartitionAlgoName(PartitionAlgo algo) {
  switch (algo) {
    case PartitionAlgo::kOrig: return "orig";
    case PartitionAlgo::kRelaxed: return "relaxed";
  }
  return "?";
}

Result<PartitionAlgo> ParsePartitionAlgo(std::string_view name) {
  if (name == "orig") return PartitionAlgo::kOrig;
  if (name == "relaxed") return PartitionAlgo::kRelaxed;
  return InvalidArgument("unknown partition algorithm \"" + std::string(name) + "\" (expected orig or relaxed)");
}

Result<ElasticPartition::Orig> ElasticPartition::MakeOrig(i64 n, i64 ncn, i64 nodes, i64 ranks, i64 workers, i64 bs,
                                                          i64 drop) {
  // §3.1: one of the node counts divides the other.
  if ((ncn < nodes && nodes % ncn != 0) || (nodes < ncn && ncn % nodes != 0)) {
    return InvalidArgument("num_canonical_nodes " + S(ncn) + " and physical nodes " + S(nodes) +
                           ": neither divides the other");
  }
  Orig o;
  o.n = n;
  o.ncn = ncn;
  o.nodes = nodes;
  o.ranks = ranks;
  o.workers = workers;
  o.bs = bs;
  o.drop = drop - drop % nodes;  // rounded down to whole rounds over the nodes

  // §3.2: rows of ceil(N / ncn), padded to a multiple of nodes / ncn.
  o.spcn = (n + ncn - 1) / ncn;
  i64 ratio = 0;
  if (ncn < nodes) {
    ratio = nodes / ncn;
    if (o.spcn % ratio) o.padding = ratio - o.spcn % ratio;
  }
  o.width = o.spcn + o.padding;
  o.tiled = !(n > ncn || (n == ncn && ncn >= nodes));
  if (!o.tiled && o.padding) {
    // numpy: ids[:, -p:] = ids[:, -2p - ratio + 1 : -p - ratio + 1].
    const i64 start = NormalizeIndex(-2 * o.padding - ratio + 1, o.width);
    const i64 stop = NormalizeIndex(-o.padding - ratio + 1, o.width);
    const i64 len = std::max<i64>(0, stop - start);
    if (len != o.padding) {  // numpy broadcasts only equal lengths (or 1, impossible here: §3.6)
      return InvalidArgument("orig partition of " + S(n) + " samples: " + S(o.spcn) +
                             " samples per canonical node cannot be padded by " + S(o.padding) + " over " + S(nodes) +
                             " physical nodes (" + S(ncn) + " canonical); MosaicML fails to broadcast here too");
    }
    o.pad_src = start;
  }

  // §3.4: drop, then deal round-robin over the physical nodes.
  const i64 total = ncn * o.width;  // a multiple of nodes by the divisibility rule
  const i64 rest = o.drop >= total ? 0 : total - o.drop;
  o.per_node = rest / nodes;
  // §3.5: pad each node to a multiple of its ranks, then to whole worker rounds.
  if (o.per_node % ranks) {
    o.rank_pad = ranks - o.per_node % ranks;
    o.rank_pad_tail = ranks + o.rank_pad - 1 <= o.per_node;
  }
  o.per_rank = (o.per_node + o.rank_pad) / ranks;
  const i64 round = workers * bs;
  o.batches = (o.per_rank + round - 1) / round;
  return o;
}

i64 ElasticPartition::Orig::Canonical(i64 t) const {
  const i64 c = t % ncn, j = t / ncn;  // transpose + flatten of the (ncn, width) matrix
  if (tiled) return (c * width + j) % n;
  const i64 col = j < spcn ? j : pad_src + (j - spcn);
  const i64 row_start = MulDiv(c, n, ncn);
  const i64 row_stop = MulDiv(c + 1, n, ncn);
  i64 id = row_start + col;
  if (col == spcn - 1 && row_stop - row_start < spcn) id -= 1;  // short row repeats its last id
  return id;
}

i64 ElasticPartition::Orig::AtRank(i64 node, i64 rank, i64 i) const {
  if (i >= per_rank) return -1;
  const i64 j = i * ranks + rank;  // position within the node's padded sequence
  i64 g = j;
  if (j >= per_node) {
    const i64 k = j - per_node;
    g = rank_pad_tail ? per_node - ranks - rank_pad + 1 + k : k % per_node;
  }
  return Canonical(drop + g * nodes + node);
}

i64 ElasticPartition::Orig::At(i64 node, i64 rank, i64 worker, i64 batch, i64 slot) const {
  return AtRank(node, rank, (batch * workers + worker) * bs + slot);
}

Result<ElasticPartition> ElasticPartition::Create(const ElasticParams& p) {
  if (p.num_samples < 1 || p.num_samples >= kMaxPartitionSamples) {
    return InvalidArgument("num_samples " + S(p.num_samples) + " is outside [1, 2^48)");
  }
  TS_RETURN_IF_ERROR(CheckCount("num_canonical_nodes", p.num_canonical_nodes, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("num_nodes", p.num_nodes, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("ranks_per_node", p.ranks_per_node, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("workers_per_rank", p.workers_per_rank, kMaxWorldDim));
  TS_RETURN_IF_ERROR(CheckCount("batch_size", p.batch_size, kMaxWorldDim));
  if (p.drop_first < 0) return InvalidArgument("drop_first " + S(p.drop_first) + " is negative");
  // get_partitions(): "repeated samples" is world - N % world, a full world when divisible.
  const i64 world = p.num_nodes * p.ranks_per_node;
  const i64 repeated = world - p.num_samples % world;
  if (p.drop_first > p.num_samples + repeated) {
    return InvalidArgument("resuming further into the epoch (drop_first " + S(p.drop_first) +
                           ") than it has samples (" + S(p.num_samples) + ")");
  }
  ElasticPartition out;
  out.nodes_ = p.num_nodes;
  out.ranks_ = p.ranks_per_node;
  out.workers_ = p.workers_per_rank;
  out.bs_ = p.batch_size;
  const i64 ncn = p.num_canonical_nodes, nodes = p.num_nodes;
  const bool divisible = (nodes <= ncn && ncn % nodes == 0) || (nodes > ncn && nodes % ncn == 0);
  if (p.algo == PartitionAlgo::kOrig || !p.initial_nodes || divisible) {
    TS_ASSIGN_OR_RETURN(out.orig_, MakeOrig(p.num_samples, ncn, nodes, p.ranks_per_node, p.workers_per_rank,
                                            p.batch_size, p.drop_first));
    out.shape_ = {nodes, p.ranks_per_node, p.workers_per_rank, out.orig_.batches, p.batch_size};
  } else {
    // §3.7 relaxed: partition for the initial world at the same global batch,
    // then re-cut its traversal order for the current world.
    const i64 initial = *p.initial_nodes;
    TS_RETURN_IF_ERROR(CheckCount("initial_nodes", initial, kMaxWorldDim));
    const i64 global_batch = world * p.batch_size;
    const i64 initial_devices = initial * p.ranks_per_node;
    if (global_batch % initial_devices) {
      return InvalidArgument("relaxed partition: global batch " + S(global_batch) +
                             " is not divisible by the initial " + S(initial_devices) + " devices");
    }
    TS_ASSIGN_OR_RETURN(out.orig_, MakeOrig(p.num_samples, ncn, initial, p.ranks_per_node, p.workers_per_rank,
                                            global_batch / initial_devices, p.drop_first));
    out.relaxed_ = true;
    // Same element count: initial * ranks * workers * batches * (global / initial devices).
    out.shape_ = {nodes, p.ranks_per_node, p.workers_per_rank, out.orig_.batches, p.batch_size};
  }
  std::uint64_t size = 1;
  for (i64 d : out.shape_) {
    auto m = tensorsafe::internal::CheckedMul(size, static_cast<std::uint64_t>(d));
    if (!m || *m > (std::uint64_t{1} << 62)) {
      return LimitExceeded("elastic partition of " + S(p.num_samples) + " samples: the 5-D shape overflows");
    }
    size = *m;
  }
  return out;
}

std::int64_t ElasticPartition::size() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3] * shape_[4]; }

std::int64_t ElasticPartition::At(i64 node, i64 rank, i64 worker, i64 batch, i64 slot) const {
  if (!relaxed_) return orig_.At(node, rank, worker, batch, slot);
  // Index in the new (batches, workers, nodes, ranks, bs) traversal order ...
  i64 f = (((batch * workers_ + worker) * nodes_ + node) * ranks_ + rank) * bs_ + slot;
  // ... is the same index in the initial partition's traversal order.
  const i64 s = f % orig_.bs;
  f /= orig_.bs;
  const i64 r = f % orig_.ranks;
  f /= orig_.ranks;
  const i64 n = f % orig_.nodes;
  f /= orig_.nodes;
  const i64 w = f % orig_.workers;
  const i64 b = f / orig_.workers;
  return orig_.At(n, r, w, b, s);
}

std::vector<std::int64_t> ElasticPartition::WorkerIds(i64 node, i64 rank, i64 worker) const {
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(shape_[3] * shape_[4]));
  for (i64 b = 0; b < shape_[3]; ++b) {
    for (i64 s = 0; s < shape_[4]; ++s) out.push_back(At(node, rank, worker, b, s));
  }
  return out;
}

Result<std::vector<std::int64_t>> ElasticPartition::Materialize(std::int64_t max_elements) const {
  if (size() > max_elements) {
    return LimitExceeded("elastic partition has " + S(size()) + " elements, more than the limit " + S(max_elements));
  }
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(size()));
  for (i64 n = 0; n < shape_[0]; ++n) {
    for (i64 r = 0; r < shape_[1]; ++r) {
      for (i64 w = 0; w < shape_[2]; ++w) {
        auto ids = WorkerIds(n, r, w);
        out.insert(out.end(), ids.begin(), ids.end());
      }
    }
  }
  return out;
}

}  // namespace tensorsafe::dataset
