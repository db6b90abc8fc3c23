// Fault injection through the file seam: failed writes, short writes, failed
// syncs and renames make Finish() fail, leave no temp file and leave the old
// destination as it was; short reads give an error, not garbage.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/fault_env.h"
#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

Status WriteSome(const std::string& path, Env* env) {
  WriterOptions wo;
  wo.env = env;
  auto w = Writer::Create(path, wo);
  if (!w.ok()) return w.status();
  std::vector<float> big(5 << 18, 2.5f);  // 5 MiB: hashed on the background thread while it is written
  TS_RETURN_IF_ERROR(
      (*w)->Add("big", TensorView::Contiguous(DType::kF32, {big.size()}, std::as_bytes(std::span(big)))));
  std::vector<float> mid(1 << 19, 1.5f);  // 2 MiB: several writes, hashed here
  TS_RETURN_IF_ERROR(
      (*w)->Add("mid", TensorView::Contiguous(DType::kF32, {mid.size()}, std::as_bytes(std::span(mid)))));
  const std::uint8_t b = 1;
  TS_RETURN_IF_ERROR((*w)->Add("small", TensorView{DType::kU8, {}, reinterpret_cast<const std::byte*>(&b), {}}));
  return (*w)->Finish();
}

// kMany tensors of 1 KiB: the data leaves in 1 MiB buffers appended by the
// writer's background thread, which queues up to three, so a failed append
// reaches an Add at the latest three buffers later: 8 buffers make sure the
// first data chunk's failure does. *failed_at: which call failed (0 to
// kMany - 1 for Add, kMany for Finish).
constexpr int kMany = 8000;
Status WriteMany(const std::string& path, Env* env, int* failed_at) {
  WriterOptions wo;
  wo.env = env;
  auto w = Writer::Create(path, wo);
  if (!w.ok()) return w.status();
  std::vector<float> v(256);
  for (int i = 0; i < kMany; ++i) {
    v[0] = static_cast<float>(i);
    Status s =
        (*w)->Add("t" + std::to_string(i), TensorView::Contiguous(DType::kF32, {256}, std::as_bytes(std::span(v))));
    if (!s.ok()) {
      *failed_at = i;
      // The writer is done for: later calls say so instead of writing.
      Status next = (*w)->Add("after", TensorView::Contiguous(DType::kF32, {256}, std::as_bytes(std::span(v))));
      if (next.code() != StatusCode::kFailedPrecondition)
        return Internal("Add after a failed write: " + next.ToString());
      return s;
    }
  }
  *failed_at = kMany;
  return (*w)->Finish();
}

int CountFiles(const TempDir& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(Fault, EachFailedWriteLeavesNothing) {
  TempDir dir;
  const std::string path = dir.File("out.tsafe");
  WriteFileBytes(path, "previous");
  FaultEnv counting;
  ASSERT_TRUE(WriteSome(dir.File("count.tsafe"), &counting).ok());
  const std::int64_t total = counting.writes;
  ASSERT_GE(total, 3);
  std::filesystem::remove(dir.File("count.tsafe"));
  for (bool short_write : {false, true}) {
    for (std::int64_t n = 1; n <= total; ++n) {
      FaultEnv env;
      env.fail_write = n;
      env.short_write = short_write;
      env.error_number = ENOSPC;
      Status s = WriteSome(path, &env);
      ASSERT_EQ(s.code(), StatusCode::kIOError) << "write " << n;
      EXPECT_EQ(s.error_number(), ENOSPC);
      EXPECT_NE(s.message().find("injected failure"), std::string::npos);
      EXPECT_EQ(ReadFileBytes(path), "previous");
      EXPECT_EQ(CountFiles(dir), 1) << "temp file left after failed write " << n;
    }
  }
}

TEST(Fault, FailedBackgroundWriteIsReportedByALaterCall) {
  TempDir dir;
  const std::string path = dir.File("out.tsafe");
  WriteFileBytes(path, "previous");
  FaultEnv counting;
  int at = -1;
  ASSERT_TRUE(WriteMany(dir.File("count.tsafe"), &counting, &at).ok());
  const std::int64_t total = counting.writes;
  ASSERT_GE(total, 4);  // header and data chunks, index
  std::filesystem::remove(dir.File("count.tsafe"));
  bool some_add_failed = false;
  for (std::int64_t n = 1; n <= total; ++n) {
    FaultEnv env;
    env.fail_write = n;
    env.error_number = ENOSPC;
    Status s = WriteMany(path, &env, &at);
    ASSERT_EQ(s.code(), StatusCode::kIOError) << "write " << n << ": " << s.ToString();
    EXPECT_EQ(s.error_number(), ENOSPC);
    EXPECT_NE(s.message().find("injected failure"), std::string::npos);
    some_add_failed |= at < kMany;
    EXPECT_EQ(ReadFileBytes(path), "previous");
    EXPECT_EQ(CountFiles(dir), 1) << "temp file left after failed write " << n;
  }
  // A failed data chunk is reported by an Add, not only by Finish.
  EXPECT_TRUE(some_add_failed);
}

TEST(Fault, FailedSyncAndRename) {
  TempDir dir;
  const std::string path = dir.File("out.tsafe");
  WriteFileBytes(path, "previous");
  {
    FaultEnv env;
    env.fail_sync = 1;
    Status s = WriteSome(path, &env);
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find("fdatasync: injected failure"), std::string::npos);
  }
  {
    FaultEnv env;
    env.fail_rename = true;
    Status s = WriteSome(path, &env);
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find("cannot rename"), std::string::npos);
  }
  EXPECT_EQ(ReadFileBytes(path), "previous");
  EXPECT_EQ(CountFiles(dir), 1);
  FaultEnv ok;
  ASSERT_TRUE(WriteSome(path, &ok).ok());
  EXPECT_EQ(ok.syncs, 1);
  EXPECT_TRUE(Reader::Open(path).ok());
}

TEST(Fault, ShortReadIsAnError) {
  TempDir dir;
  const std::string path = dir.File("out.tsafe");
  FaultEnv ok;
  ASSERT_TRUE(WriteSome(path, &ok).ok());
  FaultEnv env;
  env.short_read = true;
  ReaderOptions opt;
  opt.access = ReaderOptions::Access::kPread;
  opt.env = &env;
  auto r = Reader::Open(path, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("file shrank while reading"), std::string::npos);
}

}  // namespace
}  // namespace tensorsafe::testing
