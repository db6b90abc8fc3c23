// dataset_bench: samples/s iterating a sharded dataset from the page cache,
// sequentially and in a shuffled order, beside pread of the same bytes from
// one flat file in the same run; and bytes/s writing beside raw write().
//
//   dataset_bench [--quick] [--small-only] [--dir DIR] [--reps N]
//
// Both sides do the same work per sample: the bytes end up copied into a
// batch buffer (a loader's collate step), so the mapped reader's zero-copy
// view is not credited with work the baseline does.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"

using namespace tensorsafe;
using namespace tensorsafe::dataset;
namespace fs = std::filesystem;

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void Die(const Status& s, const char* what) {
  std::fprintf(stderr, "dataset_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

struct Data {
  std::uint64_t n, size;
  std::string dir, flat;
  double write_s = 0, raw_write_s = 0;
};

// Sample i: `size` bytes derived from i (cheap, not constant, so zstd is not
// involved and the page cache really holds the bytes).
void FillSample(std::vector<std::byte>& buf, std::uint64_t i) {
  std::uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
  for (std::size_t k = 0; k + 8 <= buf.size(); k += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(buf.data() + k, &x, 8);
  }
}

Data Build(const std::string& root, std::uint64_t n, std::uint64_t size) {
  Data d{n, size, root + "/ds-" + std::to_string(size), root + "/flat-" + std::to_string(size) + ".bin"};
  fs::remove_all(d.dir);
  fs::remove(d.flat);
  std::vector<std::byte> buf(size);
  // Raw baseline: the same bytes appended to one file through a 1 MiB buffer.
  {
    double t0 = Now();
    int fd = ::open(d.flat.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::byte> out;
    out.reserve(std::max<std::uint64_t>(size, 1 << 20));
    for (std::uint64_t i = 0; i < n; ++i) {
      FillSample(buf, i);
      out.insert(out.end(), buf.begin(), buf.end());
      if (out.size() >= (1u << 20)) {
        if (::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) std::exit(2);
        out.clear();
      }
    }
    if (!out.empty() && ::write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) std::exit(2);
    ::close(fd);
    d.raw_write_s = Now() - t0;
  }
  {
    double t0 = Now();
    DatasetWriterOptions opt;
    opt.sync = false;  // as the raw baseline
    opt.schema.fields.push_back({"x", FieldKind::kBytes, DType::kU8, {}});
    auto w = DatasetWriter::Create(d.dir, opt);
    if (!w.ok()) Die(w.status(), "create");
    NamedValue v{"x", FieldValue::Bytes(buf)};
    for (std::uint64_t i = 0; i < n; ++i) {
      FillSample(buf, i);
      Status s = (*w)->Add({&v, 1});
      if (!s.ok()) Die(s, "add");
    }
    auto idx = (*w)->Finish();
    if (!idx.ok()) Die(idx.status(), "finish");
    d.write_s = Now() - t0;
  }
  return d;
}

struct Timing {
  double ours = 0, raw = 0;
};

// One pass each over `order`: the dataset iterator, and pread from the flat file.
Timing Pass(const Dataset& ds, const Data& d, const std::vector<std::uint64_t>* order, int reps) {
  std::vector<std::byte> batch(std::max<std::uint64_t>(d.size * 64, 1 << 20));
  Timing best{1e30, 1e30};
  std::uint64_t sink = 0;
  int fd = ::open(d.flat.c_str(), O_RDONLY);
  for (int r = 0; r < reps; ++r) {
    double t0 = Now();
    {
      auto it = order ? ds.Iterate(*order) : ds.IterateRange(0, d.n);
      Sample s;
      std::size_t pos = 0;
      while (it.Next(s)) {
        const auto& b = s.fields[0].bytes;
        if (pos + b.size() > batch.size()) pos = 0;
        std::memcpy(batch.data() + pos, b.data(), b.size());
        pos += b.size();
      }
      if (!it.status().ok()) Die(it.status(), "iterate");
      sink += static_cast<std::uint64_t>(batch[0]);
    }
    best.ours = std::min(best.ours, Now() - t0);
    t0 = Now();
    std::size_t pos = 0;
    for (std::uint64_t k = 0; k < d.n; ++k) {
      const std::uint64_t i = order ? (*order)[k] : k;
      if (pos + d.size > batch.size()) pos = 0;
      if (::pread(fd, batch.data() + pos, d.size, static_cast<off_t>(i * d.size)) != static_cast<ssize_t>(d.size)) {
        std::exit(3);
      }
      pos += d.size;
    }
    sink += static_cast<std::uint64_t>(batch[0]);
    best.raw = std::min(best.raw, Now() - t0);
  }
  ::close(fd);
  if (sink == 42) std::printf(" ");
  return best;
}

void Report(const char* what, const Data& d, const Timing& t) {
  const double ours = d.n / t.ours, raw = d.n / t.raw;
  std::printf("  %-22s %12.0f samples/s %9.1f MB/s | pread %12.0f samples/s %9.1f MB/s | ratio %.2f\n", what, ours,
              ours * d.size / 1e6, raw, raw * d.size / 1e6, ours / raw);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string root = (fs::temp_directory_path() / ("tensorsafe-dataset-bench-" + std::to_string(::getpid()))).string();
  int reps = 3;
  bool small_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--dir" && i + 1 < argc)
      root = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--small-only")
      small_only = true;
    else {
      std::fprintf(stderr, "usage: dataset_bench [--quick] [--small-only] [--dir DIR] [--reps N]\n");
      return 2;
    }
  }
  fs::create_directories(root);
  struct Config {
    std::uint64_t n, size;
  };
  std::vector<Config> configs =
      quick ? std::vector<Config>{{2000, 1024}, {20, 1 << 20}} : std::vector<Config>{{200000, 1024}, {2000, 1 << 20}};
  if (small_only) configs.resize(1);
  for (const Config& c : configs) {
    Data d = Build(root, c.n, c.size);
    const double bytes = static_cast<double>(c.n) * c.size;
    std::printf("%llu samples x %llu bytes\n", static_cast<unsigned long long>(c.n),
                static_cast<unsigned long long>(c.size));
    std::printf("  %-22s %12.0f samples/s %9.1f MB/s | write  %12.0f samples/s %9.1f MB/s | ratio %.2f\n", "write",
                c.n / d.write_s, bytes / d.write_s / 1e6, c.n / d.raw_write_s, bytes / d.raw_write_s / 1e6,
                d.raw_write_s / d.write_s);
    auto ds = Dataset::Open(d.dir);
    if (!ds.ok()) Die(ds.status(), "open");
    // Warm-up: both files fully in the page cache and every shard mapped
    // (the kernel reclaims idle page cache, so measure right after).
    Pass(**ds, d, nullptr, 1);
    std::vector<std::uint64_t> order(c.n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(9176));
    Report("sequential", d, Pass(**ds, d, nullptr, reps));
    Report("shuffled", d, Pass(**ds, d, &order, reps));
    // Random access through Read() (binary search + LRU on every call).
    double t0 = Now();
    Sample s;
    for (std::uint64_t k = 0; k < c.n; ++k) {
      Status st = (*ds)->Read(order[k], s);
      if (!st.ok()) Die(st, "read");
    }
    const double ra = Now() - t0;
    std::printf("  %-22s %12.0f samples/s (views only, no copy)\n", "Read() shuffled", c.n / ra);
    std::printf("  shards: %zu\n", (*ds)->shards().size());
    fs::remove_all(d.dir);
    fs::remove(d.flat);
  }
  fs::remove_all(root);
  return 0;
}
