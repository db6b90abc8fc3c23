// The loader's system helpers (src/load/internal.h): MostlyCached, which
// decides whether a file is read from the page cache or with O_DIRECT.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "load/internal.h"
#include "support/temp_dir.h"

namespace tensorsafe::testing {
namespace {

using internal::kBlock;
using internal::MostlyCached;

void Evict(int fd, std::uint64_t offset, std::uint64_t length) {
  ASSERT_EQ(::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED), 0);
}

void ReadIn(int fd, std::uint64_t offset, std::uint64_t length) {
  std::vector<char> buf(1 << 20);
  for (std::uint64_t at = offset; at < offset + length;) {
    const ssize_t r =
        ::pread(fd, buf.data(), std::min<std::uint64_t>(buf.size(), offset + length - at), static_cast<off_t>(at));
    ASSERT_GT(r, 0);
    at += static_cast<std::uint64_t>(r);
  }
}

// Every page of a file up to 64 MiB, evenly spread windows beyond (a full
// look at a cached 2 GiB file took 38 ms): both find a file cached or not,
// and one with a fifth of it evicted, at its end or in its middle, not cached.
TEST(LoadSystem, MostlyCachedLooksAtEveryPageOrSpreadWindows) {
  ASSERT_EQ(internal::kMincoreAllPages * kBlock, std::uint64_t{64} << 20);
  TempDir dir;
  for (std::uint64_t mib : {std::uint64_t{8}, std::uint64_t{80}}) {
    SCOPED_TRACE(std::to_string(mib) + " MiB");
    const std::uint64_t size = (mib << 20) + 1000;  // a partial last page
    const std::string path = dir.File("f" + std::to_string(mib));
    WriteFileBytes(path, std::string(size, 'x'));
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fdatasync(fd), 0);
    EXPECT_TRUE(MostlyCached(fd, size));  // just written
    Evict(fd, 0, 0);
    if (MostlyCached(fd, size)) {
      ::close(fd);
      GTEST_SKIP() << "the file system keeps the file's pages (tmpfs?)";
    }
    ReadIn(fd, 0, size);
    EXPECT_TRUE(MostlyCached(fd, size));
    const std::uint64_t fifth = size / 5 / kBlock * kBlock;
    Evict(fd, size - fifth, fifth);
    EXPECT_FALSE(MostlyCached(fd, size)) << "the last fifth evicted";
    ReadIn(fd, size - fifth, fifth);
    EXPECT_TRUE(MostlyCached(fd, size));
    Evict(fd, 2 * fifth, fifth);
    EXPECT_FALSE(MostlyCached(fd, size)) << "the middle fifth evicted";
    // The last page alone missing is under a tenth: still cached.
    ReadIn(fd, 0, size);
    Evict(fd, size / kBlock * kBlock, kBlock);
    EXPECT_TRUE(MostlyCached(fd, size));
    EXPECT_FALSE(MostlyCached(fd, 0));
    ::close(fd);
  }
}

}  // namespace
}  // namespace tensorsafe::testing
