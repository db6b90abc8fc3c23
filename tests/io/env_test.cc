// Env's temp files: past their first MiB they reserve blocks ahead of the
// appends (fallocate, size kept), and Sync or Close gives back whatever was
// reserved and not written, so a finished file holds no blocks past its end.
#include "tensorsafe/env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::internal {
namespace {

using testing::ReadFileBytes;
using testing::TempDir;

constexpr std::uint64_t kMiB = 1 << 20;

std::uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

// Whether the test directory's filesystem reserves blocks past the end, and
// has the free space (1 GiB beside 8 steps) under which temp files do not.
bool CanPreallocate(const TempDir& dir) {
  struct statvfs vfs;
  if (::statvfs(dir.path().c_str(), &vfs) != 0 ||
      static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < (std::uint64_t{2} << 30)) {
    return false;
  }
  const std::string probe = dir.File("probe");
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20) == 0;
  ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}

std::vector<std::byte> Pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) >> 3);
  return v;
}

// Appends `pieces` and returns what was appended.
std::string AppendAll(WritableFile& f, const std::vector<std::size_t>& pieces) {
  std::string all;
  unsigned seed = 1;
  for (std::size_t n : pieces) {
    auto bytes = Pattern(n, seed++);
    EXPECT_TRUE(f.Append(bytes).ok());
    all.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  return all;
}

class TempFilePreallocation : public ::testing::TestWithParam<bool> {};

TEST_P(TempFilePreallocation, ReservesAheadAndGivesBackTheRest) {
  const bool sync_first = GetParam();
  TempDir dir;
  if (!CanPreallocate(dir))
    GTEST_SKIP() << dir.path() << ": the filesystem cannot reserve blocks (fallocate), or has under 2 GiB free";
  std::string tmp;
  auto f = Env::Default()->NewTempFile(dir.File("out"), &tmp);
  ASSERT_TRUE(f.ok()) << f.status().ToString();

  // Under a MiB nothing is reserved: small files pay no extra system calls.
  std::string want = AppendAll(**f, {300 * 1024, 200 * 1024});
  EXPECT_LT(AllocatedBytes(tmp), kMiB) << "reserved before the first MiB";

  // The append that crosses it reserves the minimum step (8 MiB) beyond
  // its own end; the next one fits in that.
  want += AppendAll(**f, {kMiB});
  EXPECT_GE(AllocatedBytes(tmp), want.size() + 8 * kMiB) << "no blocks reserved ahead";
  want += AppendAll(**f, {2 * kMiB + 12345});
  const std::uint64_t size = want.size();
  EXPECT_GE(AllocatedBytes(tmp), size + 4 * kMiB) << "the reservation shrank";

  // A header rewrite in place does not disturb the reservation or the size.
  auto head = Pattern(64, 99);
  ASSERT_TRUE((*f)->WriteAt(0, head).ok());
  want.replace(0, head.size(), reinterpret_cast<const char*>(head.data()), head.size());

  if (sync_first) {
    ASSERT_TRUE((*f)->Sync().ok());
    EXPECT_LT(AllocatedBytes(tmp), size + 256 * 1024) << "Sync kept the reservation";
  }
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_LT(AllocatedBytes(tmp), size + 256 * 1024) << "Close kept the reservation";
  EXPECT_GE(AllocatedBytes(tmp), size);
  EXPECT_EQ(ReadFileBytes(tmp), want);
}

INSTANTIATE_TEST_SUITE_P(CloseOrSyncThenClose, TempFilePreallocation, ::testing::Bool());

// Through the public writer: a finished file of a few MiB holds its bytes
// and no reserved blocks, and reads back whole.
TEST(TempFilePreallocationWriter, FinishedFileHoldsNoBlocksPastItsEnd) {
  TempDir dir;
  if (!CanPreallocate(dir))
    GTEST_SKIP() << dir.path() << ": the filesystem cannot reserve blocks (fallocate), or has under 2 GiB free";
  const std::string path = dir.File("w.tsafe");
  auto data = Pattern(6 * kMiB, 7);
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < 3; ++i) {
    auto part = std::span<const std::byte>(data).subspan(i * 2 * kMiB, 2 * kMiB);
    ASSERT_TRUE((*w)->Add("t" + std::to_string(i), TensorView::Contiguous(DType::kU8, {2 * kMiB}, part)).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  EXPECT_LT(AllocatedBytes(path), size + 256 * 1024) << "the finished file kept reserved blocks";
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->Verify().ok());
  auto t = (*r)->Get("t2");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(0, std::memcmp(t->data.data(), data.data() + 4 * kMiB, 2 * kMiB));
}

}  // namespace
}  // namespace tensorsafe::internal
