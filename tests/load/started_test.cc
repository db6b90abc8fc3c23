// StartedLoad (load.h): the load on threads of its own, with where each
// tensor lands known before the bytes are; Finish gives Load()'s result and
// errors; WaitFaulted returns once the arena is resident; Cancel and the
// destructor stop the reads and wait for them.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include "formats/codec_test_util.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/load.h"

namespace tensorsafe::testing {
namespace {

// `count` tensors of `bytes` random bytes each, written as .tsafe.
std::string WriteSet(TempDir& dir, const std::string& name, int count, std::size_t bytes) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(count) * 131 + bytes);
  TensorSet set;
  for (int i = 0; i < count; ++i) {
    std::string data(bytes, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    set.tensors.push_back(MakeTensor("t" + std::to_string(i), DType::kU8, {bytes}, data));
  }
  const std::string path = dir.File(name);
  EXPECT_TRUE(WriteTensorSet(path, set, Format::kTsafe).ok());
  return path;
}

Result<LoadPlan> Plan(const std::string& path) {
  std::vector<std::string> paths{path};
  return PlanLoad(paths);
}

LoadOptions Direct() {
  LoadOptions o;
  o.cached_buffered = false;
  return o;
}

// A load that takes a while: 4 KiB O_DIRECT requests, one at a time.
LoadOptions SlowReads() {
  LoadOptions o = Direct();
  o.request_bytes = 4096;
  o.io_threads = 1;
  return o;
}

TEST(StartedLoad, TargetsKnownAtStartHoldLoadsBytesAtFinish) {
  TempDir dir;
  const std::string path = WriteSet(dir, "s.tsafe", 300, 10000);
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto want = Load(*plan, Direct());
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  auto started = StartedLoad::Start(*plan, Direct());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  StartedLoad& s = **started;
  ASSERT_EQ(s.data().size(), plan->items.size());
  const std::vector<std::span<std::byte>> targets(s.data().begin(), s.data().end());
  const std::span<std::byte> arena = s.arena()->bytes();
  for (std::size_t i = 0; i < targets.size(); ++i) {
    ASSERT_EQ(targets[i].size(), plan->items[i].bytes) << i;
    ASSERT_GE(targets[i].data(), arena.data()) << i;
    ASSERT_LE(targets[i].data() + targets[i].size(), arena.data() + arena.size()) << i;
  }
  auto got = s.Finish();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->arena.get(), s.arena().get());
  EXPECT_EQ(got->report.verification, "verified 300 of 300 tensors (XXH3-64)");
  EXPECT_EQ(got->report.bytes, plan->bytes);
  EXPECT_GE(got->report.bytes_read, plan->bytes);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    ASSERT_EQ(got->data[i].data(), targets[i].data()) << i;
    ASSERT_EQ(std::memcmp(got->data[i].data(), want->data[i].data(), targets[i].size()), 0) << i;
  }
  EXPECT_STATUS(s.Finish(), StatusCode::kFailedPrecondition, "finished or cancelled already");
}

TEST(StartedLoad, ErrorsAtStartAndAtFinish) {
  TempDir dir;
  const std::string path = WriteSet(dir, "e.tsafe", 8, 20000);
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  // The file is gone before the load starts: Start names it.
  std::filesystem::rename(path, path + ".away");
  EXPECT_STATUS(StartedLoad::Start(*plan, Direct()), StatusCode::kIOError, "e.tsafe: open: ");
  std::filesystem::rename(path + ".away", path);
  // A flipped byte: Start succeeds, Finish names the tensor.
  const LoadItem& victim = plan->items[5];
  std::string bytes = ReadFileBytes(path);
  bytes[victim.info.data_offset + 7] ^= 0x01;
  WriteFileBytes(path, bytes);
  auto started = StartedLoad::Start(*plan, Direct());
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_STATUS((*started)->Finish(), StatusCode::kCorruption,
                "e.tsafe: tensor \"" + victim.info.name + "\" (offset " + std::to_string(victim.info.data_offset) +
                    ", 20000 bytes): data checksum");
  LoadOptions bad = Direct();
  bad.request_bytes = 1000;
  EXPECT_STATUS(StartedLoad::Start(*plan, bad), StatusCode::kInvalidArgument,
                "request_bytes 1000 is not a positive multiple of 4096");
}

// Cancel, asked at once of a load of 48 MiB in 4 KiB requests, returns with
// its threads joined (a thread left joinable would end the process), and
// Finish then refuses; a load dropped unfinished does the same in its
// destructor. ASan sees the threads and the arena go.
TEST(StartedLoad, CancelAndDestructorStopTheReads) {
  TempDir dir;
  const std::string path = WriteSet(dir, "c.tsafe", 48, std::size_t{1} << 20);
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  const LoadOptions o = SlowReads();  // 12,288 requests
  auto started = StartedLoad::Start(*plan, o);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  (*started)->Cancel();
  EXPECT_STATUS((*started)->Finish(), StatusCode::kFailedPrecondition, "finished or cancelled already");
  (*started)->Cancel();  // again: nothing left to stop
  for (int round = 0; round < 3; ++round) {
    auto dropped = StartedLoad::Start(*plan, o);
    ASSERT_TRUE(dropped.ok());
  }
  // And a load let run to the end still verifies every tensor.
  auto whole = StartedLoad::Start(*plan, Direct());
  ASSERT_TRUE(whole.ok());
  auto got = (*whole)->Finish();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->report.verified, 48u);
}

// Pages of `bytes` not resident (mincore).
std::size_t Absent(std::span<std::byte> bytes) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes.size() + page - 1) / page);
  EXPECT_EQ(::mincore(bytes.data(), bytes.size(), in.data()), 0);
  std::size_t absent = 0;
  for (unsigned char c : in) absent += !(c & 1);
  return absent;
}

// With prefault, WaitFaulted returns with every page of the arena resident
// while the reads (48 MiB in 4 KiB requests on one thread) still run;
// without it, at once.
TEST(StartedLoad, WaitFaultedMeansTheArenaIsResident) {
  TempDir dir;
  const std::string path = WriteSet(dir, "w.tsafe", 48, std::size_t{1} << 20);
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  LoadOptions o = SlowReads();
  auto started = StartedLoad::Start(*plan, o);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  (*started)->WaitFaulted();
  EXPECT_EQ(Absent((*started)->arena()->bytes()), 0u);
  auto got = (*started)->Finish();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->report.verified, 48u);

  o.prefault = false;
  auto lazy = StartedLoad::Start(*plan, o);
  ASSERT_TRUE(lazy.ok());
  (*lazy)->WaitFaulted();  // nothing to wait for
  ASSERT_TRUE((*lazy)->Finish().ok());
}

}  // namespace
}  // namespace tensorsafe::testing
