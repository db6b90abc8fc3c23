#include "util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace tensorsafe::internal {

unsigned ResolveThreads(unsigned requested) {
  if (requested != 0) return std::min(requested, 64u);
  return std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

void ForEachItem(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& body) {
  if (n == 0) return;
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) body(i);
  };
  const auto want = static_cast<unsigned>(std::min<std::size_t>({std::max(threads, 1u), n, 64})) - 1;
  std::vector<std::thread> helpers;
  helpers.reserve(want);  // so only a thread's own start can throw
  for (unsigned i = 0; i < want; ++i) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the caller takes the rest
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
}

Status ForEachItemOrError(std::size_t n, unsigned threads, const std::function<Status(std::size_t)>& body) {
  std::atomic<std::size_t> lowest{n};  // the lowest failed item so far
  std::mutex mu;
  Status first;  // (mu) lowest's error
  ForEachItem(n, threads, [&](std::size_t i) {
    if (i > lowest.load(std::memory_order_relaxed)) return;  // items below still run
    Status s = body(i);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (i < lowest.load(std::memory_order_relaxed)) {
      lowest.store(i, std::memory_order_relaxed);
      first = std::move(s);
    }
  });
  return first;
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
  ForEachItem((n + piece - 1) / piece, t, [&](std::size_t i) { body(i * piece, std::min(n, (i + 1) * piece)); });
}

}  // namespace tensorsafe::internal
