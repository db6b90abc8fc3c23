// Large positional reads: split across threads, or hashed piece by piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorsafe/env.h"

namespace tensorsafe::internal {

// f.ReadAt(offset, out), in 8 MiB pieces that `threads` threads (the caller
// and helpers; 0 = one per core, up to 4; at most 64) take in turn once `out` is 32 MiB
// or more. The kernel's copy from the page cache runs at about 0.7x
// a memcpy on one core; two cores bring a 1 GiB read to parity. A helper
// that cannot start or is not scheduled costs nothing: the caller takes
// its pieces. On failure, the error of the failing piece at the lowest
// offset; `out` then holds unspecified bytes.
Status ReadAtParallel(const RandomAccessFile& f, std::uint64_t offset, std::span<std::byte> out, unsigned threads = 0);

// XXH3-64 of the `length` bytes of `f` at `offset`, read `piece` bytes at a
// time into `buffer` (the caller's, kept across calls): a tensor checked
// without holding it whole. Errors: f.ReadAt's.
Result<std::uint64_t> HashAt(const RandomAccessFile& f, std::uint64_t offset, std::uint64_t length, std::size_t piece,
                             std::vector<std::byte>& buffer);

}  // namespace tensorsafe::internal
