// ForEachItem, ForEachItemOrError and ParallelFor: every item once, and the
// error a loop in order would return.
#include "util/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tensorsafe::internal {
namespace {

TEST(ForEachItem, EveryItemOnceOnSeveralThreads) {
  for (unsigned threads : {0u, 1u, 3u, 200u}) {
    std::vector<std::atomic<int>> seen(1000);
    std::mutex mu;
    std::set<std::thread::id> ids;
    ForEachItem(seen.size(), threads, [&](std::size_t i) {
      seen[i].fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i << ", " << threads;
    EXPECT_LE(ids.size(), std::max(threads, 1u)) << threads;
    EXPECT_LE(ids.size(), 64u);
  }
  int calls = 0;
  ForEachItem(0, 4, [&](std::size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ForEachItem, ItemZeroIsClaimedFirst) {
  // So other items may wait for what item 0 does (sharded::Open builds its
  // name table there): here each waits for it, for 5 s at most.
  std::atomic<bool> zero_done{false};
  std::atomic<int> gave_up{0};
  ForEachItem(50, 4, [&](std::size_t i) {
    if (i == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      zero_done.store(true);
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!zero_done.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (!zero_done.load()) gave_up.fetch_add(1);
  });
  EXPECT_EQ(gave_up.load(), 0);
}

TEST(ForEachItemOrError, TheLowestFailedItemIsReturned) {
  for (unsigned threads : {1u, 4u}) {
    // Item 30 fails at once; item 10 fails late. A loop in order returns 10's.
    std::atomic<int> ran{0};
    Status s = ForEachItemOrError(1000, threads, [&](std::size_t i) -> Status {
      ran.fetch_add(1);
      if (i == 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        return IOError("item 10 failed", EIO);
      }
      if (i == 30) return IOError("item 30 failed", EIO);
      // The others take a while, as real items do: 100 of them on 4 threads
      // take 25 ms, far longer than item 30's thread may be descheduled
      // (instant items let 143 start before its failure was seen).
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return Status::OK();
    });
    EXPECT_EQ(s.code(), StatusCode::kIOError) << threads;
    EXPECT_EQ(s.message(), "item 10 failed") << threads;
    // No item past a failure starts: one thread stops at 11, four at a few past 30.
    EXPECT_LT(ran.load(), 100) << threads;
    if (threads == 1) EXPECT_EQ(ran.load(), 11);
  }
}

TEST(ForEachItemOrError, AllItemsRunWhenNoneFails) {
  std::atomic<int> ran{0};
  EXPECT_TRUE(ForEachItemOrError(777, 3, [&](std::size_t) {
                ran.fetch_add(1);
                return Status::OK();
              }).ok());
  EXPECT_EQ(ran.load(), 777);
}

TEST(ParallelFor, PiecesCoverTheRangeOnce) {
  std::vector<std::atomic<int>> seen(12345);
  ParallelFor(seen.size(), 100, 4, [&](std::size_t b, std::size_t e) {
    EXPECT_LT(b, e);
    for (std::size_t i = b; i < e; ++i) seen[i].fetch_add(1);
  });
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

}  // namespace
}  // namespace tensorsafe::internal
