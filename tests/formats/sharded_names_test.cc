// The name checks of sharded Open over many names: the index's table of
// names (built with its slots prefetched ahead, NameTable::InsertAll) and
// each shard's names looked up in it when they are not in the weight map's
// order (prefetched ahead too). Short shards (sharded_test.cc) never reach
// the prefetch window; these cross it at every distance.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "formats/codec_test_util.h"
#include "formats/safetensors/sharded_internal.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "util/hash.h"

namespace tensorsafe::testing {
namespace {

std::string Name(int i) { return "layer." + std::to_string(i) + ".weight"; }

TEST(ShardedNames, InsertAllFindsTheFirstRepeatAtAnyDistance) {
  for (const int distance : {1, 2, 7, 8, 9, 15, 16, 17, 100}) {
    for (const int at : {0, 5, 40}) {
      if (at + distance >= 60) continue;
      std::vector<std::string> names;
      for (int i = 0; i < 60; ++i) names.push_back(Name(i));
      names[static_cast<std::size_t>(at + distance)] = names[static_cast<std::size_t>(at)];
      std::vector<std::pair<std::string_view, std::uint32_t>> map;
      for (const std::string& n : names) map.emplace_back(n, 0);
      sharded::internal::NameTable table(map);
      const auto [first, again] = table.InsertAll();
      EXPECT_EQ(first, at) << "distance " << distance;
      EXPECT_EQ(again, at + distance) << "distance " << distance;
    }
  }
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) names.push_back(Name(i));
  std::vector<std::pair<std::string_view, std::uint32_t>> map;
  for (const std::string& n : names) map.emplace_back(n, 0);
  sharded::internal::NameTable table(map);
  EXPECT_EQ(table.InsertAll(), std::make_pair(std::int64_t{-1}, std::int64_t{-1}));
  for (int i = 0; i < 1000; ++i) {
    const std::string& name = names[static_cast<std::size_t>(i)];
    EXPECT_EQ(table.Find(name, tensorsafe::internal::Hash64(name)), i);
  }
  EXPECT_EQ(table.Find("layer.1000.weight", tensorsafe::internal::Hash64("layer.1000.weight")), -1);
}

// One shard of `n` tensors, and an index that maps the names `listed`
// (by number, in that order) to it.
void WriteShard(const TempDir& dir, int n, const std::vector<int>& listed) {
  TensorSet set;
  for (int i = 0; i < n; ++i) set.tensors.push_back(MakeTensor(Name(i), DType::kU8, {1}, std::string(1, 'x')));
  ASSERT_TRUE(safetensors::WriteFile(dir.File("model-00001-of-00001.safetensors"), set).ok());
  std::string index = R"({"weight_map": {)";
  for (std::size_t k = 0; k < listed.size(); ++k) {
    index += (k ? ", \"" : "\"") + Name(listed[k]) + R"(": "model-00001-of-00001.safetensors")";
  }
  WriteFileBytes(dir.File("model.safetensors.index.json"), index + "}}");
}

TEST(ShardedNames, ShardsOutOfTheIndexOrderOpenAndNameTheStranger) {
  const int n = 50;
  std::vector<int> reversed;
  for (int i = n - 1; i >= 0; --i) reversed.push_back(i);
  {
    TempDir dir;  // every guess misses: each name is found through the table
    WriteShard(dir, n, reversed);
    auto ck = sharded::Open(dir.path().string());
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    ASSERT_EQ(ck->set.tensors.size(), static_cast<std::size_t>(n));
  }
  // A name the index does not list, at every place in the shard's order:
  // before, inside and past each prefetch window.
  for (int stranger = 0; stranger < n; ++stranger) {
    std::vector<int> listed;
    for (int i : reversed) {
      if (i != stranger) listed.push_back(i);
    }
    listed.push_back(n + 7);  // keeps the count: the stranger must be named, not a missing tensor
    TempDir dir;
    WriteShard(dir, n, listed);
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                  "holds tensor \"" + Name(stranger) + "\", which the index does not list");
  }
}

}  // namespace
}  // namespace tensorsafe::testing
