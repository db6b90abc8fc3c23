// The epoch sampler and its resumption state (docs/PARTITION.md §5): strict
// JSON, and stop-and-resume on another world compared with an uninterrupted
// run, with and without shuffling.
#include "tensorsafe/dataset/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace tensorsafe::dataset {
namespace {

using i64 = std::int64_t;

World SamplerWorld(i64 nodes, i64 ranks, i64 workers, i64 node = 0, i64 rank = 0, i64 worker = 0) {
  World w;
  w.num_nodes = nodes;
  w.ranks_per_node = ranks;
  w.workers_per_rank = workers;
  w.node = node;
  w.rank_of_node = rank;
  w.worker_of_rank = worker;
  return w;
}

TEST(SamplerState, GoldenEncodingAndRoundTrip) {
  SamplerState s;
  s.epoch = 3;
  s.sample_in_epoch = 96;
  s.seed = 18446744073709551615ULL;
  s.num_canonical_nodes = 8;
  s.global_batch_size = 32;
  s.shuffle = true;
  s.shuffle_block_size = 1000;
  s.partition = PartitionAlgo::kRelaxed;
  s.initial_nodes = 2;
  const std::string json = EncodeSamplerState(s);
  EXPECT_EQ(
      json,
      "{\"version\":2,\"mode\":\"elastic\",\"partition\":\"relaxed\",\"epoch\":3,\"sample_in_epoch\":96,"
      "\"seed\":18446744073709551615,\"num_canonical_nodes\":8,\"global_batch_size\":32,\"shuffle\":true,"
      "\"shuffle_block_size\":1000,\"initial_nodes\":2,\"worker_num_nodes\":null,\"worker_ranks_per_node\":null,"
      "\"worker_workers_per_rank\":null,\"worker_node\":null,\"worker_rank_of_node\":null,\"worker_of_rank\":null,"
      "\"worker_samples\":null}");
  auto back = DecodeSamplerState(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  SamplerState d;  // defaults, null initial_nodes
  auto back2 = DecodeSamplerState(EncodeSamplerState(d));
  ASSERT_TRUE(back2.ok());
  EXPECT_EQ(*back2, d);
  // Whitespace and key order do not matter.
  auto spaced = DecodeSamplerState(
      " { \"initial_nodes\" : null , \"shuffle_block_size\":7,\"shuffle\":false,\"global_batch_size\":4,"
      "\"num_canonical_nodes\":2,\"seed\":0,\"sample_in_epoch\":0,\"epoch\":0,\"partition\":\"orig\","
      "\"mode\":\"seed\",\"version\":1 } ");
  ASSERT_TRUE(spaced.ok()) << spaced.status().ToString();
  EXPECT_EQ(spaced->mode, PartitionMode::kSeed);
  EXPECT_EQ(spaced->shuffle_block_size, 7);
  EXPECT_FALSE(spaced->worker.has_value());
  // A worker position round-trips too.
  s.worker = WorkerPosition{SamplerWorld(2, 4, 3, 1, 2, 0), 40};
  auto back3 = DecodeSamplerState(EncodeSamplerState(s));
  ASSERT_TRUE(back3.ok()) << back3.status().ToString();
  EXPECT_EQ(*back3, s);
  EXPECT_NE(EncodeSamplerState(s).find("\"worker_node\":1,\"worker_rank_of_node\":2,\"worker_of_rank\":0,"
                                       "\"worker_samples\":40}"),
            std::string::npos);
}

TEST(SamplerState, DefaultShuffleBlockSizeIsMosaicMLs) {
  // max(4_000_000 // ncn, 1 << 18), streaming's StreamingDataset.__init__.
  EXPECT_EQ(DefaultShuffleBlockSize(1), 4'000'000);
  EXPECT_EQ(DefaultShuffleBlockSize(4), 1'000'000);
  EXPECT_EQ(DefaultShuffleBlockSize(15), 266'666);
  EXPECT_EQ(DefaultShuffleBlockSize(16), 262'144);
  EXPECT_EQ(DefaultShuffleBlockSize(1 << 20), 262'144);
  EXPECT_EQ(DefaultShuffleBlockSize(0), 4'000'000);
  // An unset block size is the default for the state's canonical nodes: the
  // same epoch as naming it.
  std::vector<i64> shards;
  for (int i = 0; i < 40; ++i) shards.push_back(50'000);  // 2M samples: blocks matter
  SamplerState unset;
  unset.shuffle = true;
  unset.num_canonical_nodes = 4;
  SamplerState named = unset;
  named.shuffle_block_size = 1'000'000;
  SamplerState other = unset;
  other.shuffle_block_size = 1 << 18;
  auto a = EpochWorkerIds(shards, unset, SamplerWorld(1, 1, 1));
  auto b = EpochWorkerIds(shards, named, SamplerWorld(1, 1, 1));
  auto c = EpochWorkerIds(shards, other, SamplerWorld(1, 1, 1));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_EQ(unset.block_size(), 1'000'000);
}

TEST(SamplerState, StrictDecodingErrors) {
  const std::string good = EncodeSamplerState(SamplerState{});
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string json, message;
  };
  const std::vector<Case> cases = {
      {"", "not valid JSON"},
      {"988E898", "not valid JSON"},  // a number past a double: nlohmann throws out_of_range (sampler_state_fuzz)
      {replace("\"epoch\":0", "\"epoch\":1e400"), "not valid JSON"},
      {good.substr(0, good.size() - 1), "not valid JSON"},
      {"[1,2]", "expected a JSON object, got array"},
      {replace("\"epoch\":0,", ""), "key \"epoch\": is missing"},
      {replace("\"epoch\":0,", "\"epoch\":0,\"epochs\":1,"), "key \"epochs\": is not a sampler state key"},
      {replace("\"epoch\":0,", "\"epoch\":0,\"epoch\":1,"), "key \"epoch\": appears more than once"},
      {replace("\"epoch\":0", "\"epoch\":\"0\""), "key \"epoch\": expected an integer, got string"},
      {replace("\"epoch\":0", "\"epoch\":1.5"), "key \"epoch\": expected an integer, got number 1.5"},
      {replace("\"epoch\":0", "\"epoch\":-1"), "key \"epoch\": -1 is outside [0, "},
      {replace("\"version\":2", "\"version\":3"), "key \"version\": 3 is not supported (expected 1 or 2)"},
      {replace("\"version\":2", "\"version\":1"), "key \"worker_num_nodes\": is not a version 1 sampler state key"},
      {replace("\"worker_samples\":null", "\"worker_samples\":3"), "key \"worker_num_nodes\": is null while"},
      {replace("\"version\":2,", ""), "key \"version\": is missing"},
      {replace("\"mode\":\"elastic\"", "\"mode\":\"fast\""), "key \"mode\": unknown partition mode \"fast\""},
      {replace("\"partition\":\"orig\"", "\"partition\":7"), "key \"partition\": expected a string, got integer 7"},
      {replace("\"seed\":9176", "\"seed\":-4"), "key \"seed\": expected an integer in [0, 2^64), got -4"},
      {replace("\"seed\":9176", "\"seed\":18446744073709551616"), "key \"seed\": expected an integer"},
      {replace("\"shuffle\":false", "\"shuffle\":0"), "key \"shuffle\": expected true or false, got integer 0"},
      {replace("\"num_canonical_nodes\":1", "\"num_canonical_nodes\":0"), "key \"num_canonical_nodes\": 0 is outside"},
      {replace("\"initial_nodes\":null", "\"initial_nodes\":0"), "key \"initial_nodes\": 0 is outside [1, "},
      {replace("\"shuffle_block_size\":null", "\"shuffle_block_size\":0"), "key \"shuffle_block_size\": 0"},
  };
  // Worker keys: all set, coordinates below their counts.
  const std::string worker = replace(
      "\"worker_num_nodes\":null,\"worker_ranks_per_node\":null,\"worker_workers_per_rank\":null,\"worker_node\":null,"
      "\"worker_rank_of_node\":null,\"worker_of_rank\":null,\"worker_samples\":null",
      "\"worker_num_nodes\":1,\"worker_ranks_per_node\":2,\"worker_workers_per_rank\":3,\"worker_node\":0,"
      "\"worker_rank_of_node\":1,\"worker_of_rank\":3,\"worker_samples\":5");
  auto bad_worker = DecodeSamplerState(worker);
  ASSERT_FALSE(bad_worker.ok());
  EXPECT_NE(bad_worker.status().message().find("key \"worker_of_rank\": 3 is outside [0, 2]"), std::string::npos)
      << bad_worker.status().message();
  auto huge = DecodeSamplerState(std::string(70000, ' '));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kLimitExceeded);
  EXPECT_NE(huge.status().message().find("70000 bytes of JSON"), std::string::npos);
  for (const Case& c : cases) {
    auto r = DecodeSamplerState(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << "json: " << c.json << "\nmessage: " << r.status().message();
  }
}

// Global step k of an epoch = the union of each rank's k-th batch, where a
// rank's DataLoader batches each worker's stream and reads workers
// round-robin (PARTITION.md §3.8). Sorted per step.
std::vector<std::vector<i64>> Steps(const std::vector<i64>& shards, const SamplerState& st, i64 nodes, i64 ranks,
                                    i64 workers) {
  auto plan = EpochPlan::Create(shards, st, SamplerWorld(nodes, ranks, workers));
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  const i64 bs = plan->rank_batch_size();
  std::vector<std::vector<i64>> steps;
  for (i64 n = 0; n < nodes; ++n) {
    for (i64 r = 0; r < ranks; ++r) {
      std::vector<std::vector<i64>> streams;
      for (i64 w = 0; w < workers; ++w)
        streams.push_back(*plan->WorkerIds(SamplerWorld(nodes, ranks, workers, n, r, w)));
      std::size_t k = 0;
      for (std::size_t round = 0;; ++round) {
        bool any = false;
        for (auto& s : streams) {
          const std::size_t begin = round * static_cast<std::size_t>(bs);
          if (begin >= s.size()) continue;
          any = true;
          const std::size_t end = std::min(s.size(), begin + static_cast<std::size_t>(bs));
          if (steps.size() <= k) steps.resize(k + 1);
          steps[k].insert(steps[k].end(), s.begin() + static_cast<std::ptrdiff_t>(begin),
                          s.begin() + static_cast<std::ptrdiff_t>(end));
          ++k;
        }
        if (!any) break;
      }
    }
  }
  for (auto& s : steps) std::sort(s.begin(), s.end());
  return steps;
}

std::vector<i64> Shards() {
  std::vector<i64> s;
  for (int i = 0; i < 23; ++i) s.push_back(i % 5 == 2 ? 0 : 9 + i % 4);
  return s;  // 187 samples, some shards empty
}

TEST(EpochSampler, ResumeOnAnotherWorldMatchesUninterruptedRun) {
  const auto shards = Shards();
  for (bool shuffle : {false, true}) {
    SamplerState st;
    st.num_canonical_nodes = 4;
    st.global_batch_size = 8;
    st.shuffle = shuffle;
    st.shuffle_block_size = 20;
    st.seed = 1234;
    st.epoch = 2;
    const auto whole = Steps(shards, st, 1, 2, 3);  // uninterrupted: 1 node x 2 ranks x 3 workers
    ASSERT_GT(whole.size(), 20u);
    // Stop after 7 global steps; save and reload the state as JSON.
    st.sample_in_epoch = 7 * 8;
    auto reloaded = DecodeSamplerState(EncodeSamplerState(st));
    ASSERT_TRUE(reloaded.ok());
    for (auto [nodes, ranks, workers] : std::vector<std::array<i64, 3>>{{1, 2, 1}, {2, 2, 2}, {1, 4, 3}, {4, 2, 1}}) {
      SCOPED_TRACE("shuffle " + std::to_string(shuffle) + " world " + std::to_string(nodes) + "x" +
                   std::to_string(ranks) + "x" + std::to_string(workers));
      const auto rest = Steps(shards, *reloaded, nodes, ranks, workers);
      ASSERT_EQ(rest.size() + 7, whole.size());
      // Every complete step identical; the last may differ only by padding repeats.
      for (std::size_t k = 0; k + 1 < rest.size(); ++k) EXPECT_EQ(rest[k], whole[k + 7]) << "step " << k + 7;
    }
  }
}

TEST(EpochSampler, ShuffledGlobalBatchesSameOnWorldSizes1To8) {
  const auto shards = Shards();
  SamplerState st;
  st.num_canonical_nodes = 4;
  st.global_batch_size = 8;
  st.shuffle = true;
  st.shuffle_block_size = 10;
  st.seed = 99;
  st.epoch = 5;
  const auto want = Steps(shards, st, 1, 1, 1);
  ASSERT_EQ(want.size(), 24u);  // 187 samples -> 23 complete steps of 8 and a partial one
  for (auto [nodes, ranks, workers] : std::vector<std::array<i64, 3>>{
           {1, 2, 1}, {1, 2, 4}, {2, 1, 3}, {1, 4, 2}, {2, 2, 1}, {4, 1, 2}, {2, 4, 1}, {4, 2, 3}}) {
    SCOPED_TRACE("world " + std::to_string(nodes) + "x" + std::to_string(ranks) + "x" + std::to_string(workers));
    const auto got = Steps(shards, st, nodes, ranks, workers);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k + 1 < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << "step " << k;
  }
}

TEST(EpochSampler, ShuffledEpochCoversEverySampleAndDiffersPerEpoch) {
  const auto shards = Shards();
  SamplerState st;
  st.num_canonical_nodes = 2;
  st.global_batch_size = 6;
  st.shuffle = true;
  st.shuffle_block_size = 16;
  std::map<i64, int> count;
  const auto e0 = Steps(shards, st, 2, 3, 2);
  for (auto& s : e0)
    for (i64 id : s) ++count[id];
  EXPECT_EQ(count.size(), 187u);
  st.epoch = 1;
  const auto e1 = Steps(shards, st, 2, 3, 2);
  EXPECT_NE(e0, e1);
  // Unshuffled, the same world reads canonical order.
  st.shuffle = false;
  const auto plain = Steps(shards, st, 1, 1, 1);
  EXPECT_EQ(plain[0], (std::vector<i64>{0, 1, 2, 93, 94, 95}));
}

TEST(EpochSampler, KeepPaddingAndSeedMode) {
  std::vector<i64> shards{5, 5};
  SamplerState st;
  st.num_canonical_nodes = 2;
  st.global_batch_size = 4;
  auto padded = EpochWorkerIds(shards, st, SamplerWorld(1, 2, 2, 0, 1, 1), true);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(*padded, (std::vector<i64>{7, 8, -1, -1}));  // streaming.md §3.2 example, rank 1 worker 1
  auto plain = EpochWorkerIds(shards, st, SamplerWorld(1, 2, 2, 0, 1, 1));
  EXPECT_EQ(*plain, (std::vector<i64>{7, 8}));

  st.mode = PartitionMode::kSeed;
  st.global_batch_size = 2;
  auto seed = EpochWorkerIds({std::vector<i64>{8}}, st, SamplerWorld(1, 1, 3, 0, 0, 0));
  ASSERT_TRUE(seed.ok());
  EXPECT_EQ(*seed, (std::vector<i64>{0, 1, 2, 3}));  // Composer's docstring example
  st.shuffle = true;
  auto r = EpochPlan::Create(shards, st, SamplerWorld(1, 1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(EpochSampler, Errors) {
  std::vector<i64> shards{5, 5};
  SamplerState st;
  st.global_batch_size = 6;
  auto r = EpochPlan::Create(shards, st, SamplerWorld(1, 4, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("global batch size 6 is not a positive multiple of the 4 ranks"),
            std::string::npos)
      << r.status().message();
  st.global_batch_size = 4;
  auto plan = EpochPlan::Create(shards, st, SamplerWorld(1, 4, 1));
  ASSERT_TRUE(plan.ok());
  auto other = plan->WorkerIds(SamplerWorld(1, 2, 1));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("differ from the plan's"), std::string::npos);
  st.sample_in_epoch = 100;
  auto far = EpochPlan::Create(shards, st, SamplerWorld(1, 4, 1));
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("drop_first 100"), std::string::npos);
}

TEST(SamplerState, FieldsAreTheOneCheck) {
  SamplerState st;
  st.epoch = 4;
  SamplerFields f = SamplerStateToFields(st);
  ASSERT_EQ(f.size(), 18u);
  EXPECT_EQ(f[0].first, "version");
  EXPECT_EQ(f[9].first, "shuffle_block_size");
  EXPECT_EQ(f[9].second.kind, SamplerValue::Kind::kNull);
  auto back = SamplerStateFromFields(f);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, st);
  // What a Python dict can hold beyond JSON: a float, a repeated key in the
  // pair list, a huge integer.
  auto with = [&](std::string_view key, SamplerValue v) {
    SamplerFields g = f;
    for (auto& [k, old] : g)
      if (k == key) old = std::move(v);
    return SamplerStateFromFields(g);
  };
  auto r = with("epoch", SamplerValue::Other("float 1.5"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "sampler state: key \"epoch\": expected an integer, got float 1.5");
  r = with("epoch", SamplerValue::UInt(std::uint64_t{1} << 63));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("9223372036854775808 is outside [0, "), std::string::npos);
  SamplerFields twice = f;
  twice.push_back(f[3]);
  r = SamplerStateFromFields(twice);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "sampler state: key \"epoch\": appears more than once");
}

// A worker position (one DataLoader worker's own state, as torchdata's
// StatefulDataLoader saves it) resumes that worker's sequence exactly.
TEST(EpochSampler, WorkerPositionResumesThatWorker) {
  const auto shards = Shards();
  SamplerState st;
  st.num_canonical_nodes = 2;
  st.global_batch_size = 4;
  st.shuffle = true;
  st.shuffle_block_size = 16;
  st.epoch = 1;
  st.sample_in_epoch = 24;  // resumed once already: the worker position counts from here
  for (i64 worker = 0; worker < 3; ++worker) {
    const World me = SamplerWorld(1, 2, 3, 0, 1, worker);
    auto all = EpochWorkerIds(shards, st, me);
    ASSERT_TRUE(all.ok());
    SamplerState at = st;
    at.worker = WorkerPosition{me, 5};
    auto rest = EpochWorkerIds(shards, *DecodeSamplerState(EncodeSamplerState(at)), me);
    ASSERT_TRUE(rest.ok()) << rest.status().ToString();
    EXPECT_EQ(*rest, std::vector<i64>(all->begin() + 5, all->end()));
    at.worker->samples = static_cast<i64>(all->size());
    EXPECT_TRUE(EpochWorkerIds(shards, at, me)->empty());
    at.worker->samples += 1;
    auto over = EpochWorkerIds(shards, at, me);
    ASSERT_FALSE(over.ok());
    EXPECT_NE(over.status().message().find("is more than the"), std::string::npos) << over.status().message();
  }
  SamplerState at = st;
  at.worker = WorkerPosition{SamplerWorld(1, 2, 3, 0, 1, 2), 1};
  auto other = EpochWorkerIds(shards, at, SamplerWorld(1, 2, 3, 0, 0, 2));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("position of worker (node 0, rank 1, worker 2); it resumes only that "
                                          "worker, not (node 0, rank 0, worker 2)"),
            std::string::npos)
      << other.status().message();
  auto world = EpochPlan::Create(shards, at, SamplerWorld(1, 2, 2));
  ASSERT_FALSE(world.ok());
  EXPECT_NE(world.status().message().find("saved with 1 nodes x 2 ranks x 3 workers; it resumes only that world, "
                                          "not 1 nodes x 2 ranks x 2 workers"),
            std::string::npos)
      << world.status().message();
}

}  // namespace
}  // namespace tensorsafe::dataset
