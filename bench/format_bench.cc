// format_bench: the native .tsafe reader and writer beside raw baselines
// measured in the same run (STYLE.md: "benchmarks with baselines in the same
// run").
//
//   format_bench [--quick] [--dir DIR] [--only a|b|c] [--reps N] [--check]
//
// Workloads
//   (a) 16 f32 tensors totalling 1 GiB (64 MiB with --quick):
//       write (sync off/on) vs raw write(), and raw write() after fallocate
//       beside raw write() for reference; open; full read (ReadInto into a
//       pre-faulted buffer; mmap and pread; the copies shared among the
//       cores, and on the caller's thread alone) vs memcpy and vs raw pread().
//   (b) N tensors of 256 f32 (N = 100k and 1M; 10k with --quick) plus a 1k
//       file: write vs raw write() (and the fallocate reference row, and the
//       raw write() of as many bytes as the .tsafe file holds); open
//       (eager default and lazy); Find() of random names; Names().
//   (c) cost of the eager whole-index check at open, at 1k/10k/40k tensors.
//
// Method: every figure is the best and the median of N repetitions. Ours and
// its baseline alternate within one loop (ABAB, then BABA) so both see the
// same page-cache and writeback conditions; ratios are computed from the
// same run only. Every destination buffer is pre-faulted once, before any
// timing, for us and for the baseline alike. Files are read once before the
// read figures so the page cache is warm; files are written fresh (the old
// one removed outside the timed region) for each write repetition.
//
// Ratios are throughput ratios (baseline time / our time): >= 1 means we are
// as fast as the baseline. Open and lookup are reported as absolute times.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "format_bench.h"

namespace format_bench {

// ---------------------------------------------------------------- (a)

void WorkloadA(const Config& c) {
  const std::uint64_t total = c.quick ? 64 * kMiB : kGiB;
  constexpr int kCount = 16;
  const std::uint64_t each = total / kCount;
  const std::uint64_t side = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(each / 4)));
  if (side * side * 4 != each) Die("workload a: tensor size is not a square of f32");
  const std::string wl = "a";
  const std::string label = c.quick ? "16x4MiB" : "16x64MiB";
  std::printf("\n(a) %d f32 tensors of %s each, %s in all\n", kCount, c.quick ? "4 MiB" : "64 MiB",
              c.quick ? "64 MiB" : "1 GiB");

  Buffer src(total);
  src.Fill(1);
  Buffer dst(total);  // pre-faulted by the constructor
  const std::string ts_path = c.dir + "/a.tsafe";
  const std::string raw_path = c.dir + "/a.raw";
  std::vector<std::string> names;
  for (int i = 0; i < kCount; ++i) names.push_back("t" + std::to_string(i));

  auto write_ts = [&](bool sync) {
    WriterOptions o;
    o.sync = sync;
    auto w = Writer::Create(ts_path, o);
    Check(w.status(), "Writer::Create");
    for (int i = 0; i < kCount; ++i) {
      Check((*w)->Add(names[i], TensorView::Contiguous(DType::kF32, {side, side}, {src.data() + i * each, each})),
            "Add");
    }
    Check((*w)->Finish(), "Finish");
  };
  auto remove_both = [&] { FreshStart({ts_path, raw_path}); };
  for (bool sync : {false, true}) {
    const int reps = sync ? Reps(c, 3, 2) : Reps(c, 5, 3);
    write_ts(sync);  // warm-up: allocator, page cache, writeback steady state
    auto p = RunPair(
        reps, remove_both, [&] { write_ts(sync); }, [&] { RawWrite(raw_path, src.data(), total, sync); });
    AddRow(Ratio(wl, "write " + label + (sync ? " sync=on" : " sync=off"), p, total, "raw write()", 0.9, true));
    auto q = RunPair(
        reps, remove_both, [&] { RawWrite(ts_path, src.data(), total, sync, true); },
        [&] { RawWrite(raw_path, src.data(), total, sync); });
    AddRow(Ratio(wl, "  raw write() after fallocate", q, total, "raw write()", 0, false));
  }
  RemoveIfExists(raw_path);
  write_ts(false);
  Warm(ts_path);

  // Open: absolute time.
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions o;
    o.access = access;
    std::vector<double> v;
    for (int r = 0; r < Reps(c, 50, 10); ++r) {
      const double t0 = Now();
      auto rd = Reader::Open(ts_path, o);
      v.push_back(Now() - t0);
      Check(rd.status(), "Open");
    }
    Row r{wl, std::string("open ") + (access == ReaderOptions::Access::kMmap ? "mmap" : "pread"), Summarize(v), "us"};
    AddRow(r);
  }

  // Full read: open + ReadInto every tensor into the pre-faulted buffer +
  // close, beside memcpy of the same bytes from memory and raw pread(),
  // each on one thread.
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions o;
    o.access = access;
    auto read_ts = [&] {
      auto rd = Reader::Open(ts_path, o);
      Check(rd.status(), "Open");
      for (int i = 0; i < kCount; ++i) {
        Check((*rd)->ReadInto(names[i], {dst.data() + i * each, each}), "ReadInto");
      }
    };
    const std::string mode = access == ReaderOptions::Access::kMmap ? "mmap" : "pread";
    const int reps = Reps(c, 7, 3);
    Warm(ts_path);
    read_ts();
    auto pm = RunPair(reps, nullptr, read_ts, [&] { std::memcpy(dst.data(), src.data(), total); });
    AddRow(Ratio(wl, "read " + label + " " + mode + " vs memcpy", pm, total, "memcpy", 0.8, true));
    auto pp = RunPair(reps, nullptr, read_ts, [&] {
      int fd = ::open(ts_path.c_str(), O_RDONLY | O_CLOEXEC);
      CheckErrno(fd >= 0, "open");
      // Same bytes, same destination, one pread per tensor (the data of the
      // first tensor starts at 128 rounded up to the alignment, 64 here).
      for (int i = 0; i < kCount; ++i) PreadAll(fd, dst.data() + i * each, each, 128 + i * each);
      ::close(fd);
    });
    AddRow(Ratio(wl, "read " + label + " " + mode + " vs pread", pp, total, "raw pread()", 0, false));
    // The reads above share each 64 MiB copy among the cores
    // (ReaderOptions::read_threads 0); the caller's thread alone, for
    // reference beside the one-thread baselines.
    o.read_threads = 1;
    auto p1 = RunPair(reps, nullptr, read_ts, [&] { std::memcpy(dst.data(), src.data(), total); });
    AddRow(Ratio(wl, "  read " + label + " " + mode + " read_threads=1 vs memcpy", p1, total, "memcpy", 0, false));
  }
  // Verify the copy is right once (outside timing).
  {
    auto rd = Reader::Open(ts_path);
    Check(rd.status(), "Open");
    Check((*rd)->ReadInto(names[kCount - 1], {dst.data(), each}, /*verify=*/true), "ReadInto verify");
    if (std::memcmp(dst.data(), src.data() + (kCount - 1) * each, each) != 0) Die("read back differs");
  }
  RemoveIfExists(ts_path);
}

}  // namespace format_bench

using namespace format_bench;  // NOLINT: main uses the helpers of format_bench.h

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      c.quick = true;
    else if (a == "--check")
      c.check = true;
    else if (a == "--dir" && i + 1 < argc)
      c.dir = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      c.only = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      c.reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: format_bench [--quick] [--dir DIR] [--only a|b|c] [--reps N] [--check]\n"
                   "  --quick  small sizes (64 MiB, 10k tensors): a smoke test in seconds\n"
                   "  --check  exit 1 when a target is missed\n");
      return 2;
    }
  }
  std::string tmpdir;
  if (c.dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/format_bench-XXXXXX";
    std::vector<char> b(tmpl.begin(), tmpl.end());
    b.push_back('\0');
    CheckErrno(::mkdtemp(b.data()) != nullptr, "mkdtemp");
    c.dir = tmpdir = b.data();
  }
  std::printf("format_bench%s: dir %s; times best / median of N; ratio = baseline time / our time\n",
              c.quick ? " --quick" : "", c.dir.c_str());
  Header();
  if (c.only.empty() || c.only == "a") WorkloadA(c);
  if (c.only.empty() || c.only == "b") WorkloadB(c);
  if (c.only.empty() || c.only == "c") WorkloadC(c);
  if (!tmpdir.empty()) std::filesystem::remove_all(tmpdir);
  std::printf("\n%s\n", g_any_miss ? "some targets MISSED" : "all targets met");
  return c.check && g_any_miss ? 1 : 0;
}
