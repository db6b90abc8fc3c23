// The seeded epoch shuffle (docs/PARTITION.md §4): a permutation of the
// canonical sample positions 0..N-1 that keeps each canonical node's range of
// positions within that node's own shards, so the elastic partition keeps its
// world-size independence, and that reorders samples only inside blocks of
// consecutive shards, so reads stay mostly sequential.
//
// Every random draw comes from SplitMix64 with an unbiased bounded draw
// (Lemire's multiply-and-reject), fully specified in PARTITION.md §4.1: the
// same inputs give the same permutation on every platform and compiler.
//
// Thread safety: an EpochShuffle is immutable after Create() and may be
// shared; a ShuffleCursor is one thread's (it caches blocks).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// The generator of PARTITION.md §4.1, public so tests and other languages can
// check their reimplementation against it.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t Next();
  // Uniform in [0, bound); bound >= 1.
  std::uint64_t Bounded(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

// SplitMix64's output function applied to x (one step from state x).
std::uint64_t Mix64(std::uint64_t x);

// Maps canonical positions to sample ids for one epoch.
class EpochShuffle {
 public:
  // `shard_sizes`: samples per shard in dataset order (zeros allowed).
  // Errors: kInvalidArgument for a negative shard size, a total of 0 or >= 2^48,
  // num_canonical_nodes outside [1, 2^20], block_size < 1.
  static Result<EpochShuffle> Create(std::span<const std::int64_t> shard_sizes, std::int64_t num_canonical_nodes,
                                     std::uint64_t seed, std::uint64_t epoch, std::int64_t block_size);

  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t num_canonical_nodes() const { return ncn_; }

  // The whole permutation: out[position] = sample id. `out.size()` must be
  // num_samples() (kInvalidArgument otherwise; for uint32 also when
  // num_samples() > 2^32).
  Status Fill(std::span<std::int64_t> out) const;
  Status Fill(std::span<std::uint32_t> out) const;

  // Canonical node c's positions [lo, hi).
  std::int64_t NodeBegin(std::int64_t c) const;
  // The canonical node whose range holds `position` (0 <= position < N).
  std::int64_t NodeOf(std::int64_t position) const;
  // Block k of node c as positions [begin, end) relative to NodeBegin(c);
  // and the block holding relative position i.
  std::int64_t BlockBegin(std::int64_t c, std::int64_t k) const;
  std::int64_t BlockOf(std::int64_t c, std::int64_t i) const;
  // Sample ids of block k of node c, shuffled (the block's slice of Fill()).
  void FillBlock(std::int64_t c, std::int64_t k, std::span<std::int64_t> out) const;

 private:
  struct Span {
    std::int64_t first_id;  // sample id of the span's first sample
    std::int64_t length;
  };
  template <typename T>
  void FillBlockT(std::int64_t c, std::int64_t k, std::span<T> out) const;

  std::int64_t num_samples_ = 0, ncn_ = 1, block_size_ = 1;
  std::uint64_t seed_ = 0, epoch_ = 0;
  // Per canonical node: its spans in this epoch's order (spans_[span_begin_[c] ..
  // span_begin_[c+1])), their prefix sums (starts_, relative to the node), and
  // the length of its first (staggered) block.
  std::vector<Span> spans_;
  std::vector<std::int64_t> starts_;
  std::vector<std::int64_t> span_begin_;
  std::vector<std::int64_t> first_block_;
};

// Looks positions up one at a time, generating and caching one block per
// canonical node: memory O(num_canonical_nodes x block_size) instead of O(N).
// Fastest when positions increase within each canonical node, as a worker's do.
class ShuffleCursor {
 public:
  explicit ShuffleCursor(const EpochShuffle& shuffle);
  // Precondition: 0 <= position < num_samples().
  std::int64_t Map(std::int64_t position);

 private:
  struct Cached {
    std::int64_t block = -1, begin = 0;
    std::vector<std::int64_t> ids;
  };
  const EpochShuffle* shuffle_;
  std::vector<Cached> cache_;
};

}  // namespace tensorsafe::dataset
