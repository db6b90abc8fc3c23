// Splits a loop over independent items across threads (the caller and
// helpers), for CPU-bound kernels such as dtype casts and GGUF block
// decoding. A helper that cannot start costs nothing: the caller takes its
// share.
#pragma once

#include <cstddef>
#include <functional>

namespace tensorsafe::internal {

// The thread count `requested` stands for: itself when non-zero (at most
// 64), else one per core, at most 8.
unsigned ResolveThreads(unsigned requested);

// Calls body(begin, end) over [0, n) in pieces of at least `min_piece`
// items, on up to ResolveThreads(threads) threads; returns when all are
// done. `body` must not throw.
void ParallelFor(std::size_t n, std::size_t min_piece, unsigned threads,
                 const std::function<void(std::size_t, std::size_t)>& body);

}  // namespace tensorsafe::internal
