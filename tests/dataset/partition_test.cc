// Seed (Composer) and elastic (MosaicML orig/relaxed) partitions:
// documented examples, a golden table made by the reference, and properties
// over many worlds (docs/PARTITION.md §2, §3).
#include "tensorsafe/dataset/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;

World W(i64 nodes, i64 ranks, i64 workers, i64 node = 0, i64 rank = 0, i64 worker = 0) {
  World w;
  w.num_nodes = nodes;
  w.ranks_per_node = ranks;
  w.workers_per_rank = workers;
  w.node = node;
  w.rank_of_node = rank;
  w.worker_of_rank = worker;
  return w;
}

std::pair<i64, i64> SeedRange(i64 total, const World& w, std::optional<i64> bs) {
  std::vector<i64> shards{total};
  auto p = GetSeedPartition(shards, w, bs);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::pair{p->min_id, p->max_id} : std::pair{i64{-1}, i64{-1}};
}

// ---------------------------------------------------------------- seed

TEST(SeedPartition, DocstringExample) {
  // Composer's docstring: 8 samples, 3 workers, batch 2.
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 0), 2), (std::pair<i64, i64>{0, 3}));
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 1), 2), (std::pair<i64, i64>{4, 5}));
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 2), 2), (std::pair<i64, i64>{6, 7}));
  // Without the hint: [0,1,2], [3,4,5], [6,7].
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 0), std::nullopt), (std::pair<i64, i64>{0, 2}));
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 1), std::nullopt), (std::pair<i64, i64>{3, 5}));
  EXPECT_EQ(SeedRange(8, W(1, 1, 3, 0, 0, 2), 0), (std::pair<i64, i64>{6, 7}));  // 0 = no hint
}

TEST(SeedPartition, TenSamplesThreeDevicesRepeatBoundaries) {
  EXPECT_EQ(SeedRange(10, W(1, 3, 1, 0, 0), std::nullopt), (std::pair<i64, i64>{0, 3}));
  EXPECT_EQ(SeedRange(10, W(1, 3, 1, 0, 1), std::nullopt), (std::pair<i64, i64>{3, 6}));
  EXPECT_EQ(SeedRange(10, W(1, 3, 1, 0, 2), std::nullopt), (std::pair<i64, i64>{6, 9}));
  // Devices are global: 3 nodes x 1 rank gives the same ranges.
  EXPECT_EQ(SeedRange(10, W(3, 1, 1, 2, 0), std::nullopt), (std::pair<i64, i64>{6, 9}));
}

TEST(SeedPartition, EmptyWorkerIsInvalidArgument) {
  std::vector<i64> shards{3};
  auto p = GetSeedPartition(shards, W(1, 1, 4, 0, 0, 3), std::nullopt);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("worker 3 of device 0 gets an empty range"), std::string::npos)
      << p.status().message();
  std::vector<i64> none{0, 0};
  auto e = GetSeedPartition(none, W(1, 1, 1), std::nullopt);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("empty dataset"), std::string::npos);
  std::vector<i64> negative{4, -1};
  auto n = GetSeedPartition(negative, W(1, 1, 1), std::nullopt);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("shard 1: sample count -1"), std::string::npos) << n.status().message();
  auto b = GetSeedPartition(shards, W(1, 1, 1), -2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("batch size hint -2"), std::string::npos);
  auto w = GetSeedPartition(shards, W(1, 1, 2, 0, 0, 2), std::nullopt);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("worker_of_rank 2 is outside [0, 2)"), std::string::npos);
}

// tests/golden/dataset/seed_partition.txt was made by running Composer's
// get_partition (see the header of the file) on every listed config.
TEST(SeedPartition, GoldenTableFromComposer) {
  std::ifstream in(std::string(TS_SOURCE_DIR) + "/tests/golden/dataset/seed_partition.txt");
  ASSERT_TRUE(in) << "missing golden file";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    i64 total, devices, workers, bs;
    std::string bar;
    ls >> total >> devices >> workers >> bs >> bar;
    // Shards of 3 samples with an empty shard at index 1.
    std::vector<i64> shards{std::min<i64>(3, total), 0};
    for (i64 rest = total - shards[0]; rest > 0; rest -= shards.back()) shards.push_back(std::min<i64>(3, rest));
    for (i64 d = 0; d < devices; ++d) {
      for (i64 w = 0; w < workers; ++w) {
        std::string want;
        ls >> want;
        auto p = GetSeedPartition(shards, W(1, devices, workers, 0, d, w), bs ? std::optional<i64>(bs) : std::nullopt);
        std::string got = "E";
        if (p.ok()) {
          got = std::to_string(p->min_id) + "-" + std::to_string(p->max_id) + ":" + std::to_string(p->shard_begin) +
                "-" + std::to_string(p->shard_end) + ":" + std::to_string(p->download_end);
        } else {
          EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
        }
        EXPECT_EQ(got, want) << line << " device " << d << " worker " << w;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 20 * 100 * 5);  // totals 1..20, (1+2+3+4)^2 device/worker pairs, 5 batch hints
}

// Properties over totals 1..60, 1-4 devices, 1-4 workers, no hint / 1..4.
TEST(SeedPartition, PropertiesOverManyWorlds) {
  for (i64 total = 1; total <= 60; ++total) {
    for (i64 devices = 1; devices <= 4; ++devices) {
      for (i64 workers = 1; workers <= 4; ++workers) {
        for (i64 bs = 0; bs <= 4; ++bs) {
          SCOPED_TRACE("total " + std::to_string(total) + " devices " + std::to_string(devices) + " workers " +
                       std::to_string(workers) + " batch " + std::to_string(bs));
          const i64 per_device = (total + devices - 1) / devices;  // every device reads this many
          const i64 units = bs ? (per_device + bs - 1) / bs : per_device;
          const bool expect_error = units < workers;  // some worker would get nothing (§2.4)
          std::vector<int> seen(static_cast<std::size_t>(total), 0);
          bool any_error = false;
          for (i64 d = 0; d < devices; ++d) {
            std::vector<std::vector<i64>> streams;
            i64 device_lo = total, device_hi = -1, device_count = 0;
            for (i64 w = 0; w < workers; ++w) {
              std::vector<i64> one{total};
              auto p =
                  GetSeedPartition(one, W(1, devices, workers, 0, d, w), bs ? std::optional<i64>(bs) : std::nullopt);
              if (!p.ok()) {
                EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
                any_error = true;
                continue;
              }
              std::vector<i64> ids;
              for (i64 id = p->min_id; id <= p->max_id; ++id) {
                ids.push_back(id);
                ++seen[static_cast<std::size_t>(id)];
              }
              device_lo = std::min(device_lo, p->min_id);
              device_hi = std::max(device_hi, p->max_id);
              device_count += p->max_id - p->min_id + 1;
              streams.push_back(ids);
            }
            if (expect_error) continue;
            // Workers of a device tile its range exactly: no duplicates inside a device.
            EXPECT_EQ(device_count, per_device);
            EXPECT_EQ(device_hi - device_lo + 1, per_device);
            if (bs) {
              // The DataLoader reads worker batches round-robin; count incomplete batches.
              int incomplete = 0;
              for (auto& s : streams) {
                if (s.size() % static_cast<std::size_t>(bs)) ++incomplete;
              }
              EXPECT_LE(incomplete, 1);
            }
          }
          EXPECT_EQ(any_error, expect_error);
          if (expect_error) continue;
          // Every sample covered; the only duplicates are the device-boundary
          // repeats: devices * per_device - total of them.
          i64 extra = 0;
          for (int c : seen) {
            EXPECT_GE(c, 1);
            extra += c - 1;
          }
          EXPECT_EQ(extra, devices * per_device - total);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- elastic

ElasticParams EP(i64 n, i64 ncn, i64 nodes, i64 ranks, i64 workers, i64 bs, i64 drop = 0) {
  ElasticParams p;
  p.num_samples = n;
  p.num_canonical_nodes = ncn;
  p.num_nodes = nodes;
  p.ranks_per_node = ranks;
  p.workers_per_rank = workers;
  p.batch_size = bs;
  p.drop_first = drop;
  return p;
}

std::vector<i64> Flat(const ElasticParams& p, std::array<i64, 5>* shape = nullptr) {
  auto part = ElasticPartition::Create(p);
  EXPECT_TRUE(part.ok()) << part.status().ToString();
  if (!part.ok()) return {};
  if (shape) *shape = part->shape();
  return *part->Materialize();
}

// streaming.md §3.2, verified by running MosaicML's get_partitions.
TEST(ElasticPartition, MosaicExamples) {
  std::array<i64, 5> shape{};
  EXPECT_EQ(Flat(EP(10, 2, 1, 2, 2, 2), &shape),
            (std::vector<i64>{0, 1, 4, -1, 2, 3, -1, -1, 5, 6, 9, -1, 7, 8, -1, -1}));
  EXPECT_EQ(shape, (std::array<i64, 5>{1, 2, 2, 2, 2}));
  EXPECT_EQ(Flat(EP(10, 2, 1, 1, 1, 4), &shape), (std::vector<i64>{0, 5, 1, 6, 2, 7, 3, 8, 4, 9, -1, -1}));
  EXPECT_EQ(shape, (std::array<i64, 5>{1, 1, 1, 3, 4}));
  EXPECT_EQ(Flat(EP(10, 2, 1, 1, 1, 4, 4), &shape), (std::vector<i64>{2, 7, 3, 8, 4, 9, -1, -1}));
}

TEST(ElasticPartition, Errors) {
  const auto err = [](const ElasticParams& p) {
    auto r = ElasticPartition::Create(p);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(err(EP(10, 3, 2, 1, 1, 1)).find("neither divides the other"), std::string::npos);
  EXPECT_NE(err(EP(10, 2, 1, 1, 1, 1, 12)).find("drop_first 12"), std::string::npos);
  EXPECT_NE(err(EP(0, 2, 1, 1, 1, 1)).find("num_samples 0"), std::string::npos);
  EXPECT_NE(err(EP(10, 2, 1, 1, 0, 1)).find("workers_per_rank 0"), std::string::npos);
  // numpy's failed broadcast: 2 samples, 1 canonical over 4 physical nodes.
  EXPECT_NE(err(EP(2, 1, 4, 1, 1, 1)).find("cannot be padded"), std::string::npos);
  ElasticParams r = EP(100, 2, 3, 2, 1, 2);
  r.algo = PartitionAlgo::kRelaxed;
  r.initial_nodes = 4;  // global 12 not divisible by 8 initial devices
  EXPECT_NE(err(r).find("not divisible by the initial 8 devices"), std::string::npos);
  EXPECT_EQ(*ParsePartitionAlgo("relaxed"), PartitionAlgo::kRelaxed);
  EXPECT_FALSE(ParsePartitionAlgo("py1e").ok());
}

// The rank's batches in the order its DataLoader reads them (workers
// round-robin), -1 removed, empty batches skipped.
std::vector<std::vector<i64>> RankBatches(const ElasticPartition& p, i64 node, i64 rank) {
  const auto& s = p.shape();
  std::vector<std::vector<i64>> out;
  for (i64 b = 0; b < s[3]; ++b) {
    for (i64 w = 0; w < s[2]; ++w) {
      std::vector<i64> batch;
      for (i64 k = 0; k < s[4]; ++k) {
        const i64 id = p.At(node, rank, w, b, k);
        if (id >= 0) batch.push_back(id);
      }
      if (!batch.empty()) out.push_back(batch);
    }
  }
  return out;
}

// Global step k = the union of every rank's k-th batch, sorted.
std::vector<std::vector<i64>> GlobalSteps(const ElasticPartition& p, int* incomplete_per_rank_max) {
  const auto& s = p.shape();
  std::vector<std::vector<i64>> steps;
  for (i64 n = 0; n < s[0]; ++n) {
    for (i64 r = 0; r < s[1]; ++r) {
      auto batches = RankBatches(p, n, r);
      int incomplete = 0;
      for (std::size_t k = 0; k < batches.size(); ++k) {
        if (static_cast<i64>(batches[k].size()) < s[4]) ++incomplete;
        if (steps.size() <= k) steps.resize(k + 1);
        steps[k].insert(steps[k].end(), batches[k].begin(), batches[k].end());
      }
      *incomplete_per_rank_max = std::max(*incomplete_per_rank_max, incomplete);
    }
  }
  for (auto& st : steps) std::sort(st.begin(), st.end());
  return steps;
}

struct Dims {
  i64 nodes, ranks, workers;
};

TEST(ElasticPartition, GlobalBatchesIndependentOfWorld) {
  const std::vector<Dims> worlds = {{1, 1, 1}, {1, 1, 3}, {1, 2, 1}, {1, 2, 2}, {2, 1, 2}, {1, 4, 1},
                                    {2, 2, 1}, {4, 1, 3}, {2, 4, 2}, {4, 2, 1}, {8, 1, 1}};
  int combos = 0;
  for (i64 n : {1, 7, 8, 31, 64, 100, 257}) {
    for (i64 ncn : {1, 2, 4, 8}) {
      for (i64 global : {8, 16}) {
        std::vector<std::vector<i64>> want;
        i64 full_steps = -1;
        for (const Dims& d : worlds) {
          const i64 devices = d.nodes * d.ranks;
          ElasticParams p = EP(n, ncn, d.nodes, d.ranks, d.workers, global / devices);
          auto part = ElasticPartition::Create(p);
          if (!part.ok()) {  // only the node divisibility rule or numpy's broadcast failure may refuse
            EXPECT_EQ(part.status().code(), StatusCode::kInvalidArgument);
            continue;
          }
          SCOPED_TRACE("n " + std::to_string(n) + " ncn " + std::to_string(ncn) + " global " + std::to_string(global) +
                       " world " + std::to_string(d.nodes) + "x" + std::to_string(d.ranks) + "x" +
                       std::to_string(d.workers));
          int incomplete = 0;
          auto steps = GlobalSteps(*part, &incomplete);
          EXPECT_LE(incomplete, 1);
          // Every sample at least once; repeats only from padding (§3.8).
          std::map<i64, int> count;
          i64 total = 0;
          for (auto& st : steps) {
            for (i64 id : st) ++count[id], ++total;
          }
          EXPECT_EQ(static_cast<i64>(count.size()), n);
          EXPECT_LT(total - n, ncn + d.nodes + devices);
          // The canonical order's first n positions are the same in every
          // world; the complete steps within them must be identical.
          const i64 same = n / global;
          if (want.empty()) {
            want = steps;
            full_steps = same;
          }
          ASSERT_GE(static_cast<i64>(steps.size()) + 1, full_steps);
          for (i64 k = 0; k + 1 < full_steps; ++k) EXPECT_EQ(steps[k], want[k]) << "step " << k;
          ++combos;
        }
      }
    }
  }
  EXPECT_GT(combos, 400);
}

TEST(ElasticPartition, RelaxedReshapesTheInitialOrder) {
  // Started on 2 nodes x 2 ranks (global batch 12), resumed on 3 nodes:
  // 2 canonical nodes do not divide 3, so relaxed re-cuts the 2-node order.
  ElasticParams first = EP(200, 2, 2, 2, 2, 3);
  ElasticParams later = EP(200, 2, 3, 2, 2, 2);
  later.algo = PartitionAlgo::kRelaxed;
  later.initial_nodes = 2;
  auto a = ElasticPartition::Create(first);
  auto b = ElasticPartition::Create(later);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  int inc = 0;
  auto sa = GlobalSteps(*a, &inc);
  auto sb = GlobalSteps(*b, &inc);
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k], sb[k]) << "step " << k;
  // Relaxed on a divisible world is orig.
  ElasticParams same = EP(200, 2, 2, 2, 2, 3);
  same.algo = PartitionAlgo::kRelaxed;
  same.initial_nodes = 1;
  EXPECT_EQ(Flat(same), Flat(first));
}

TEST(ElasticPartition, DropFirstResumesTheSameGlobalOrder) {
  // Uninterrupted on 1x2x2, resumed after 5 global steps on 2x2x3 (global 8).
  auto whole = ElasticPartition::Create(EP(203, 4, 1, 2, 2, 4));
  auto resumed = ElasticPartition::Create(EP(203, 4, 2, 2, 3, 2, 5 * 8));
  ASSERT_TRUE(whole.ok() && resumed.ok());
  int inc = 0;
  auto sw = GlobalSteps(*whole, &inc);
  auto sr = GlobalSteps(*resumed, &inc);
  ASSERT_EQ(sw.size(), sr.size() + 5);
  for (std::size_t k = 0; k + 1 < sr.size(); ++k) EXPECT_EQ(sr[k], sw[k + 5]) << "step " << k;
}

TEST(ElasticPartition, AtMatchesMaterializeAndLimit) {
  auto p = ElasticPartition::Create(EP(1000, 8, 2, 2, 3, 5, 16));
  ASSERT_TRUE(p.ok());
  auto all = *p->Materialize();
  const auto& s = p->shape();
  ASSERT_EQ(static_cast<i64>(all.size()), p->size());
  std::size_t i = 0;
  for (i64 a = 0; a < s[0]; ++a)
    for (i64 b = 0; b < s[1]; ++b)
      for (i64 c = 0; c < s[2]; ++c)
        for (i64 d = 0; d < s[3]; ++d)
          for (i64 e = 0; e < s[4]; ++e) ASSERT_EQ(p->At(a, b, c, d, e), all[i++]);
  auto limited = p->Materialize(10);
  ASSERT_FALSE(limited.ok());
  EXPECT_EQ(limited.status().code(), StatusCode::kLimitExceeded);
}

}  // namespace
}  // namespace tensorsafe::dataset
