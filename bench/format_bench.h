// format_bench's helpers, shared by its workloads (format_bench.cc: (a) and
// main; format_bench_small.cc: (b) and (c)): errors, timing, pre-faulted
// buffers, the raw I/O baselines, the report and the configuration.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace format_bench {

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

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "format_bench: %s\n", what.c_str());
  std::exit(2);
}
inline void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}
inline void CheckErrno(bool ok, const std::string& what) {
  if (!ok) Die(what + ": " + std::strerror(errno));
}

inline double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct Stats {
  double best = 0;
  double median = 0;
};
inline Stats Summarize(std::vector<double> v) {
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

inline void RemoveIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) CheckErrno(false, "unlink " + path);
}

// Before each timed write: remove the old outputs, then flush every dirty page
// so that no repetition starts behind another's writeback (which otherwise
// throttles whichever write comes next, ours or the baseline's).
inline void FreshStart(std::initializer_list<std::string> paths) {
  for (const auto& p : paths) RemoveIfExists(p);
  ::sync();
}

inline void SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open dir");
  CheckErrno(::fsync(fd) == 0, "fsync dir");
  ::close(fd);
}

inline void WriteAll(int fd, const std::byte* p, std::uint64_t n) {
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    CheckErrno(k > 0, "write");
    p += k;
    n -= static_cast<std::uint64_t>(k);
  }
}
inline void PreadAll(int fd, std::byte* p, std::uint64_t n, std::uint64_t off) {
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
inline void RawWrite(const std::string& path, const std::byte* p, std::uint64_t n, bool sync, bool reserve = false) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CheckErrno(fd >= 0, "open " + path);
  if (reserve) CheckErrno(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(n)) == 0, "fallocate");
  WriteAll(fd, p, n);
  if (sync) CheckErrno(::fdatasync(fd) == 0, "fdatasync");
  CheckErrno(::close(fd) == 0, "close");
  if (sync) SyncDir(std::filesystem::path(path).parent_path().string());
}

// Reads a whole file once so its pages are in the page cache.
inline void Warm(const std::string& path) {
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
inline PairStats RunPair(int reps, const std::function<void()>& prep, const std::function<void()>& ours,
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

inline Stats RunOne(int reps, const std::function<void()>& f) {
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
inline std::vector<Row> g_rows;
inline bool g_any_miss = false;

inline std::string FmtTime(double s, const std::string& unit) {
  char b[64];
  if (unit == "ns")
    std::snprintf(b, sizeof b, "%.0f ns", s * 1e9);
  else if (unit == "us")
    std::snprintf(b, sizeof b, "%.1f us", s * 1e6);
  else
    std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  return b;
}
inline std::string FmtRate(std::uint64_t bytes, double s) {
  char b[64];
  std::snprintf(b, sizeof b, "%.2f GB/s", static_cast<double>(bytes) / s / 1e9);
  return b;
}

inline void Print(const Row& r) {
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

inline void AddRow(Row r) {
  if (r.verdict == 0) g_any_miss = true;
  Print(r);
  g_rows.push_back(std::move(r));
}

inline void Header() {
  std::printf("%-3s %-48s %-44s %-52s %-20s %-14s %s\n", "wl", "case", "ours best / median", "baseline best / median",
              "ratio best (median)", "target", "verdict");
}

// A throughput target: base/ours >= min_ratio on the best-of-N times.
inline Row Ratio(std::string wl, std::string what, const PairStats& p, std::uint64_t bytes, std::string base_name,
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

inline int Reps(const Config& c, int full, int quick) { return c.reps ? c.reps : (c.quick ? quick : full); }

inline std::string TensorName(std::uint64_t i) {
  char b[64];
  std::snprintf(b, sizeof b, "model.layers.%" PRIu64 ".mlp.w", i);
  return b;
}

// The workloads, each printing its rows.
void WorkloadA(const Config& c);  // format_bench.cc
void WorkloadB(const Config& c);  // format_bench_small.cc
void WorkloadC(const Config& c);  // format_bench_small.cc

}  // namespace format_bench
