// Committing one 1 MiB tensor with the Updater into a 100 MiB and a 2 GiB
// file, beside the raw cost of the same durable work: pwrite 1 MiB past the
// end, fdatasync, pwrite 48 bytes, fdatasync. The claim of FORMAT.md §10 is
// that a commit costs what it writes, not what the file holds.
//
// Usage: update_bench [--quick] [--reps N] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tensorsafe/updater.h"
#include "tensorsafe/writer.h"

namespace {

using Clock = std::chrono::steady_clock;
using tensorsafe::DType;
using tensorsafe::TensorView;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Die(const tensorsafe::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// A file of `total` bytes in 16 tensors, so both sizes have the same index.
void MakeFile(const std::string& path, std::uint64_t total) {
  auto w = tensorsafe::Writer::Create(path);
  Die(w.status());
  const std::uint64_t each = total / 16;
  std::vector<std::byte> buf(each, std::byte{1});
  for (int i = 0; i < 16; ++i) {
    Die((*w)->Add("t" + std::to_string(i), TensorView::Contiguous(DType::kU8, {each}, buf)));
  }
  Die((*w)->Finish());
}

struct Figures {
  double open_commit;  // Updater::Open + Add + Commit
  double commit;       // Add + Commit on an open updater
};

Figures CommitOnce(const std::string& path, const std::vector<std::byte>& mib, int i) {
  const auto t0 = Clock::now();
  auto u = tensorsafe::Updater::Open(path);
  Die(u.status());
  const auto t1 = Clock::now();
  Die((*u)->Add("new" + std::to_string(i), TensorView::Contiguous(DType::kU8, {mib.size()}, mib)));
  Die((*u)->Commit());
  const auto t2 = Clock::now();
  return {Ms(t2 - t0), Ms(t2 - t1)};
}

double RawOnce(const std::string& path, const std::vector<std::byte>& mib) {
  const auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (::pwrite(fd, mib.data(), mib.size(), end) != static_cast<ssize_t>(mib.size())) std::exit(1);
  ::fdatasync(fd);
  char slot[48] = {};
  if (::pwrite(fd, slot, sizeof slot, 80) != 48) std::exit(1);
  ::fdatasync(fd);
  ::close(fd);
  return Ms(Clock::now() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 15;
  std::string dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
  }
  if (quick) reps = 3;
  const std::uint64_t small = quick ? (std::uint64_t{8} << 20) : (std::uint64_t{100} << 20);
  const std::uint64_t large = quick ? (std::uint64_t{64} << 20) : (std::uint64_t{2} << 30);
  const std::string a = dir + "/update_bench_small.tsafe";
  const std::string b = dir + "/update_bench_large.tsafe";
  const std::string raw = dir + "/update_bench_raw.bin";
  std::printf("making %llu MiB and %llu MiB files...\n", static_cast<unsigned long long>(small >> 20),
              static_cast<unsigned long long>(large >> 20));
  MakeFile(a, small);
  MakeFile(b, large);
  MakeFile(raw, small);
  std::vector<std::byte> mib(1 << 20, std::byte{7});
  std::vector<double> sa, sb, ca, cb, r;
  // Interleaved so that load on the shared machine hits all three alike.
  for (int i = 0; i < reps; ++i) {
    Figures fa = CommitOnce(a, mib, i);
    Figures fb = CommitOnce(b, mib, i);
    sa.push_back(fa.open_commit);
    sb.push_back(fb.open_commit);
    ca.push_back(fa.commit);
    cb.push_back(fb.commit);
    r.push_back(RawOnce(raw, mib));
  }
  const double ma = Median(ca), mb = Median(cb), mr = Median(r);
  std::printf("\nmedian of %d commits of one 1 MiB tensor (sync on):\n", reps);
  std::printf("  %-44s %8.2f ms\n", "raw: pwrite 1 MiB + fdatasync + 48 B + fdatasync", mr);
  std::printf("  %-44s %8.2f ms  (open+commit %.2f ms)\n",
              ("commit into " + std::to_string(small >> 20) + " MiB file").c_str(), ma, Median(sa));
  std::printf("  %-44s %8.2f ms  (open+commit %.2f ms)\n",
              ("commit into " + std::to_string(large >> 20) + " MiB file").c_str(), mb, Median(sb));
  std::printf("\nratio large/small file: %.2f (target <= 1.5)\n", mb / ma);
  std::printf("ratio commit/raw: small %.2f, large %.2f (target <= 2)\n", ma / mr, mb / mr);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
  std::filesystem::remove(raw);
  return 0;
}
