// IsAscii reads 8 bytes at a time: a high byte in any lane of a word or in
// the tail is found, at every length.
#include "util/text.h"

#include <gtest/gtest.h>

#include <string>

namespace tensorsafe::internal {
namespace {

TEST(Text, IsAsciiFindsAHighByteAnywhere) {
  for (std::size_t n = 0; n <= 20; ++n) {
    std::string s(n, '\x7f');
    EXPECT_TRUE(IsAscii(s)) << n;
    for (std::size_t at = 0; at < n; ++at) {
      std::string bad = s;
      bad[at] = '\x80';
      EXPECT_FALSE(IsAscii(bad)) << n << " " << at;
    }
  }
  EXPECT_FALSE(IsAscii("caf\xc3\xa9"));
}

}  // namespace
}  // namespace tensorsafe::internal
