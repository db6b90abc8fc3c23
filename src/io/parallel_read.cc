#include "io/parallel_read.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace tensorsafe::internal {
namespace {

constexpr std::size_t kPiece = std::size_t{8} << 20;
constexpr std::size_t kParallelFrom = std::size_t{32} << 20;
constexpr unsigned kDefaultMaxThreads = 4;
constexpr unsigned kMaxThreads = 64;

}  // namespace

Status ReadAtParallel(const RandomAccessFile& f, std::uint64_t offset, std::span<std::byte> out, unsigned threads) {
  const unsigned n =
      threads != 0 ? std::min(threads, kMaxThreads) : std::min(std::thread::hardware_concurrency(), kDefaultMaxThreads);
  if (out.size() < kParallelFrom || n < 2) return f.ReadAt(offset, out);
  const std::size_t pieces = (out.size() + kPiece - 1) / kPiece;
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::size_t failed_piece = pieces;  // lowest failing piece (mu)
  Status failed;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces;) {
      const std::size_t begin = i * kPiece;
      const std::size_t len = std::min(kPiece, out.size() - begin);
      Status s = f.ReadAt(offset + begin, out.subspan(begin, len));
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < failed_piece) {
          failed_piece = i;
          failed = std::move(s);
        }
      }
    }
  };
  const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n, pieces)) - 1;
  std::vector<std::thread> helpers;
  helpers.reserve(want);  // so only the thread's own start can throw
  for (unsigned t = 0; t < want; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no thread: the caller reads the rest
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  return failed_piece == pieces ? Status::OK() : failed;
}

}  // namespace tensorsafe::internal
