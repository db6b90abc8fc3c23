// The block shuffle of docs/PARTITION.md §4. The order of every random draw
// is part of the specification: do not reorder the loops below.
#include "tensorsafe/dataset/shuffle.h"

#include <algorithm>
#include <string>
#include <utility>

#include "util/checked_math.h"

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

constexpr u64 kGolden = 0x9E3779B97F4A7C15ULL;
// Stream tags (PARTITION.md §4.1): one per kind of draw, so streams never alias.
constexpr u64 kTagShards = 1, kTagSpans = 2, kTagStagger = 3, kTagBlock = 4;

u64 Key(u64 tag, std::initializer_list<u64> args) {
  u64 h = tag;
  for (u64 a : args) h = Mix64(h ^ a);
  return h;
}

// Fisher-Yates from the top: for i = n-1 .. 1 swap a[i] with a[Bounded(i+1)].
template <typename T>
void FisherYates(std::span<T> a, SplitMix64& rng) {
  for (std::size_t i = a.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.Bounded(i));
    std::swap(a[i - 1], a[j]);
  }
}

using tensorsafe::internal::MulDiv;

}  // namespace

std::uint64_t Mix64(std::uint64_t z) {
  z += kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::Next() {
  const u64 out = Mix64(state_);
  state_ += kGolden;
  return out;
}

std::uint64_t SplitMix64::Bounded(std::uint64_t bound) {
  // Lemire 2019: the high word of x * bound, rejecting the low words that
  // would make some results more likely than others.
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
  u64 low = static_cast<u64>(m);
  if (low < bound) {
    const u64 threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * bound;
      low = static_cast<u64>(m);
    }
  }
  return static_cast<u64>(m >> 64);
}

Result<EpochShuffle> EpochShuffle::Create(std::span<const std::int64_t> shard_sizes, std::int64_t num_canonical_nodes,
                                          std::uint64_t seed, std::uint64_t epoch, std::int64_t block_size) {
  constexpr i64 kMaxSamples = i64{1} << 48, kMaxNodes = i64{1} << 20;
  EpochShuffle s;
  std::vector<i64> first(shard_sizes.size());
  for (std::size_t i = 0; i < shard_sizes.size(); ++i) {
    const i64 n = shard_sizes[i];
    if (n < 0 || n >= kMaxSamples || s.num_samples_ + n >= kMaxSamples) {
      return InvalidArgument("shuffle: shard " + std::to_string(i) + " sample count " + std::to_string(n) +
                             " is negative or brings the total to 2^48 or more");
    }
    first[i] = s.num_samples_;
    s.num_samples_ += n;
  }
  if (s.num_samples_ == 0) return InvalidArgument("shuffle of an empty dataset (0 samples)");
  if (num_canonical_nodes < 1 || num_canonical_nodes > kMaxNodes) {
    return InvalidArgument("shuffle: num_canonical_nodes " + std::to_string(num_canonical_nodes) +
                           " is outside [1, 2^20]");
  }
  if (block_size < 1) {
    return InvalidArgument("shuffle: block_size " + std::to_string(block_size) + " is less than 1");
  }
  s.ncn_ = num_canonical_nodes;
  s.block_size_ = block_size;
  s.seed_ = seed;
  s.epoch_ = epoch;

  // §4.2 step 1: the run's shard order, the same every epoch.
  std::vector<i64> order(shard_sizes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<i64>(i);
  SplitMix64 shard_rng(Key(kTagShards, {seed}));
  FisherYates(std::span<i64>(order), shard_rng);

  // Step 2: cut the run order at the canonical node boundaries floor(c N / ncn).
  std::size_t next_shard = 0;
  i64 offset = 0;  // samples of order[next_shard] already given out
  s.span_begin_.reserve(static_cast<std::size_t>(s.ncn_) + 1);
  for (i64 c = 0; c < s.ncn_; ++c) {
    s.span_begin_.push_back(static_cast<i64>(s.spans_.size()));
    i64 remaining = MulDiv(c + 1, s.num_samples_, s.ncn_) - MulDiv(c, s.num_samples_, s.ncn_);
    while (remaining > 0) {
      const i64 shard = order[next_shard];
      const i64 take = std::min(shard_sizes[static_cast<std::size_t>(shard)] - offset, remaining);
      if (take > 0) s.spans_.push_back({first[static_cast<std::size_t>(shard)] + offset, take});
      remaining -= take;
      offset += take;
      if (offset == shard_sizes[static_cast<std::size_t>(shard)]) {
        ++next_shard;
        offset = 0;
      }
    }
    // Step 3: this epoch's order of the node's spans.
    SplitMix64 span_rng(Key(kTagSpans, {seed, epoch, static_cast<u64>(c)}));
    FisherYates(std::span<Span>(s.spans_).subspan(static_cast<std::size_t>(s.span_begin_.back())), span_rng);
    // Step 4: the first block's length, staggered per node.
    SplitMix64 stagger_rng(Key(kTagStagger, {seed, epoch, static_cast<u64>(c)}));
    s.first_block_.push_back(1 + static_cast<i64>(stagger_rng.Bounded(static_cast<u64>(block_size))));
  }
  s.span_begin_.push_back(static_cast<i64>(s.spans_.size()));
  s.starts_.resize(s.spans_.size());
  for (i64 c = 0; c < s.ncn_; ++c) {
    i64 at = 0;
    for (i64 j = s.span_begin_[c]; j < s.span_begin_[c + 1]; ++j) {
      s.starts_[static_cast<std::size_t>(j)] = at;
      at += s.spans_[static_cast<std::size_t>(j)].length;
    }
  }
  return s;
}

std::int64_t EpochShuffle::NodeBegin(std::int64_t c) const { return MulDiv(c, num_samples_, ncn_); }

std::int64_t EpochShuffle::NodeOf(std::int64_t position) const {
  // The largest c with floor(c N / ncn) <= position: ceil((position + 1) ncn / N) - 1.
  const __int128 num = static_cast<__int128>(position + 1) * ncn_ + num_samples_ - 1;
  return std::min<i64>(static_cast<i64>(num / num_samples_) - 1, ncn_ - 1);
}

std::int64_t EpochShuffle::BlockBegin(std::int64_t c, std::int64_t k) const {
  const i64 len = NodeBegin(c + 1) - NodeBegin(c);
  if (k == 0) return 0;
  const __int128 b = first_block_[static_cast<std::size_t>(c)] + static_cast<__int128>(k - 1) * block_size_;
  return b > len ? len : static_cast<i64>(b);
}

std::int64_t EpochShuffle::BlockOf(std::int64_t c, std::int64_t i) const {
  const i64 f = first_block_[static_cast<std::size_t>(c)];
  return i < f ? 0 : 1 + (i - f) / block_size_;
}

template <typename T>
void EpochShuffle::FillBlockT(std::int64_t c, std::int64_t k, std::span<T> out) const {
  const i64 begin = BlockBegin(c, k);
  // The span holding `begin`, then consecutive ids span after span.
  const auto first = starts_.begin() + span_begin_[static_cast<std::size_t>(c)];
  const auto last = starts_.begin() + span_begin_[static_cast<std::size_t>(c) + 1];
  std::size_t j = static_cast<std::size_t>(std::upper_bound(first, last, begin) - starts_.begin()) - 1;
  i64 within = begin - starts_[j];
  std::size_t o = 0;
  while (o < out.size()) {
    const Span& sp = spans_[j];
    const i64 take = std::min<i64>(sp.length - within, static_cast<i64>(out.size() - o));
    for (i64 t = 0; t < take; ++t) out[o++] = static_cast<T>(sp.first_id + within + t);
    ++j;
    within = 0;
  }
  SplitMix64 rng(Key(kTagBlock, {seed_, epoch_, static_cast<u64>(c), static_cast<u64>(k)}));
  FisherYates(out, rng);
}

void EpochShuffle::FillBlock(std::int64_t c, std::int64_t k, std::span<std::int64_t> out) const {
  FillBlockT(c, k, out);
}

namespace {
template <typename T>
Status FillAll(const EpochShuffle& s, std::span<T> out, const auto& fill_block) {
  if (static_cast<i64>(out.size()) != s.num_samples()) {
    return InvalidArgument("shuffle: output holds " + std::to_string(out.size()) + " ids, expected " +
                           std::to_string(s.num_samples()));
  }
  for (i64 c = 0; c < s.num_canonical_nodes(); ++c) {
    const i64 lo = s.NodeBegin(c), len = s.NodeBegin(c + 1) - lo;
    for (i64 k = 0; s.BlockBegin(c, k) < len; ++k) {
      const i64 b0 = s.BlockBegin(c, k), b1 = s.BlockBegin(c, k + 1);
      fill_block(c, k, out.subspan(static_cast<std::size_t>(lo + b0), static_cast<std::size_t>(b1 - b0)));
    }
  }
  return Status::OK();
}
}  // namespace

Status EpochShuffle::Fill(std::span<std::int64_t> out) const {
  return FillAll(*this, out, [this](i64 c, i64 k, std::span<std::int64_t> o) { FillBlockT(c, k, o); });
}

Status EpochShuffle::Fill(std::span<std::uint32_t> out) const {
  if (num_samples_ > (i64{1} << 32)) {
    return InvalidArgument("shuffle: " + std::to_string(num_samples_) + " samples do not fit 32-bit ids");
  }
  return FillAll(*this, out, [this](i64 c, i64 k, std::span<std::uint32_t> o) { FillBlockT(c, k, o); });
}

ShuffleCursor::ShuffleCursor(const EpochShuffle& shuffle)
    : shuffle_(&shuffle), cache_(static_cast<std::size_t>(shuffle.num_canonical_nodes())) {}

std::int64_t ShuffleCursor::Map(std::int64_t position) {
  const i64 c = shuffle_->NodeOf(position);
  const i64 i = position - shuffle_->NodeBegin(c);
  const i64 k = shuffle_->BlockOf(c, i);
  Cached& entry = cache_[static_cast<std::size_t>(c)];
  if (entry.block != k) {
    entry.block = k;
    entry.begin = shuffle_->BlockBegin(c, k);
    entry.ids.resize(static_cast<std::size_t>(shuffle_->BlockBegin(c, k + 1) - entry.begin));
    shuffle_->FillBlock(c, k, entry.ids);
  }
  return entry.ids[static_cast<std::size_t>(i - entry.begin)];
}

}  // namespace tensorsafe::dataset
