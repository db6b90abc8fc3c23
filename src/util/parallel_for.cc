#include "util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace tensorsafe::internal {

unsigned ResolveThreads(unsigned requested) {
  if (requested != 0) return std::min(requested, 64u);
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

void ParallelFor(std::size_t n, std::size_t min_piece, unsigned threads,
                 const std::function<void(std::size_t, std::size_t)>& body) {
  if (n == 0) return;
  min_piece = std::max<std::size_t>(min_piece, 1);
  const unsigned t = ResolveThreads(threads);
  if (t < 2 || n < 2 * min_piece) {
    body(0, n);
    return;
  }
  // Four pieces per thread, so a thread that is descheduled on a shared
  // machine delays the end by a quarter of its share, not all of it.
  const std::size_t piece = std::max(min_piece, (n + 4 * t - 1) / (4 * t));
  const std::size_t pieces = (n + piece - 1) / piece;
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces;) {
      body(i * piece, std::min(n, (i + 1) * piece));
    }
  };
  const unsigned want = static_cast<unsigned>(std::min<std::size_t>(t, pieces)) - 1;
  std::vector<std::thread> helpers;
  helpers.reserve(want);
  for (unsigned i = 0; i < want; ++i) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
}

}  // namespace tensorsafe::internal
