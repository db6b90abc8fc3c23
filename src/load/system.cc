// The loader's system helpers (internal.h).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "load/internal.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::internal {

bool MostlyCached(int fd, std::uint64_t size) {
  if (size == 0) return false;
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return false;
  auto* base = static_cast<unsigned char*>(m);
  const std::uint64_t pages = (size + kBlock - 1) / kBlock;
  std::uint64_t in = 0, looked = 0;
  if (pages <= kMincoreAllPages) {
    std::vector<unsigned char> v(pages);
    if (::mincore(m, size, v.data()) == 0) {
      for (unsigned char c : v) in += c & 1;
    }
    looked = pages;
  } else {
    // Evenly spread windows, the first at the start and the last at the end.
    unsigned char v[kMincoreWindowPages];
    for (std::uint64_t w = 0; w < kMincoreWindows; ++w) {
      const std::uint64_t first = (pages - kMincoreWindowPages) * w / (kMincoreWindows - 1);
      if (::mincore(base + first * kBlock, kMincoreWindowPages * kBlock, v) != 0) {
        in = 0;
        break;
      }
      for (unsigned char c : v) in += c & 1;
    }
    looked = kMincoreWindows * kMincoreWindowPages;
  }
  ::munmap(m, size);
  return in * 10 >= looked * 9;
}

double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string TwoDecimals(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

Status PreadExactly(int fd, const std::string& path, std::byte* dst, std::uint64_t n, std::uint64_t offset) {
  for (std::uint64_t got = 0; got < n;) {
    const ssize_t r = ::pread(fd, dst + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return IOError(
          path + ": read of " + Str(n - got) + " bytes at offset " + Str(offset + got) + ": " + std::strerror(errno),
          errno);
    }
    if (r == 0) {
      return OutOfRange(path + ": ends at offset " + Str(offset + got) + ", before the " + Str(offset + n) +
                        " its index needs (the file changed since it was planned)");
    }
    got += static_cast<std::uint64_t>(r);
  }
  return Status::OK();
}

Status PreadHashed(int fd, const std::string& path, std::byte* dst, std::uint64_t n, std::uint64_t offset,
                   StreamingHash& hash, std::uint64_t* reads) {
  for (std::uint64_t at = 0; at < n; at += kHashedRead) {
    const std::uint64_t len = std::min(kHashedRead, n - at);
    TS_RETURN_IF_ERROR(PreadExactly(fd, path, dst + at, len, offset + at));
    hash.Update(std::span<const std::byte>(dst + at, len));
    ++*reads;
  }
  return Status::OK();
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tensorsafe::internal
