// What the loader (LoadJob, job.h) asks of the system beyond its own work: page
// cache residency, thread CPU time, an owned descriptor, and one pread
// loop for buffered reads; and of the plan, that caller buffers fit it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <utility>

#include "tensorsafe/load.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal {

inline constexpr std::uint64_t kBlock = 4096;  // a page; O_DIRECT's alignment of offset, length, memory
inline constexpr std::uint64_t kHuge = std::uint64_t{2} << 20;  // a transparent huge page

// True when at least 90% of the file's pages are resident, by mincore over a
// mapping that is never touched. mincore costs about 70 ns a page (38 ms for
// a 2 GiB file, cached), so up to kMincoreAllPages every page is looked at,
// beyond that kMincoreWindows windows of kMincoreWindowPages pages, evenly
// spread from the first page to the last.
inline constexpr std::uint64_t kMincoreAllPages = 16384;  // 64 MiB
inline constexpr std::uint64_t kMincoreWindows = 1024;
inline constexpr std::uint64_t kMincoreWindowPages = 4;
bool MostlyCached(int fd, std::uint64_t size);

double ThreadCpuSeconds();

std::string TwoDecimals(double v);

// Reads exactly `n` bytes at `offset` of `fd` (the file `path`) into `dst`,
// through short reads and EINTR. Errors: kIOError naming the path, length,
// offset and errno; kOutOfRange when the file ends first (it changed since
// it was planned).
Status PreadExactly(int fd, const std::string& path, std::byte* dst, std::uint64_t n, std::uint64_t offset);

class StreamingHash;
// PreadExactly in pieces of kHashedRead bytes, each fed to `hash` while it
// is still in this core's cache; returns the number of reads in `*reads`.
inline constexpr std::uint64_t kHashedRead = std::uint64_t{256} << 10;
Status PreadHashed(int fd, const std::string& path, std::byte* dst, std::uint64_t n, std::uint64_t offset,
                   StreamingHash& hash, std::uint64_t* reads);

// One buffer per item, each of the item's size, none sharing bytes with
// another (two threads would write them at once). Errors: kInvalidArgument
// naming the tensors and the sizes.
Status CheckBuffers(const LoadPlan& plan, std::span<const std::span<std::byte>> outs);

// huge_pages auto's judge: the fault speeds of the last kWindow chunks of
// 2 MiB pages (GB/s of one thread's CPU time), and whether most of them are
// under the bar. A few slow chunks in a fast run are most likely the host
// taking the vCPU away for some ms, which thread CPU time counts here; a
// host that must back the memory slows every chunk. Three slow chunks in a
// row once sent whole loads to 4 KiB pages where 2 MiB ones ran at the
// ceiling (2026-12-01).
class FaultWatch {
 public:
  static constexpr std::size_t kWindow = 8;
  explicit FaultWatch(double min_gbps) : min_gbps_(min_gbps) {}
  // Records a chunk; true when at least 5 of the last 8 were under the bar.
  bool Slow(double gbps) {
    rates_[count_++ % kWindow] = gbps;
    if (count_ < kWindow) return false;
    std::size_t slow = 0;
    for (double r : rates_) slow += r < min_gbps_;
    return slow > kWindow / 2;
  }
  // The median of the last kWindow rates (the mean of the middle two), what
  // the report gives: the last chunk alone may be one of the fast ones.
  double Median() const {
    double sorted[kWindow];
    std::copy(std::begin(rates_), std::end(rates_), std::begin(sorted));
    std::sort(std::begin(sorted), std::end(sorted));
    return (sorted[kWindow / 2 - 1] + sorted[kWindow / 2]) / 2;
  }

 private:
  double min_gbps_;
  double rates_[kWindow] = {};
  std::size_t count_ = 0;
};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace tensorsafe::internal
