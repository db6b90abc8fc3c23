// The updater: staged operations against a model, abort, locking, snapshots
// held across commits, compaction and fault injection during commit.
#include <gtest/gtest.h>

#include <thread>

#include "support/fault_env.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "support/tsafe_image.h"
#include "support/update_model.h"
#include "tensorsafe/updater.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

UpdaterOptions Fast() {
  UpdaterOptions o;
  o.sync = false;
  return o;
}

Model Initial() {
  Model m;
  for (int i = 0; i < 3; ++i) {
    ModelTensor t{DType::kF32, {2, 2}, std::string(16, static_cast<char>('a' + i)), ""};
    m.order.push_back("w" + std::to_string(i));
    m.tensors["w" + std::to_string(i)] = t;
  }
  m.tensors["w1"].metadata = R"({"keep":true})";
  m.metadata = R"({"step":1})";
  return m;
}

TEST(Updater, OperationsMatchTheModel) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  Model m = Initial();
  ASSERT_TRUE(WriteModel(path, m).ok());
  const std::uint64_t seed = std::random_device{}();
  std::printf("Updater.OperationsMatchTheModel seed %llu\n", static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto u = Updater::Open(path, Fast());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  for (int txn = 0; txn < 60; ++txn) {
    const Model prev = m;
    const std::uint64_t seq = (*u)->sequence();
    Status s = RandomTransaction(rng, m, u->get());
    ASSERT_TRUE(s.ok()) << "txn " << txn << ": " << s.ToString();
    auto got = LoadModel(path);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(*got, m) << "txn " << txn << "\n got " << Describe(*got) << "\nwant " << Describe(m);
    // A commit with changes takes the next sequence; one with none (every
    // drawn op was skipped) writes nothing.
    if (!(m == prev)) {
      ASSERT_EQ((*u)->sequence(), seq + 1) << "txn " << txn;
    } else {
      ASSERT_LE((*u)->sequence(), seq + 1) << "txn " << txn;
    }
  }
}

TEST(Updater, StagedViewAndErrors) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  ASSERT_TRUE(WriteModel(path, Initial()).ok());
  auto u = Updater::Open(path, Fast());
  ASSERT_TRUE(u.ok());
  const float v[2] = {1, 2};
  auto view = TensorView::Contiguous(DType::kF32, {2}, std::as_bytes(std::span(v)));
  Status s = (*u)->Add("w0", view);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": tensor \"w0\" already exists");
  s = (*u)->Replace("nope", view);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), path + ": no tensor named \"nope\"");
  EXPECT_EQ((*u)->Rename("w0", "w1").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*u)->Remove("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ((*u)->SetTensorMetadata("w0", "[]").code(), StatusCode::kInvalidArgument);
  // Replace keeps metadata unless given; Find shows the staged state.
  ASSERT_TRUE((*u)->Replace("w1", view).ok());
  auto f = (*u)->Find("w1");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->shape, Shape{2});
  EXPECT_EQ(f->metadata_json, R"({"keep":true})");
  ASSERT_TRUE((*u)->MergeTensorMetadata("w1", R"({"keep":null,"new":[1]})").ok());
  EXPECT_EQ((*u)->Find("w1")->metadata_json, R"({"new":[1]})");
  ASSERT_TRUE((*u)->MergeMetadata(R"({"step":null,"lr":0.5})").ok());
  EXPECT_EQ(*(*u)->Metadata(), R"({"lr":0.5})");
  ASSERT_TRUE((*u)->Rename("w1", "renamed").ok());
  EXPECT_FALSE((*u)->Contains("w1"));
  EXPECT_TRUE((*u)->Contains("renamed"));
  ASSERT_TRUE((*u)->Commit().ok());
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->order, (std::vector<std::string>{"w0", "renamed", "w2"}));
  EXPECT_EQ(m->metadata, R"({"lr":0.5})");
  EXPECT_EQ(m->tensors["renamed"].metadata, R"({"new":[1]})");
}

TEST(Updater, AbortLeavesTheFileAsItWas) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  ASSERT_TRUE(WriteModel(path, Initial()).ok());
  const std::string before = ReadFileBytes(path);
  {
    auto u = Updater::Open(path, Fast());
    ASSERT_TRUE(u.ok());
    std::vector<std::uint8_t> big(1 << 20, 7);
    ASSERT_TRUE((*u)->Add("big", TensorView::Contiguous(DType::kU8, {big.size()}, std::as_bytes(std::span(big)))).ok());
    ASSERT_TRUE((*u)->Remove("w0").ok());
    (*u)->Abort();
    EXPECT_FALSE((*u)->has_changes());
    EXPECT_TRUE((*u)->Contains("w0"));
    ASSERT_TRUE((*u)->Remove("w2").ok());
    // destroyed with a staged change: aborted too
  }
  EXPECT_EQ(ReadFileBytes(path), before);
}

// A live slot whose sequence is 2^64 - 1 has no successor (FORMAT.md §10.1
// step 4): a commit there would write sequence 0, an empty slot, and the
// file would silently keep its old state while Commit said OK (found by
// tsafe_update_fuzz). The commit is refused before anything is written, the
// file stays as it was, and compact rewrites it from sequence 1.
TEST(Updater, LastSequenceRefusesToCommitAndCompactResets) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  ASSERT_TRUE(WriteModel(path, Initial()).ok());
  TsafeImage img(ReadFileBytes(path));
  img.Set64(32, ~std::uint64_t{0});  // slot 0's sequence
  img.Reseal();
  WriteFileBytes(path, img.bytes());
  const std::string before = ReadFileBytes(path);
  {
    auto u = Updater::Open(path, Fast());
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ((*u)->sequence(), ~std::uint64_t{0});
    std::vector<float> x = {1, 2};
    ASSERT_TRUE((*u)->Add("x", TensorView::Contiguous(DType::kF32, {2}, std::as_bytes(std::span(x)))).ok());
    EXPECT_STATUS((*u)->Commit(), StatusCode::kOutOfRange,
                  path +
                      ": the live header slot's sequence is 18446744073709551615, the last one: no commit can "
                      "follow it (`tensorsafe compact` rewrites the file from sequence 1)");
  }
  EXPECT_EQ(ReadFileBytes(path), before);
  ASSERT_TRUE(Compact(path, Fast()).ok());
  auto u = Updater::Open(path, Fast());
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)->sequence(), 1u);
  ASSERT_TRUE((*u)->Remove("w0").ok());
  ASSERT_TRUE((*u)->Commit().ok());
  Model want = Initial();
  want.tensors.erase("w0");
  want.order.erase(want.order.begin());
  auto got = LoadModel(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, want) << Describe(*got);
}

TEST(Updater, OneWriterAtATime) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  ASSERT_TRUE(WriteModel(path, Initial()).ok());
  auto first = Updater::Open(path, Fast());
  ASSERT_TRUE(first.ok());
  auto second = Updater::Open(path, Fast());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(), path + ": another updater holds the lock (waited 0 ms)");
  // A waiter gets the lock once the holder is gone.
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    first->reset();
  });
  UpdaterOptions wait = Fast();
  wait.lock_timeout = std::chrono::milliseconds(5000);
  auto third = Updater::Open(path, wait);
  release.join();
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(Updater, ReadersKeepTheirSnapshotAcrossCommits) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  Model m = Initial();
  ASSERT_TRUE(WriteModel(path, m).ok());
  ReaderOptions pread;
  pread.access = ReaderOptions::Access::kPread;
  std::vector<std::pair<std::shared_ptr<Reader>, Model>> snapshots;
  auto u = Updater::Open(path, Fast());
  ASSERT_TRUE(u.ok());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 8; ++i) {
    snapshots.push_back({*Reader::Open(path), m});
    snapshots.push_back({*Reader::Open(path, pread), m});
    ASSERT_TRUE(RandomTransaction(rng, m, u->get()).ok());
  }
  for (auto& [r, want] : snapshots) {
    ASSERT_TRUE(r->Verify().ok());
    auto names = r->Names();
    ASSERT_TRUE(names.ok());
    EXPECT_EQ(*names, want.order);
    for (const auto& [name, t] : want.tensors) {
      auto g = r->Get(name);
      ASSERT_TRUE(g.ok());
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(g->data.data()), g->data.size()), t.bytes);
    }
  }
  EXPECT_EQ(*LoadModel(path), m);
}

TEST(Updater, CompactReclaimsDeadSpace) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  Model m = Initial();
  ASSERT_TRUE(WriteModel(path, m).ok());
  {
    auto u = Updater::Open(path, Fast());
    std::mt19937_64 rng(11);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(RandomTransaction(rng, m, u->get()).ok());
  }
  auto old_reader = Reader::Open(path);
  ASSERT_TRUE(old_reader.ok());
  const FileSummary before = (*old_reader)->summary();
  EXPECT_GT(before.unused_bytes, 0u);
  auto c = Compact(path, Fast());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bytes_before, before.file_size);
  EXPECT_GT(c->bytes_reclaimed(), 0u);
  EXPECT_EQ(*LoadModel(path), m);
  auto after = Reader::Open(path);
  EXPECT_EQ((*after)->summary().sequence, 1u);
  EXPECT_LT((*after)->summary().unused_bytes, before.unused_bytes);
  // The reader of the replaced file still serves its snapshot.
  EXPECT_TRUE((*old_reader)->Verify().ok());
}

TEST(Updater, FaultsDuringCommitKeepThePreviousState) {
  TempDir dir;
  const std::string path = dir.File("u.tsafe");
  Model m = Initial();
  ASSERT_TRUE(WriteModel(path, m).ok());
  // Count the operations of one commit, then fail each in turn.
  std::int64_t total = 0;
  {
    FaultEnv env;
    Model copy = m;
    std::mt19937_64 rng(5);
    const std::string probe = dir.File("probe.tsafe");
    ASSERT_TRUE(WriteModel(probe, m).ok());
    auto u = Updater::Open(probe, UpdaterOptions{.env = &env});
    ASSERT_TRUE(u.ok());
    ASSERT_TRUE(RandomTransaction(rng, copy, u->get()).ok());
    total = env.writes;
    EXPECT_EQ(env.syncs, 2);  // one before the slot switch, one after
  }
  ASSERT_GE(total, 2);
  for (int mode = 0; mode < 3; ++mode) {
    for (std::int64_t n = 1; n <= (mode == 2 ? 1 : total); ++n) {
      FaultEnv env;
      if (mode == 0) env.fail_write = n;
      if (mode == 1) {
        env.fail_write = n;
        env.short_write = true;
      }
      if (mode == 2) env.fail_sync = 1;
      Model copy = m;
      std::mt19937_64 rng(5);
      auto u = Updater::Open(path, UpdaterOptions{.env = &env});
      ASSERT_TRUE(u.ok());
      Status s = RandomTransaction(rng, copy, u->get());
      EXPECT_EQ(s.code(), StatusCode::kIOError) << "mode " << mode << " op " << n;
      u->reset();
      auto got = LoadModel(path);
      ASSERT_TRUE(got.ok()) << "mode " << mode << " op " << n << ": " << got.status().ToString();
      EXPECT_EQ(*got, m) << "mode " << mode << " op " << n;
    }
  }
  // A failed final sync leaves the updater unusable until reopened.
  FaultEnv env;
  env.fail_sync = 2;
  auto u = Updater::Open(path, UpdaterOptions{.env = &env});
  ASSERT_TRUE(u.ok());
  Model copy = m;
  std::mt19937_64 rng(5);
  EXPECT_EQ(RandomTransaction(rng, copy, u->get()).code(), StatusCode::kIOError);
  const float v = 1;
  EXPECT_EQ((*u)->Add("x", TensorView::Contiguous(DType::kF32, {1}, std::as_bytes(std::span(&v, 1)))).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tensorsafe::testing
