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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "util/hash.h"

namespace {

using tensorsafe::DType;
using tensorsafe::Reader;
using tensorsafe::ReaderOptions;
using tensorsafe::Status;
using tensorsafe::TensorView;
using tensorsafe::Writer;
using tensorsafe::WriterOptions;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// ---------------------------------------------------------------- helpers

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "format_bench: %s\n", what.c_str());
  std::exit(2);
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}
void CheckErrno(bool ok, const std::string& what) {
  if (!ok) Die(what + ": " + std::strerror(errno));
}

double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct Stats {
  double best = 0;
  double median = 0;
};
Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.best = v.front();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

// A page-aligned buffer, every page touched once (pre-faulted) so neither we
// nor a baseline pay first-touch faults inside a timed region.
class Buffer {
 public:
  explicit Buffer(std::uint64_t n) : n_(n) {
    p_ = static_cast<std::byte*>(
        ::mmap(nullptr, std::max<std::uint64_t>(n, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    CheckErrno(p_ != MAP_FAILED, "mmap buffer");
    std::memset(p_, 0x5a, n_);
  }
  ~Buffer() { ::munmap(p_, std::max<std::uint64_t>(n_, 1)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return p_; }
  std::uint64_t size() const { return n_; }
  // Deterministic, incompressible-looking content.
  void Fill(std::uint64_t seed) {
    auto* w = reinterpret_cast<std::uint64_t*>(p_);
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (std::uint64_t i = 0; i < n_ / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w[i] = x;
    }
  }

 private:
  std::byte* p_;
  std::uint64_t n_;
};

void RemoveIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) CheckErrno(false, "unlink " + path);
}

// Before each timed write: remove the old outputs, then flush every dirty page
// so that no repetition starts behind another's writeback (which otherwise
// throttles whichever write comes next, ours or the baseline's).
void FreshStart(std::initializer_list<std::string> paths) {
  for (const auto& p : paths) RemoveIfExists(p);
  ::sync();
}

void SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open dir");
  CheckErrno(::fsync(fd) == 0, "fsync dir");
  ::close(fd);
}

void WriteAll(int fd, const std::byte* p, std::uint64_t n) {
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    CheckErrno(k > 0, "write");
    p += k;
    n -= static_cast<std::uint64_t>(k);
  }
}
void PreadAll(int fd, std::byte* p, std::uint64_t n, std::uint64_t off) {
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, static_cast<off_t>(off));
    if (k < 0 && errno == EINTR) continue;
    CheckErrno(k > 0, "pread");
    p += k;
    n -= static_cast<std::uint64_t>(k);
    off += static_cast<std::uint64_t>(k);
  }
}

// The raw baseline of a write: a fresh file, the same bytes in the largest
// write() calls the kernel accepts, the same sync policy as the writer
// (fdatasync the file, fsync its directory). `reserve` first reserves the
// file's blocks with fallocate, as the writer's temp files do ahead of their
// appends, and gives back none (all are written): a reference row only.
void RawWrite(const std::string& path, const std::byte* p, std::uint64_t n, bool sync, bool reserve = false) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CheckErrno(fd >= 0, "open " + path);
  if (reserve) CheckErrno(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(n)) == 0, "fallocate");
  WriteAll(fd, p, n);
  if (sync) CheckErrno(::fdatasync(fd) == 0, "fdatasync");
  CheckErrno(::close(fd) == 0, "close");
  if (sync) SyncDir(std::filesystem::path(path).parent_path().string());
}

// Reads a whole file once so its pages are in the page cache.
void Warm(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open " + path);
  std::vector<std::byte> buf(8 * kMiB);
  while (true) {
    ssize_t k = ::read(fd, buf.data(), buf.size());
    CheckErrno(k >= 0, "read");
    if (k == 0) break;
  }
  ::close(fd);
}

// Runs `ours` and `base` `reps` times each, alternating which goes first.
// `prep` runs before each timed call, outside the timed region.
struct PairStats {
  Stats ours, base;
};
PairStats RunPair(int reps, const std::function<void()>& prep, const std::function<void()>& ours,
                  const std::function<void()>& base) {
  std::vector<double> a, b;
  auto time = [&](const std::function<void()>& f, std::vector<double>& out) {
    if (prep) prep();
    const double t0 = Now();
    f();
    out.push_back(Now() - t0);
  };
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      time(ours, a);
      time(base, b);
    } else {
      time(base, b);
      time(ours, a);
    }
  }
  return {Summarize(a), Summarize(b)};
}

Stats RunOne(int reps, const std::function<void()>& f) {
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Now();
    f();
    v.push_back(Now() - t0);
  }
  return Summarize(v);
}

// ---------------------------------------------------------------- report

struct Row {
  std::string workload, what;
  Stats ours;
  std::string unit;  // how `ours` is printed: "GB/s" (needs bytes), "ms", "us", "ns"
  std::uint64_t bytes = 0;
  std::string base_name;  // empty: no baseline
  Stats base;
  std::string target;  // e.g. ">= 0.90x", "<= 1 ms"
  int verdict = -1;    // -1 none, 0 miss, 1 meets
};
std::vector<Row> g_rows;
bool g_any_miss = false;

std::string FmtTime(double s, const std::string& unit) {
  char b[64];
  if (unit == "ns")
    std::snprintf(b, sizeof b, "%.0f ns", s * 1e9);
  else if (unit == "us")
    std::snprintf(b, sizeof b, "%.1f us", s * 1e6);
  else
    std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  return b;
}
std::string FmtRate(std::uint64_t bytes, double s) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2f GB/s", static_cast<double>(bytes) / s / 1e9);
  return b;
}

void Print(const Row& r) {
  std::string ours = FmtTime(r.ours.best, r.unit) + " / " + FmtTime(r.ours.median, r.unit);
  if (r.bytes) ours += " (" + FmtRate(r.bytes, r.ours.best) + ")";
  std::string base = "-", ratio = "-";
  if (!r.base_name.empty()) {
    base = r.base_name + " " + FmtTime(r.base.best, r.unit) + " / " + FmtTime(r.base.median, r.unit);
    if (r.bytes) base += " (" + FmtRate(r.bytes, r.base.best) + ")";
    char b[64];
    std::snprintf(b, sizeof b, "%.2fx (med %.2fx)", r.base.best / r.ours.best, r.base.median / r.ours.median);
    ratio = b;
  }
  const char* v = r.verdict < 0 ? "" : r.verdict ? "MEETS" : "MISSES";
  std::printf("%-3s %-48s %-44s %-52s %-20s %-14s %s\n", r.workload.c_str(), r.what.c_str(), ours.c_str(), base.c_str(),
              ratio.c_str(), r.target.c_str(), v);
  std::fflush(stdout);
}

void AddRow(Row r) {
  if (r.verdict == 0) g_any_miss = true;
  Print(r);
  g_rows.push_back(std::move(r));
}

void Header() {
  std::printf("%-3s %-48s %-44s %-52s %-20s %-14s %s\n", "wl", "case", "ours best / median", "baseline best / median",
              "ratio best (median)", "target", "verdict");
}

// A throughput target: base/ours >= min_ratio on the best-of-N times.
Row Ratio(std::string wl, std::string what, const PairStats& p, std::uint64_t bytes, std::string base_name,
          double min_ratio, bool has_target) {
  Row r{std::move(wl), std::move(what), p.ours, "ms", bytes, std::move(base_name), p.base, "", -1};
  if (has_target) {
    char b[32];
    std::snprintf(b, sizeof b, ">= %.2fx", min_ratio);
    r.target = b;
    r.verdict = p.base.best / p.ours.best >= min_ratio;
  }
  return r;
}

// ---------------------------------------------------------------- config

struct Config {
  bool quick = false;
  bool check = false;
  std::string dir;
  std::string only;
  int reps = 0;  // 0: per-workload default
};

int Reps(const Config& c, int full, int quick) { return c.reps ? c.reps : (c.quick ? quick : full); }

std::string TensorName(std::uint64_t i) {
  char b[64];
  std::snprintf(b, sizeof b, "model.layers.%" PRIu64 ".mlp.w", i);
  return b;
}

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

// ---------------------------------------------------------------- (b), (c)

constexpr std::uint64_t kSmallElems = 256;
constexpr std::uint64_t kSmallBytes = kSmallElems * 4;

// Names are made once, outside every timed region.
const std::vector<std::string>& SmallNames(std::uint64_t n) {
  static std::vector<std::string> names;
  while (names.size() < n) names.push_back(TensorName(names.size()));
  return names;
}

// `views`: each tensor through Add(name, TensorView) (its shape a vector)
// rather than Add(name, dtype, shape, bytes).
void WriteSmall(const std::string& path, const Buffer& src, std::uint64_t n, bool views = false) {
  const auto& names = SmallNames(n);
  WriterOptions o;
  o.sync = false;
  auto w = Writer::Create(path, o);
  Check(w.status(), "Writer::Create");
  const std::uint64_t shape[] = {kSmallElems};
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::span<const std::byte> bytes(src.data() + i * kSmallBytes, kSmallBytes);
    if (views) {
      Check((*w)->Add(names[i], TensorView::Contiguous(DType::kF32, {kSmallElems}, bytes)), "Add");
    } else {
      Check((*w)->Add(names[i], DType::kF32, shape, bytes), "Add");
    }
  }
  Check((*w)->Finish(), "Finish");
}

// What a write cannot avoid for each small tensor, without any I/O: the
// XXH3 of its bytes and of its name, and the copy into a 1 MiB buffer that
// lets Add return before the bytes reach the file.
double Floor(const Buffer& src, std::uint64_t n) {
  const auto& names = SmallNames(n);
  static std::vector<std::byte> buf(1 << 20);
  std::uint64_t used = 0, acc = 0;
  const double t0 = Now();
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::byte* p = src.data() + i * kSmallBytes;
    acc += tensorsafe::internal::Hash64(std::span<const std::byte>(p, kSmallBytes));
    acc += tensorsafe::internal::NameHash(names[i]);
    if (used + kSmallBytes > buf.size()) used = 0;
    std::memcpy(buf.data() + used, p, kSmallBytes);
    used += kSmallBytes;
  }
  const double t = Now() - t0;
  if (acc == 42) std::printf(" ");  // keeps the work
  return t;
}

Stats TimeOpen(const std::string& path, std::uint64_t eager, int reps,
               ReaderOptions::Access access = ReaderOptions::Access::kMmap) {
  ReaderOptions o;
  o.eager_index_bytes = eager;
  o.access = access;
  std::vector<double> v;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = Now();
    auto rd = Reader::Open(path, o);
    const double t = Now() - t0;
    Check(rd.status(), "Open");
    if (r > 0) v.push_back(t);  // the first is a warm-up
  }
  return Summarize(v);
}

// Floor for open: open + fstat + mmap + read the header page + close + munmap.
Stats TimeRawOpen(const std::string& path, int reps) {
  std::vector<double> v;
  volatile std::uint8_t sink = 0;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = Now();
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    ::fstat(fd, &st);
    void* p = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    sink = sink + static_cast<const std::uint8_t*>(p)[0] + static_cast<const std::uint8_t*>(p)[st.st_size - 1];
    ::munmap(p, st.st_size);
    if (r > 0) v.push_back(Now() - t0);
  }
  return Summarize(v);
}

std::string CountLabel(std::uint64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "k";
  return std::to_string(n);
}

void WorkloadB(const Config& c) {
  const std::vector<std::uint64_t> counts =
      c.quick ? std::vector<std::uint64_t>{10000} : std::vector<std::uint64_t>{100000, 1000000};
  const std::uint64_t max_n = counts.back();
  std::printf("\n(b) many tensors of 256 f32 (1 KiB) each: %s\n",
              c.quick ? "10k (+1k for open)" : "100k, 1M (+1k for open)");
  // A quarter more than the tensors' bytes: the raw write of a whole file's
  // bytes (data and index) reads this much.
  Buffer src(max_n * kSmallBytes / 4 * 5);
  src.Fill(2);
  const std::string wl = "b";

  // A 1k-tensor file: the reference for the open ratio.
  const std::string small_path = c.dir + "/b-1k.tsafe";
  WriteSmall(small_path, src, 1000);
  Warm(small_path);
  const int open_reps = Reps(c, 200, 30);
  Stats open_1k_default = TimeOpen(small_path, ReaderOptions{}.eager_index_bytes, open_reps);
  Stats open_1k_lazy = TimeOpen(small_path, 0, open_reps);
  AddRow({wl, "open 1k mmap eager=default", open_1k_default, "us"});
  AddRow({wl, "open 1k mmap eager=0 (lazy)", open_1k_lazy, "us"});
  AddRow({wl, "raw open+mmap+munmap 1k file", TimeRawOpen(small_path, open_reps), "us"});

  for (std::uint64_t n : counts) {
    const std::string nl = CountLabel(n);
    const std::string ts_path = c.dir + "/b-" + nl + ".tsafe";
    const std::string raw_path = c.dir + "/b-" + nl + ".raw";
    const std::uint64_t bytes = n * kSmallBytes;
    // Best of 7 and 5: on a 2-vCPU VM one run in three or four of either
    // side stalls (page allocation, writeback), and best of 3 at 1M let a
    // single unlucky pair decide the verdict (docs/format-bench.md, 2026-11-26, commit 1f8df8d).
    const int reps = n >= 1000000 ? Reps(c, 5, 3) : Reps(c, 7, 3);
    SmallNames(n);
    WriteSmall(ts_path, src, n);  // warm-up
    const std::uint64_t file_bytes = std::filesystem::file_size(ts_path);
    auto p = RunPair(
        reps,
        [&] {
          FreshStart({ts_path, raw_path});
        },
        [&] { WriteSmall(ts_path, src, n); }, [&] { RawWrite(raw_path, src.data(), bytes, false); });
    AddRow(Ratio(wl, "write " + nl + " x 1KiB sync=off", p, bytes, "raw write()", 0.9, true));
    auto q = RunPair(
        reps,
        [&] {
          FreshStart({ts_path, raw_path});
        },
        [&] { RawWrite(ts_path, src.data(), bytes, false, true); },
        [&] { RawWrite(raw_path, src.data(), bytes, false); });
    AddRow(Ratio(wl, "  raw write() after fallocate " + nl, q, bytes, "raw write()", 0, false));
    // The writer also writes its index (about 100 bytes a tensor): beside a
    // raw write() of as many bytes as its file holds, the ratio is the
    // writer's own overhead, without the format's.
    if (file_bytes <= src.size()) {
      auto f = RunPair(
          reps,
          [&] {
            FreshStart({ts_path, raw_path});
          },
          [&] { WriteSmall(ts_path, src, n); }, [&] { RawWrite(raw_path, src.data(), file_bytes, false); });
      AddRow(Ratio(wl, "  write " + nl + " beside raw write() of its file's bytes", f, file_bytes,
                   "raw write() " + std::to_string(file_bytes) + " B", 0, false));
    }
    // The two forms of Add, alternating: what building a TensorView (a
    // shape vector's malloc and free) costs a small tensor.
    auto v = RunPair(
        reps,
        [&] {
          FreshStart({ts_path, raw_path});
        },
        [&] { WriteSmall(ts_path, src, n); }, [&] { WriteSmall(raw_path, src, n, /*views=*/true); });
    AddRow(Ratio(wl, "  write " + nl + ": Add(dtype, shape, bytes) beside Add(TensorView)", v, bytes, "Add(TensorView)",
                 0, false));
    // The floor beside the same raw writes: at 1 KiB a tensor it is about as
    // long as the write itself, which bounds what the writer can reach.
    std::vector<double> floor;
    for (int r = 0; r < reps; ++r) floor.push_back(Floor(src, n));
    AddRow(Ratio(wl, "  floor: XXH3 data+name, copy, no I/O " + nl, PairStats{Summarize(floor), p.base}, bytes,
                 "raw write()", 0, false));
    RemoveIfExists(raw_path);
    WriteSmall(ts_path, src, n);
    Warm(ts_path);

    // Open, default eager threshold and lazy. Targets for the largest count:
    // <= 1 ms and <= 2x the open of the 1k file (same mode).
    ReaderOptions def;
    for (std::uint64_t eager : {def.eager_index_bytes, std::uint64_t{0}}) {
      Stats s = TimeOpen(ts_path, eager, open_reps);
      const Stats& ref = eager ? open_1k_default : open_1k_lazy;
      Row r{wl, "open " + nl + " mmap eager=" + (eager ? "default" : "0 (lazy)"), s, "us"};
      if (n == max_n) {
        r.target = "<=1ms,<=2x 1k";
        r.verdict = s.best <= 1e-3 && s.best <= 2 * ref.best;
        char b[48];
        std::snprintf(b, sizeof b, "%.2fx of 1k", s.best / ref.best);
        r.base_name = "";
        r.what += " (" + std::string(b) + ")";
      }
      AddRow(r);
    }
    AddRow({wl, "open " + nl + " pread eager=default",
            TimeOpen(ts_path, def.eager_index_bytes, open_reps / 4, ReaderOptions::Access::kPread), "us"});

    // Lookup by random name, warm: mean ns per Find over a pass of names.
    {
      auto rd = Reader::Open(ts_path);
      Check(rd.status(), "Open");
      std::mt19937_64 rng(42);
      const std::uint64_t q = std::min<std::uint64_t>(n, 200000);
      std::vector<std::string> queries;
      queries.reserve(q);
      for (std::uint64_t i = 0; i < q; ++i) queries.push_back(TensorName(rng() % n));
      std::uint64_t sink = 0;
      auto pass = [&] {
        for (const auto& name : queries) {
          auto info = (*rd)->Find(name);
          if (!info.ok()) Die("Find: " + info.status().ToString());
          sink += info->data_offset;
        }
      };
      pass();  // warm-up: page tables, caches
      Stats s = RunOne(Reps(c, 5, 3), pass);
      s.best /= static_cast<double>(q);
      s.median /= static_cast<double>(q);
      Row r{wl, "Find() random names " + nl + " (mean)", s, "ns"};
      r.target = "<= 10 us";
      r.verdict = s.best <= 10e-6;
      AddRow(r);
      if (sink == 1) std::printf(" ");  // keeps the loop from being optimised away
    }

    // Names(): streams the entries section.
    {
      auto rd = Reader::Open(ts_path, [] {
        ReaderOptions o;
        o.eager_index_bytes = 0;
        return o;
      }());
      Check(rd.status(), "Open");
      (void)(*rd)->Names();
      Stats s = RunOne(Reps(c, 5, 3), [&] {
        auto names = (*rd)->Names();
        Check(names.status(), "Names");
        if (names->size() != n) Die("Names: wrong count");
      });
      AddRow({wl, "Names() " + nl, s, "ms"});
      Stats per{s.best / static_cast<double>(n), s.median / static_cast<double>(n)};
      AddRow({wl, "Names() " + nl + " per name", per, "ns"});
    }
    RemoveIfExists(ts_path);
  }
  RemoveIfExists(small_path);
}

void WorkloadC(const Config& c) {
  const std::vector<std::uint64_t> counts =
      c.quick ? std::vector<std::uint64_t>{1000, 10000} : std::vector<std::uint64_t>{1000, 10000, 40000};
  std::printf("\n(c) cost of the eager whole-index check at open (mmap), by tensor count\n");
  Buffer src(counts.back() * kSmallBytes);
  src.Fill(3);
  for (std::uint64_t n : counts) {
    const std::string nl = CountLabel(n);
    const std::string path = c.dir + "/c-" + nl + ".tsafe";
    WriteSmall(path, src, n);
    Warm(path);
    const int reps = Reps(c, n >= 10000 ? 30 : 100, 10);
    std::uint64_t index_bytes = 0;
    {
      auto rd = Reader::Open(path);
      Check(rd.status(), "Open");
      index_bytes = (*rd)->summary().index_length;
    }
    Stats lazy = TimeOpen(path, 0, reps);
    Stats eager = TimeOpen(path, UINT64_MAX, reps);
    char what[96];
    std::snprintf(what, sizeof what, "open %s eager (index %.2f MiB)", nl.c_str(),
                  static_cast<double>(index_bytes) / kMiB);
    Row r{"c", what, eager, "us"};
    r.base_name = "lazy";
    r.base = lazy;
    AddRow(r);
    Stats per{(eager.best - lazy.best) / static_cast<double>(n), (eager.median - lazy.median) / static_cast<double>(n)};
    AddRow({"c", "  eager check per tensor " + nl, per, "ns"});
    RemoveIfExists(path);
  }
}

}  // namespace

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
