// Loops over independent items split across threads (the caller and
// helpers): CPU-bound kernels such as dtype casts and GGUF block decoding,
// and the pieces of parallel reads. A helper that cannot start costs
// nothing: the caller takes its share.
#pragma once

#include <cstddef>
#include <functional>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

// The thread count `requested` stands for: itself when non-zero (at most
// 64), else one per core, at most 8.
unsigned ResolveThreads(unsigned requested);

// Calls body(i) for every i in [0, n), each item claimed in turn by the
// caller and up to threads - 1 helpers (threads is taken as at least 1 and
// at most min(n, 64)); returns when all are done. `body` must not throw.
void ForEachItem(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& body);

// ForEachItem for items that can fail: once one fails, no item above it
// starts. The result is the error of the lowest-numbered failed item, what
// a loop in order would have returned.
Status ForEachItemOrError(std::size_t n, unsigned threads, const std::function<Status(std::size_t)>& body);

// Calls body(begin, end) over [0, n) in pieces of at least `min_piece`
// items, on up to ResolveThreads(threads) threads; returns when all are
// done. `body` must not throw.
void ParallelFor(std::size_t n, std::size_t min_piece, unsigned threads,
                 const std::function<void(std::size_t, std::size_t)>& body);

}  // namespace tensorsafe::internal
