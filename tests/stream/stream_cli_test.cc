// The built `tensorsafe` binary: `send a.tsafe - | recv - b.tsafe` copies a
// file through a pipe exactly; `lmdb put|get|ls|rm`.
#include <gtest/gtest.h>

#include <cstring>

#include "stream/stream_test_util.h"
#include "support/cli_runner.h"
#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

using Output = testing::CliOutput;

class StreamCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
    src_ = dir_.File("a.tsafe");
    auto w = Writer::Create(src_);
    ASSERT_TRUE(w.ok());
    const TensorSet b = testing::AllDTypesBatch(7);
    for (const Tensor& t : b.tensors) {
      ASSERT_TRUE(
          (*w)->Add(t.info.name, TensorView::Contiguous(t.info.dtype, t.info.shape, t.data), t.info.metadata_json)
              .ok());
    }
    ASSERT_TRUE((*w)->SetMetadata(b.metadata_json).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }

  // Runs a shell command line where "TS" stands for the binary.
  Output Sh(std::string cmd) {
    for (std::size_t at; (at = cmd.find("TS ")) != std::string::npos;) cmd.replace(at, 2, TS_CLI_PATH);
    return testing::RunShell(cmd);
  }

  // Every name, dtype, shape, byte, per-tensor and file metadata equal.
  void ExpectSameFile(const std::string& a, const std::string& b) {
    auto ra = Reader::Open(a), rb = Reader::Open(b);
    ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().ToString();
    EXPECT_EQ(*(*ra)->Metadata(), *(*rb)->Metadata());
    EXPECT_TRUE((*rb)->Verify().ok());
    auto na = (*ra)->Names(), nb = (*rb)->Names();
    ASSERT_EQ(*na, *nb);
    for (const std::string& n : *na) {
      auto ta = (*ra)->Get(n), tb = (*rb)->Get(n);
      ASSERT_TRUE(ta.ok() && tb.ok());
      EXPECT_EQ(ta->info.dtype, tb->info.dtype) << n;
      EXPECT_EQ(ta->info.shape, tb->info.shape) << n;
      EXPECT_EQ(ta->info.metadata_json, tb->info.metadata_json) << n;
      EXPECT_EQ(ta->info.data_checksum, tb->info.data_checksum) << n;
      ASSERT_EQ(ta->data.size(), tb->data.size()) << n;
      EXPECT_EQ(std::memcmp(ta->data.data(), tb->data.data(), ta->data.size()), 0) << n;
    }
  }

  testing::TempDir dir_;
  std::string src_;
};

TEST_F(StreamCliTest, SendRecvThroughAPipeCopiesTheFile) {
  const std::string out = dir_.File("b.tsafe");
  Output o = Sh("TS send " + src_ + " - | TS recv - " + out);
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameFile(src_, out);
  // In batches of 4 tensors, too.
  const std::string out4 = dir_.File("c.tsafe");
  o = Sh("TS send --batch 4 " + src_ + " - | TS recv - " + out4);
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameFile(src_, out4);
  o = Sh("TS send --batch 4 " + src_ + " - | TS recv -");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("batch 6: 3 tensors"), std::string::npos) << o.out;  // 27 tensors
}

TEST_F(StreamCliTest, TruncatedStreamFailsWithCorruption) {
  const std::string out = dir_.File("b.tsafe");
  Output o = Sh("TS send " + src_ + " - | head -c 1000 | TS recv - " + out);
  EXPECT_EQ(o.rc, 1) << o.err;
  EXPECT_NE(o.err.find("truncated"), std::string::npos) << o.err;
  EXPECT_FALSE(std::filesystem::exists(out)) << "no partial output file";
}

TEST_F(StreamCliTest, LmdbPutGetLsRm) {
  const std::string db = dir_.File("db");
  Output o = Sh("TS lmdb put " + db + " " + src_ + " --prefix a/");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("stored 27 batches"), std::string::npos) << o.out;
  o = Sh("TS lmdb put " + db + " " + src_ + " --key whole");
  ASSERT_EQ(o.rc, 0) << o.err;
  o = Sh("TS lmdb ls " + db);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("a/f32 "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("whole"), std::string::npos) << o.out;
  o = Sh("TS lmdb ls " + db + " a/u");
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1 + 5) << o.out;  // u8 u16 u32 u64 u4
  const std::string out = dir_.File("whole.tsafe");
  o = Sh("TS lmdb get " + db + " whole " + out);
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameFile(src_, out);
  o = Sh("TS lmdb get " + db + " a/bf16");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("bf16  [4, 3]  24"), std::string::npos) << o.out;
  o = Sh("TS lmdb rm " + db + " whole");
  ASSERT_EQ(o.rc, 0) << o.err;
  o = Sh("TS lmdb get " + db + " whole");
  EXPECT_EQ(o.rc, 3) << o.err;  // not found
  o = Sh("TS lmdb ls " + dir_.File("nope"));
  EXPECT_EQ(o.rc, 3) << o.err;
}

}  // namespace
}  // namespace tensorsafe
