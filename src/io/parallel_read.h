// Large positional reads split across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "io/env.h"

namespace tensorsafe::internal {

// f.ReadAt(offset, out), in 8 MiB pieces that up to 4 threads (the caller
// and helpers, no more than the machine's cores) take in turn once `out` is
// 32 MiB or more. The kernel's copy from the page cache runs at about 0.7x
// a memcpy on one core; two cores bring a 1 GiB read to parity. A helper
// that cannot start or is not scheduled costs nothing: the caller takes
// its pieces. On failure, the error of the failing piece at the lowest
// offset; `out` then holds unspecified bytes.
Status ReadAtParallel(const RandomAccessFile& f, std::uint64_t offset, std::span<std::byte> out);

}  // namespace tensorsafe::internal
