// The loader (docs/LOAD.md): every tensor equal to a mapped read of the same
// file, with and without verification, through the fresh arena and through
// caller buffers; unaligned heads and tails at every offset mod 4096; a
// flipped byte named; O_DIRECT refused on tmpfs; a 3-shard checkpoint;
// names; row and column slices.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "formats/codec_test_util.h"
#include "load/internal.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/load.h"

namespace tensorsafe::testing {
namespace {

std::string RandomBytes(std::mt19937_64& rng, std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Tensors of awkward sizes: empty, a byte, odd, one just over a request.
TensorSet RandomSet(std::uint64_t seed, int count, std::size_t max_bytes) {
  std::mt19937_64 rng(seed);
  TensorSet set;
  for (int i = 0; i < count; ++i) {
    std::size_t n = i == 0 ? 0 : i == 1 ? 1 : rng() % max_bytes;
    set.tensors.push_back(MakeTensor("t" + std::to_string(i), DType::kU8, {n}, RandomBytes(rng, n)));
  }
  return set;
}

// Checks `got` (parallel to plan.items) against a mapped read of the files.
void ExpectSameAsMapped(const LoadPlan& plan, const std::vector<std::span<std::byte>>& got) {
  ASSERT_EQ(got.size(), plan.items.size());
  std::map<std::string, TensorSet> sets;
  for (std::size_t i = 0; i < plan.items.size(); ++i) {
    const LoadItem& it = plan.items[i];
    const std::string& path = plan.files[it.file].path;
    if (!sets.count(path)) {
      auto s = ReadTensorSet(path, plan.files[it.file].format);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      sets[path] = std::move(*s);
    }
    const Tensor* want = nullptr;
    for (const Tensor& t : sets[path].tensors) {
      if (t.info.name == it.info.name) want = &t;
    }
    ASSERT_NE(want, nullptr) << it.info.name;
    std::string expect;
    for (const LoadRange& r : it.ranges) {
      expect += Str(want->data.subspan(r.offset - want->info.data_offset, r.length));
    }
    ASSERT_EQ(Str(got[i]), expect) << "tensor " << it.info.name << " of " << path;
  }
}

// Test files were just written and sit in the page cache, where the loader
// would copy them from: most tests read them from the disk with O_DIRECT.
LoadOptions Direct() {
  LoadOptions o;
  o.cached_buffered = false;
  return o;
}

Result<LoadPlan> Plan(const std::string& path, PlanOptions o = {}) {
  std::vector<std::string> paths{path};
  return PlanLoad(paths, o);
}

// Caller buffers the size of each planned item, filled with `fill`.
struct Buffers {
  explicit Buffers(const LoadPlan& plan, char fill = '\0') {
    for (const LoadItem& it : plan.items) bufs.emplace_back(it.bytes, fill);
    for (std::string& b : bufs) outs.emplace_back(reinterpret_cast<std::byte*>(b.data()), b.size());
  }
  std::vector<std::string> bufs;
  std::vector<std::span<std::byte>> outs;
};

// Both ways in: the fresh arena and caller buffers.
void LoadBothWays(const LoadPlan& plan, LoadOptions o) {
  auto loaded = Load(plan, o);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameAsMapped(plan, loaded->data);
  Buffers b(plan, '\xee');
  auto rep = LoadInto(plan, b.outs, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ExpectSameAsMapped(plan, b.outs);
}

TEST(Load, EqualsMappedReadTsafeAndSafetensors) {
  TempDir dir;
  const TensorSet set = RandomSet(7, 40, 50000);
  for (Format f : {Format::kTsafe, Format::kSafetensors}) {
    const std::string path = dir.File(std::string("m.") + std::string(InfoOf(f).extensions[0]));
    ASSERT_TRUE(WriteTensorSet(path, set, f).ok());
    auto plan = Plan(path);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->items.size(), 40u);
    for (bool cached : {true, false}) {
      for (bool verify : {true, false}) {
        for (std::uint64_t req : {std::uint64_t{4} << 20, std::uint64_t{8192}}) {
          LoadOptions o;
          o.cached_buffered = cached;
          o.verify = verify;
          o.request_bytes = req;
          o.huge_pages = req == 8192;  // both page sizes of the arena
          LoadBothWays(*plan, o);
          auto r = Load(*plan, o);
          ASSERT_TRUE(r.ok());
          EXPECT_EQ(r->report.direct, std::vector<bool>{!cached});
          if (cached) EXPECT_EQ(r->report.buffered_reason[0], "in the page cache (mincore): copied from there");
        }
      }
    }
    auto loaded = Load(*plan, Direct());
    ASSERT_TRUE(loaded.ok());
    if (f == Format::kTsafe) {
      EXPECT_EQ(loaded->report.verified, 40u);
      EXPECT_EQ(loaded->report.verification, "verified 40 of 40 tensors (XXH3-64)");
    } else {
      EXPECT_EQ(loaded->report.verified, 0u);
      EXPECT_EQ(loaded->report.verification, "nothing to verify: safetensors stores no checksums");
    }
  }
}

// The VmFlags line of the /proc/self/smaps entry that starts at `addr`,
// "" when none does.
std::string VmFlagsAt(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  char want[32];
  std::snprintf(want, sizeof want, "%lx-", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(addr)));
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(want, 0) == 0) inside = true;
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool TransparentHugePagesOn() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(in, line) && line.find("[never]") == std::string::npos;
}

// huge_pages auto: where most of the last eight 2 MiB chunks fault slower
// than huge_page_min_gbps (here every chunk: the bar is out
// of reach), the rest of the arena takes 4 KiB pages (MADV_NOHUGEPAGE: its
// own mapping, flagged "nh"), and the report says from which byte.
// A few slow chunks in a fast run (the host taking the vCPU away) keep
// 2 MiB pages; most of the last eight slow switch.
TEST(Load, FaultWatchWantsMostRecentChunksSlow) {
  internal::FaultWatch w(1.0);
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(w.Slow(0.2)) << i;  // too few measures yet
  EXPECT_TRUE(w.Slow(0.2));
  EXPECT_DOUBLE_EQ(w.Median(), 0.2);
  internal::FaultWatch bursts(1.0);
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(bursts.Slow(0.2)) << round;  // four in a row
    for (int i = 0; i < 4; ++i) EXPECT_FALSE(bursts.Slow(8.0)) << round;
  }
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(bursts.Slow(0.2));
  EXPECT_TRUE(bursts.Slow(0.2));           // now five of the last eight
  EXPECT_DOUBLE_EQ(bursts.Median(), 0.2);  // the report's figure: not the last chunk's alone
  internal::FaultWatch mixed(1.0);
  for (double r : {0.1, 0.3, 0.5, 0.7, 2.0, 4.0, 6.0, 8.0}) mixed.Slow(r);
  EXPECT_DOUBLE_EQ(mixed.Median(), 1.35);
  internal::FaultWatch edge(1.0);
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(edge.Slow(1.0));  // at the bar is not under it
}

TEST(Load, ArenaTakesSmallPagesWhereHugeOnesFaultSlowly) {
  TempDir dir;
  const TensorSet set = RandomSet(11, 24, 8 << 20);  // about 90 MiB: eight chunks timed before all are claimed
  const std::string path = dir.File("m.tsafe");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kTsafe).ok());
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const bool thp = TransparentHugePagesOn();
  LoadOptions o = Direct();
  o.huge_page_min_gbps = 1e12;
  auto slow = Load(*plan, o);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  ExpectSameAsMapped(*plan, slow->data);
  if (thp) {
    const std::string& pages = slow->report.pages;
    const std::string head = "2 MiB, then 4 KiB from byte ";
    ASSERT_EQ(pages.substr(0, head.size()), head) << pages;
    const std::uint64_t from = std::stoull(pages.substr(head.size()));
    EXPECT_EQ(from % (2 << 20), 0u) << pages;
    EXPECT_GE(from, std::uint64_t{16} << 20) << pages;  // eight chunks measured first
    EXPECT_NE(pages.find(" (2 MiB pages faulted at "), std::string::npos) << pages;
    EXPECT_NE(pages.find(" GB/s, the median of the last 8 chunks)"), std::string::npos) << pages;
    const std::string flags = VmFlagsAt(slow->arena->bytes().data() + from);
    EXPECT_NE(flags.find(" nh"), std::string::npos) << flags;
    EXPECT_NE(VmFlagsAt(slow->arena->bytes().data()).find(" hg"), std::string::npos);
  } else {
    EXPECT_EQ(slow->report.pages, "4 KiB");
  }
  o.huge_page_min_gbps = 0;  // never slow
  auto fast = Load(*plan, o);
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(fast->report.pages, thp ? "2 MiB" : "4 KiB");
  o.huge_pages = false;
  auto small = Load(*plan, o);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->report.pages, "4 KiB");
  ExpectSameAsMapped(*plan, small->data);
  o.huge_pages.reset();
  o.prefault = false;  // no helper to time the faults: 4 KiB throughout
  auto unwatched = Load(*plan, o);
  ASSERT_TRUE(unwatched.ok());
  EXPECT_EQ(unwatched->report.pages, "4 KiB");
  Buffers b(*plan);
  auto into = LoadInto(*plan, b.outs, Direct());
  ASSERT_TRUE(into.ok());
  EXPECT_EQ(into->pages, "");  // no arena
}

// 4096 tensors of 4097 bytes: their first and last bytes fall at every
// offset mod 4096, read through both requests of 4 MiB and of 12 KiB
// (tensors straddling requests).
TEST(Load, UnalignedHeadsAndTailsAtEveryOffset) {
  TempDir dir;
  std::mt19937_64 rng(11);
  TensorSet set;
  for (int i = 0; i < 4096; ++i) {
    set.tensors.push_back(MakeTensor("u" + std::to_string(i), DType::kU8, {4097}, RandomBytes(rng, 4097)));
  }
  const std::string path = dir.File("u.safetensors");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kSafetensors).ok());
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  std::set<std::uint64_t> heads, tails;
  for (const LoadItem& it : plan->items) {
    heads.insert(it.info.data_offset % 4096);
    tails.insert((it.info.data_offset + it.bytes) % 4096);
  }
  EXPECT_EQ(heads.size(), 4096u);
  EXPECT_EQ(tails.size(), 4096u);
  for (std::uint64_t req : {std::uint64_t{4} << 20, std::uint64_t{12288}}) {
    LoadOptions o = Direct();
    o.request_bytes = req;
    LoadBothWays(*plan, o);
  }
}

TEST(Load, FlippedByteIsNamed) {
  TempDir dir;
  const TensorSet set = RandomSet(3, 8, 20000);
  const std::string path = dir.File("f.tsafe");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kTsafe).ok());
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  const LoadItem& victim = plan->items[5];
  std::string bytes = ReadFileBytes(path);
  bytes[victim.info.data_offset + victim.bytes / 2] ^= 0x10;
  WriteFileBytes(path, bytes);
  EXPECT_STATUS(Load(*plan, Direct()), StatusCode::kCorruption,
                "f.tsafe: tensor \"" + victim.info.name + "\" (offset " + std::to_string(victim.info.data_offset) +
                    ", " + std::to_string(victim.bytes) + " bytes): data checksum");
  Buffers b(*plan);
  EXPECT_STATUS(LoadInto(*plan, b.outs, Direct()), StatusCode::kCorruption, "tensor \"" + victim.info.name + "\"");
  LoadOptions off = Direct();
  off.verify = false;
  auto loaded = Load(*plan, off);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->report.verification, "not verified (verify=false)");
}

// From the page cache into caller buffers, verified, each reader hashes an
// item as it reads it, 256 KiB at a time (the request count shows which
// path ran); a byte flipped past the first 256 KiB is still named. Where
// one item holds over half the bytes, or the file is not known to be
// cached, the verifier thread checks instead.
TEST(Load, CachedBuffersAreHashedAsRead) {
  TempDir dir;
  std::mt19937_64 rng(13);
  TensorSet set;
  const std::size_t sizes[] = {300000, 700000, 0, 524288, 1, 450000};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    set.tensors.push_back(MakeTensor("h" + std::to_string(i), DType::kU8, {sizes[i]}, RandomBytes(rng, sizes[i])));
  }
  const std::string path = dir.File("h.tsafe");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kTsafe).ok());
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  Buffers b(*plan);
  auto rep = LoadInto(*plan, b.outs, LoadOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->direct, std::vector<bool>{false});
  EXPECT_EQ(rep->verified, 6u);
  EXPECT_EQ(rep->requests, 2u + 3u + 2u + 1u + 2u);  // ceil(bytes / 256 KiB) per item with bytes
  EXPECT_EQ(rep->bytes_read, 300000u + 700000 + 524288 + 1 + 450000);
  ExpectSameAsMapped(*plan, b.outs);
  // Beside a safetensors file, whose tensors have no checksum to check:
  // they are read in one pread each, not hashed.
  TensorSet plain;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    plain.tensors.push_back(MakeTensor("p" + std::to_string(i), DType::kU8, {sizes[i]}, RandomBytes(rng, sizes[i])));
  }
  const std::string st_path = dir.File("p.safetensors");
  ASSERT_TRUE(WriteTensorSet(st_path, plain, Format::kSafetensors).ok());
  std::vector<std::string> both{path, st_path};
  auto mixed = PlanLoad(both);
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  Buffers mixed_b(*mixed);
  auto mixed_rep = LoadInto(*mixed, mixed_b.outs, LoadOptions{});
  ASSERT_TRUE(mixed_rep.ok()) << mixed_rep.status().ToString();
  EXPECT_EQ(mixed_rep->verified, 6u);
  EXPECT_EQ(mixed_rep->unverifiable, 6u);
  EXPECT_EQ(mixed_rep->requests, 10u + 5u);  // hashed 256 KiB reads of h.tsafe, one pread per p.safetensors tensor
  ExpectSameAsMapped(*mixed, mixed_b.outs);
  // Not known to be cached, read through the page cache all the same: the
  // queue of requests, one pread per piece, and a verifier.
  LoadOptions uncached;
  uncached.direct = false;
  uncached.cached_buffered = false;
  auto queued = LoadInto(*plan, b.outs, uncached);
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  EXPECT_EQ(queued->verified, 6u);
  EXPECT_EQ(queued->requests, 5u);
  ExpectSameAsMapped(*plan, b.outs);

  const LoadItem& victim = plan->items[1];
  ASSERT_EQ(victim.bytes, 700000u);
  std::string bytes = ReadFileBytes(path);
  bytes[victim.info.data_offset + 600000] ^= 0x01;
  WriteFileBytes(path, bytes);
  EXPECT_STATUS(
      LoadInto(*plan, b.outs, LoadOptions{}), StatusCode::kCorruption,
      "h.tsafe: tensor \"h1\" (offset " + std::to_string(victim.info.data_offset) + ", 700000 bytes): data checksum");

  // One item over half the bytes: the queue of requests and a verifier.
  TensorSet big;
  big.tensors.push_back(MakeTensor("big", DType::kU8, {2000000}, RandomBytes(rng, 2000000)));
  big.tensors.push_back(MakeTensor("small", DType::kU8, {1000}, RandomBytes(rng, 1000)));
  const std::string big_path = dir.File("big.tsafe");
  ASSERT_TRUE(WriteTensorSet(big_path, big, Format::kTsafe).ok());
  auto big_plan = Plan(big_path);
  ASSERT_TRUE(big_plan.ok());
  Buffers big_b(*big_plan);
  auto big_rep = LoadInto(*big_plan, big_b.outs, LoadOptions{});
  ASSERT_TRUE(big_rep.ok()) << big_rep.status().ToString();
  EXPECT_EQ(big_rep->verified, 2u);
  EXPECT_EQ(big_rep->requests, 2u);  // one pread per piece of the one 4 MiB request
  ExpectSameAsMapped(*big_plan, big_b.outs);
}

// tmpfs refuses O_DIRECT with EINVAL before Linux 6.6 and takes it since;
// either way the load is right and the report says which reads it made.
// The refusal itself is simulated too, so the fallback runs on any kernel.
TEST(Load, TmpfsAndRefusedDirectFallBack) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string path = "/dev/shm/tensorsafe_load_test_" + std::to_string(::getpid()) + ".tsafe";
  ASSERT_TRUE(WriteTensorSet(path, RandomSet(5, 10, 30000), Format::kTsafe).ok());
  auto plan = Plan(path);
  ASSERT_TRUE(plan.ok());
  const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  const bool tmpfs_direct = probe >= 0;
  if (probe >= 0) ::close(probe);
  for (int refuse : {0, EINVAL}) {
    LoadOptions o = Direct();
    o.refuse_direct_errno = refuse;
    auto loaded = Load(*plan, o);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    ExpectSameAsMapped(*plan, loaded->data);
    ASSERT_EQ(loaded->report.direct.size(), 1u);
    const bool direct = tmpfs_direct && refuse == 0;
    EXPECT_EQ(loaded->report.direct[0], direct);
    if (!direct) {
      EXPECT_EQ(loaded->report.buffered_reason[0], "O_DIRECT refused by the file system (Invalid argument)");
    }
    EXPECT_EQ(loaded->report.verified, 10u);
    LoadBothWays(*plan, o);
  }
  std::filesystem::remove(path);
}

TEST(Load, ThreeShardCheckpointInOneQueue) {
  TempDir dir;
  for (Format f : {Format::kSafetensors, Format::kTsafe}) {
    const std::string sub = dir.File(std::string(FormatName(f)));
    sharded::WriteOptions w;
    w.format = f;
    w.max_shard_size = 40000;  // 4 tensors of 10,000 bytes a shard
    std::mt19937_64 rng(9);
    TensorSet set;
    for (int i = 0; i < 12; ++i) {
      set.tensors.push_back(MakeTensor("s" + std::to_string(i), DType::kU8, {10000}, RandomBytes(rng, 10000)));
    }
    auto st = sharded::WriteSharded(sub, set, w);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(st->files.size(), 3u);
    auto plan = Plan(sub);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->files.size(), st->files.size());
    EXPECT_EQ(plan->items.size(), 12u);
    for (std::size_t i = 1; i < plan->items.size(); ++i) {
      const LoadItem &a = plan->items[i - 1], &b = plan->items[i];
      EXPECT_TRUE(a.file < b.file || (a.file == b.file && a.info.data_offset < b.info.data_offset));
    }
    LoadBothWays(*plan, Direct());
    auto loaded = Load(*plan, Direct());
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(loaded->report.verified, f == Format::kTsafe ? 12u : 0u);
    // The plan checks every shard's header against the weight map, as
    // safe_open does: an index that maps a tensor to the wrong shard fails.
    const std::string ext(InfoOf(f).extensions[0]);
    const std::string index = sub + "/model." + ext + ".index.json";
    std::string text = ReadFileBytes(index);
    const std::string from = "\"s0\": \"model-00001-of-00003." + ext + "\"";
    const std::size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, from.size(), "\"s0\": \"model-00002-of-00003." + ext + "\"");
    WriteFileBytes(index, text);
    EXPECT_STATUS(Plan(sub), StatusCode::kCorruption,
                  "index.json: shard \"model-00001-of-00003." + ext +
                      "\" holds tensor \"s0\", which the index maps to shard \"model-00002-of-00003." + ext + "\"");
  }
}

TEST(Load, NamesAndErrors) {
  TempDir dir;
  const std::string path = dir.File("n.tsafe");
  ASSERT_TRUE(WriteTensorSet(path, RandomSet(1, 6, 1000), Format::kTsafe).ok());
  PlanOptions o;
  o.names = {"t4", "t2"};
  auto plan = Plan(path, o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->items.size(), 2u);
  EXPECT_EQ(plan->items[0].info.name, "t2");
  LoadBothWays(*plan, Direct());
  o.names = {"t2", "nope"};
  EXPECT_STATUS(Plan(path, o), StatusCode::kNotFound, "no tensor \"nope\" in " + path);
  o.names = std::vector<std::string>{};  // none, not all
  plan = Plan(path, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->items.empty());
  EXPECT_EQ(plan->files.size(), 1u);
  std::vector<std::string> twice{path, path};
  EXPECT_STATUS(PlanLoad(twice), StatusCode::kInvalidArgument, "is in both");
  const std::string npz = dir.File("x.npz");
  ASSERT_TRUE(WriteTensorSet(npz, RandomSet(1, 2, 10), Format::kNpz).ok());
  EXPECT_STATUS(Plan(npz), StatusCode::kUnsupported,
                "not npz; tensorsafe.safe_open or tensorsafe.read reads it (C++: ReadTensorSet)");
  auto good = Plan(path);
  ASSERT_TRUE(good.ok());
  std::vector<std::span<std::byte>> none;
  EXPECT_STATUS(LoadInto(*good, none), StatusCode::kInvalidArgument, "6 tensors but 0 buffers");
  std::string small(3, '\0');
  std::vector<std::span<std::byte>> outs(6);
  outs[3] = {reinterpret_cast<std::byte*>(small.data()), small.size()};
  for (std::size_t i = 0; i < 6; ++i) {
    if (i != 3) outs[i] = {reinterpret_cast<std::byte*>(small.data()), 0};
  }
  EXPECT_STATUS(LoadInto(*good, outs), StatusCode::kInvalidArgument, "bytes for");
  // Buffers laid end to end load; the fifth starting one byte early overlaps the fourth.
  std::uint64_t total = 0;
  for (const LoadItem& it : good->items) total += it.bytes;
  std::vector<std::byte> all(total + 1);
  std::uint64_t at = 1;
  for (std::size_t i = 0; i < 6; ++i) {
    outs[i] = std::span<std::byte>(all).subspan(at, good->items[i].bytes);
    at += good->items[i].bytes;
  }
  EXPECT_TRUE(LoadInto(*good, outs).ok());
  outs[4] = std::span<std::byte>(all).subspan(outs[4].data() - all.data() - 1, outs[4].size());
  EXPECT_STATUS(LoadInto(*good, outs), StatusCode::kInvalidArgument,
                "the buffers of tensors \"" + good->items[3].info.name + "\" and \"" + good->items[4].info.name +
                    "\" overlap (the second starts " + std::to_string(good->items[3].bytes - 1) +
                    " bytes into the first's " + std::to_string(good->items[3].bytes) + ")");
  // A file cut short after it was planned.
  std::filesystem::resize_file(path, good->items.back().info.data_offset + 1);
  EXPECT_STATUS(Load(*good), StatusCode::kOutOfRange, "the file changed since it was planned");
  outs[4] = std::span<std::byte>(all).subspan(outs[4].data() - all.data() + 1, outs[4].size());
  // Into buffers: read from the page cache tensor by tensor and hashed as
  // read, piece by piece unverified, and through O_DIRECT's bounce buffers.
  const std::string cut = "ends at offset " + std::to_string(good->items.back().info.data_offset + 1);
  EXPECT_STATUS(LoadInto(*good, outs), StatusCode::kOutOfRange, cut);
  LoadOptions unverified;
  unverified.verify = false;
  EXPECT_STATUS(LoadInto(*good, outs, unverified), StatusCode::kOutOfRange, cut);
  EXPECT_STATUS(LoadInto(*good, outs, Direct()), StatusCode::kOutOfRange, cut);
}

// Pages of `bytes` in memory, by mincore.
std::size_t Resident(std::span<const std::byte> bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data()) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size();
  std::vector<unsigned char> in((end - begin + page - 1) / page);
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(begin), end - begin, in.data()), 0);
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(Load, PopulateMappingReadsEveryPageIn) {
  TempDir dir;
  const std::string path = dir.File("big.bin");
  {
    std::ofstream f(path, std::ios::binary);
    std::vector<char> chunk(1 << 20, 'x');
    for (int i = 0; i < 80; ++i) f.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  for (unsigned threads : {1u, 4u}) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fdatasync(fd), 0);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ::close(fd);
    auto region = Env::Default()->Map(path);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    // Three 32 MiB pieces and a tail, from a start that is not a page's.
    const std::span<const std::byte> bytes = (*region)->bytes().subspan(100);
    const std::size_t pages = (bytes.size() + 100 + 4095) / 4096;
    if (Resident(bytes) > pages / 2) GTEST_SKIP() << "the file system keeps the file's pages (tmpfs?)";
    EXPECT_TRUE(PopulateMapping(bytes, threads));
    EXPECT_EQ(Resident(bytes), pages) << threads << " threads";
  }
  EXPECT_TRUE(PopulateMapping({}, 4));
}

// Row and column blocks of a 2-D f32 tensor: the bytes of that block only.
TEST(Load, RankSlices) {
  TempDir dir;
  std::mt19937_64 rng(2);
  const std::uint64_t rows = 256, cols = 1024;
  TensorSet set;
  set.tensors.push_back(MakeTensor("w", DType::kF32, {rows, cols}, RandomBytes(rng, rows * cols * 4)));
  set.tensors.push_back(MakeTensor("b", DType::kF32, {cols}, RandomBytes(rng, cols * 4)));
  const std::string path = dir.File("s.safetensors");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kSafetensors).ok());
  for (std::uint32_t dim : {0u, 1u}) {
    for (std::uint64_t index : {0u, 1u, 3u}) {
      PlanOptions o;
      o.slice = RankSlice{dim, index, 4, 2};
      auto plan = Plan(path, o);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      const LoadItem& w = plan->items[0].info.name == "w" ? plan->items[0] : plan->items[1];
      EXPECT_EQ(w.shape, dim == 0 ? Shape({64, 1024}) : Shape({256, 256}));
      EXPECT_EQ(w.bytes, rows * cols);
      EXPECT_FALSE(w.checksum);
      LoadBothWays(*plan, Direct());
      auto loaded = Load(*plan, Direct());
      ASSERT_TRUE(loaded.ok());
      // The slice's bytes plus the bias (whole) and alignment; a column
      // block of 1 KiB runs 3 KiB apart reads whole pages.
      if (dim == 0) EXPECT_LE(loaded->report.bytes_read, (plan->bytes * 11) / 10 + 2 * 4096);
    }
  }
  PlanOptions bad;
  bad.slice = RankSlice{2, 0, 2, 2};
  EXPECT_STATUS(Plan(path, bad), StatusCode::kInvalidArgument, "dim must be 0 or 1");
}

// The report says why nothing was verified: no tensors, only slices of a
// format with checksums, or a format without them.
TEST(Load, VerificationSaysWhyNothingWasVerified) {
  TempDir dir;
  std::mt19937_64 rng(5);
  TensorSet set;
  set.tensors.push_back(MakeTensor("w", DType::kF32, {8, 16}, RandomBytes(rng, 8 * 16 * 4)));
  set.tensors.push_back(MakeTensor("b", DType::kF32, {16}, RandomBytes(rng, 16 * 4)));
  const std::string path = dir.File("v.tsafe");
  ASSERT_TRUE(WriteTensorSet(path, set, Format::kTsafe).ok());
  auto verification = [&](PlanOptions o) {
    auto plan = Plan(path, o);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    auto loaded = Load(*plan, Direct());
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? loaded->report.verification : "";
  };
  PlanOptions none;
  none.names = std::vector<std::string>{};
  EXPECT_EQ(verification(none), "nothing to verify: no tensors");
  PlanOptions sliced;
  sliced.names = std::vector<std::string>{"w"};
  sliced.slice = RankSlice{0, 1, 2, 2};
  EXPECT_EQ(verification(sliced), "nothing to verify: every tensor is a slice (a checksum covers a whole tensor)");
  sliced.names.reset();
  EXPECT_EQ(verification(sliced), "verified 1 of 2 tensors (XXH3-64); 1 without a checksum");
}

}  // namespace
}  // namespace tensorsafe::testing
