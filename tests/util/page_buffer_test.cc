// PageBuffer: appended bytes start zero, and what was written survives the
// mapping being moved by growth and the buffer being moved.
#include "util/page_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace tensorsafe::internal {
namespace {

TEST(PageBuffer, GrowsKeepingContentsAndZeroingTheNewBytes) {
  PageBuffer b;
  EXPECT_TRUE(b.empty());
  std::size_t total = 0;
  // Odd sizes, crossing the first 64 KiB mapping and the 4 MiB huge-page
  // threshold several times.
  for (std::size_t i = 0; total < (std::size_t{9} << 20); ++i) {
    const std::size_t n = 1 + (i * 7919) % 100000;
    std::byte* p = b.Grow(n);
    ASSERT_EQ(p, b.data() + total);
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(p[k], std::byte{0}) << "byte " << total + k;
    std::memset(p, static_cast<int>(i % 251) + 1, n);
    total += n;
    ASSERT_EQ(b.size(), total);
  }
  // Every region still holds its value after all the moves.
  std::size_t at = 0;
  for (std::size_t i = 0; at < total; ++i) {
    const std::size_t n = 1 + (i * 7919) % 100000;
    ASSERT_EQ(b.data()[at], std::byte(i % 251 + 1)) << "region " << i;
    ASSERT_EQ(b.data()[at + n - 1], std::byte(i % 251 + 1)) << "region " << i;
    at += n;
  }
  PageBuffer moved(std::move(b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(moved.size(), total);
  EXPECT_EQ(moved.data()[0], std::byte{1});
  PageBuffer assigned;
  assigned.Grow(10);
  assigned = std::move(moved);
  EXPECT_EQ(assigned.size(), total);
}

TEST(PageBuffer, AnImpossibleSizeThrowsBadAlloc) {
  PageBuffer b;
  b.Grow(1);
  EXPECT_THROW(b.Grow(SIZE_MAX - 4), std::bad_alloc);
  EXPECT_EQ(b.size(), 1u);  // unchanged
}

}  // namespace
}  // namespace tensorsafe::internal
