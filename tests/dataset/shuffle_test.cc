// The block shuffle (docs/PARTITION.md §4): generator golden values, golden
// permutations (they pin the algorithm across platforms), permutation and
// locality properties, and the lazy cursor against the full fill.
#include "tensorsafe/dataset/shuffle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;

std::vector<i64> Perm(const std::vector<i64>& shards, i64 ncn, std::uint64_t seed, std::uint64_t epoch, i64 block) {
  auto s = EpochShuffle::Create(shards, ncn, seed, epoch, block);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<i64> out(static_cast<std::size_t>(s->num_samples()));
  EXPECT_TRUE(s->Fill(out).ok());
  return out;
}

TEST(SplitMix64, ReferenceOutputs) {
  // Vigna's splitmix64.c seeded with 0.
  SplitMix64 g(0);
  EXPECT_EQ(g.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(g.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(g.Next(), 0x06C45D188009454FULL);
  EXPECT_EQ(Mix64(0), 0xE220A8397B1DCDAFULL);
}

TEST(SplitMix64, BoundedIsInRangeAndRoughlyUniform) {
  SplitMix64 g(42);
  EXPECT_EQ(g.Bounded(1), 0u);
  std::vector<int> hist(6, 0);
  for (int i = 0; i < 60000; ++i) ++hist[g.Bounded(6)];
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  // A bound just above 2^63 rejects about half of the draws; results stay below it.
  const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 1000; ++i) EXPECT_LT(g.Bounded(big), big);
}

// Golden permutations: PARTITION.md §4.4 lists the first one; a change to any
// draw changes them.
TEST(EpochShuffle, GoldenPermutations) {
  EXPECT_EQ(Perm({4, 3, 0, 5}, 2, 9176, 0, 4), (std::vector<i64>{4, 2, 1, 0, 6, 5, 3, 7, 8, 11, 9, 10}));
  EXPECT_EQ(Perm({4, 3, 0, 5}, 2, 9176, 1, 4), (std::vector<i64>{4, 5, 0, 6, 1, 2, 7, 8, 10, 9, 11, 3}));
  EXPECT_EQ(Perm({10}, 1, 1, 0, 100), (std::vector<i64>{6, 2, 4, 7, 5, 1, 8, 9, 3, 0}));
}

TEST(EpochShuffle, PermutationDeterministicAndEpochDependent) {
  std::vector<i64> shards;
  for (int i = 0; i < 40; ++i) shards.push_back(i % 7 == 3 ? 0 : 20 + i % 5);
  for (i64 ncn : {1, 3, 8}) {
    for (i64 block : {1, 7, 64, 100000}) {
      auto a = Perm(shards, ncn, 5, 0, block);
      auto b = Perm(shards, ncn, 5, 0, block);
      auto c = Perm(shards, ncn, 5, 1, block);
      EXPECT_EQ(a, b);
      if (block > 1) EXPECT_NE(a, c);
      auto sorted = a;
      std::sort(sorted.begin(), sorted.end());
      std::vector<i64> iota(sorted.size());
      std::iota(iota.begin(), iota.end(), 0);
      EXPECT_EQ(sorted, iota) << "not a permutation, ncn " << ncn << " block " << block;
    }
  }
}

TEST(EpochShuffle, CanonicalNodesKeepTheirShardsAcrossEpochs) {
  std::vector<i64> shards(30, 10);
  const i64 ncn = 4, n = 300;
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    auto s = EpochShuffle::Create(shards, ncn, 77, epoch, 16);
    ASSERT_TRUE(s.ok());
    std::vector<i64> perm(n);
    ASSERT_TRUE(s->Fill(perm).ok());
    static std::vector<std::set<i64>> first_epoch(ncn);
    for (i64 c = 0; c < ncn; ++c) {
      std::set<i64> ids(perm.begin() + s->NodeBegin(c), perm.begin() + s->NodeBegin(c + 1));
      if (epoch == 0) first_epoch[c] = ids;
      EXPECT_EQ(ids, first_epoch[c]) << "canonical node " << c << " epoch " << epoch;
    }
  }
}

TEST(EpochShuffle, BlocksTouchFewShards) {
  // Shards of 10; block 16: a block spans at most ceil(16 / 10) + 1 whole
  // shards plus the pieces cut at canonical node boundaries.
  std::vector<i64> shards(50, 10);
  auto s = EpochShuffle::Create(shards, 3, 1, 2, 16);
  ASSERT_TRUE(s.ok());
  for (i64 c = 0; c < 3; ++c) {
    const i64 len = s->NodeBegin(c + 1) - s->NodeBegin(c);
    for (i64 k = 0; s->BlockBegin(c, k) < len; ++k) {
      std::vector<i64> ids(static_cast<std::size_t>(s->BlockBegin(c, k + 1) - s->BlockBegin(c, k)));
      s->FillBlock(c, k, ids);
      std::set<i64> touched;
      for (i64 id : ids) touched.insert(id / 10);
      EXPECT_LE(touched.size(), 4u) << "node " << c << " block " << k;
    }
  }
}

TEST(EpochShuffle, CursorMatchesFill) {
  std::vector<i64> shards{7, 0, 13, 25, 1, 9, 30};
  auto s = EpochShuffle::Create(shards, 3, 11, 4, 6);
  ASSERT_TRUE(s.ok());
  std::vector<i64> perm(static_cast<std::size_t>(s->num_samples()));
  ASSERT_TRUE(s->Fill(perm).ok());
  std::vector<std::uint32_t> perm32(perm.size());
  ASSERT_TRUE(s->Fill(perm32).ok());
  ShuffleCursor cursor(*s);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    EXPECT_EQ(cursor.Map(static_cast<i64>(i)), perm[i]);
    EXPECT_EQ(perm32[i], static_cast<std::uint32_t>(perm[i]));
  }
  // Out of order lookups regenerate blocks and still agree.
  for (std::size_t i = perm.size(); i-- > 0;) EXPECT_EQ(cursor.Map(static_cast<i64>(i)), perm[i]);
  for (i64 p = 0; p < s->num_samples(); ++p) {
    const i64 c = s->NodeOf(p);
    EXPECT_LE(s->NodeBegin(c), p);
    EXPECT_LT(p, s->NodeBegin(c + 1));
  }
}

TEST(EpochShuffle, Errors) {
  std::vector<i64> ok{5};
  std::vector<i64> neg{5, -1};
  std::vector<i64> zero{0, 0};
  auto a = EpochShuffle::Create(neg, 1, 0, 0, 4);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("shard 1 sample count -1"), std::string::npos);
  auto b = EpochShuffle::Create(zero, 1, 0, 0, 4);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("empty dataset"), std::string::npos);
  auto c = EpochShuffle::Create(ok, 0, 0, 0, 4);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_canonical_nodes 0"), std::string::npos);
  auto d = EpochShuffle::Create(ok, 1, 0, 0, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("block_size 0"), std::string::npos);
  auto s = EpochShuffle::Create(ok, 1, 0, 0, 4);
  std::vector<i64> small(3);
  Status st = s->Fill(small);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("holds 3 ids, expected 5"), std::string::npos);
}

}  // namespace
}  // namespace tensorsafe::dataset
