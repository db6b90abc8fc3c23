// ReadAtParallel: large reads split into 8 MiB pieces across threads give the
// same bytes as one read, and a failing piece's error comes back.
#include "io/parallel_read.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::internal {
namespace {

constexpr std::uint64_t kOneMiB = 1 << 20;

std::byte At(std::uint64_t off) { return static_cast<std::byte>((off * 131) ^ (off >> 13)); }

// A file whose byte at offset o is At(o); reads at or past `fail_from` fail,
// naming the offset. Records the offsets read.
class PatternFile final : public RandomAccessFile {
 public:
  PatternFile(std::uint64_t size, std::uint64_t fail_from) : size_(size), fail_from_(fail_from) {}
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override {
    reads_.fetch_add(1);
    if (offset + out.size() > fail_from_)
      return IOError(name_ + ": injected failure at " + std::to_string(offset), EIO);
    if (offset + out.size() > size_) return Corruption(name_ + ": past the end");
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = At(offset + i);
    return Status::OK();
  }
  std::uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int reads() const { return reads_.load(); }

 private:
  std::uint64_t size_, fail_from_;
  std::string name_ = "pattern";
  mutable std::atomic<int> reads_{0};
};

TEST(ReadAtParallel, SmallReadsAreOneRead) {
  PatternFile f(64 * kOneMiB, UINT64_MAX);
  std::vector<std::byte> out(32 * kOneMiB - 1);
  ASSERT_TRUE(ReadAtParallel(f, 5, out).ok());
  EXPECT_EQ(f.reads(), 1);
  EXPECT_EQ(out.front(), At(5));
  EXPECT_EQ(out.back(), At(5 + out.size() - 1));
}

TEST(ReadAtParallel, LargeReadsComeBackWholeInPieces) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: the read is not split";
  // 8 MiB pieces and a short last one; an odd offset so no piece is aligned.
  const std::uint64_t n = 41 * kOneMiB + 12345;
  PatternFile f(64 * kOneMiB, UINT64_MAX);
  std::vector<std::byte> out(n);
  ASSERT_TRUE(ReadAtParallel(f, 777, out).ok());
  EXPECT_EQ(f.reads(), 6);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (out[i] != At(777 + i)) FAIL() << "byte " << i << " differs";
  }
}

TEST(ReadAtParallel, OneThreadIsOneRead) {
  PatternFile f(64 * kOneMiB, UINT64_MAX);
  std::vector<std::byte> out(48 * kOneMiB);
  ASSERT_TRUE(ReadAtParallel(f, 3, out, /*threads=*/1).ok());
  EXPECT_EQ(f.reads(), 1);
  EXPECT_EQ(out.back(), At(3 + out.size() - 1));
}

TEST(ReadAtParallel, TheLowestFailingPieceIsReported) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: the read is not split";
  // Pieces from 16 MiB on fail; whichever thread meets one first, the error
  // names the piece at 16 MiB.
  PatternFile f(64 * kOneMiB, 20 * kOneMiB);
  std::vector<std::byte> out(48 * kOneMiB);
  EXPECT_STATUS(ReadAtParallel(f, 0, out), StatusCode::kIOError, "injected failure at 16777216");
  // Explicit thread counts, even more than the cores, split it the same way.
  EXPECT_STATUS(ReadAtParallel(f, 0, out, 3), StatusCode::kIOError, "injected failure at 16777216");
}

// Through the Reader: a 40 MiB tensor read back whole, mapped (ReadInto) and
// in pread mode (Get), equals what was written.
TEST(ReadAtParallel, ReaderReadsOfLargeTensorsAreExact) {
  testing::TempDir dir;
  const std::string path = dir.File("big.tsafe");
  std::vector<std::byte> data(40 * kOneMiB + 8);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = At(i);
  {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Add("x", TensorView::Contiguous(DType::kU8, {data.size()}, data)).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread})
    for (unsigned threads : {0u, 1u, 3u}) {
      ReaderOptions o;
      o.access = access;
      o.read_threads = threads;
      auto r = Reader::Open(path, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::vector<std::byte> out(data.size());
      ASSERT_TRUE((*r)->ReadInto("x", out, /*verify=*/true).ok());
      EXPECT_TRUE(out == data);
      auto t = (*r)->Get("x");
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_TRUE(std::equal(t->data.begin(), t->data.end(), data.begin(), data.end()));
    }
}

}  // namespace
}  // namespace tensorsafe::internal
