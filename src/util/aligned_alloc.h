// 64-byte aligned heap buffers for tensor data that a Tensor owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tensorsafe::internal {

// The base page size, and the size from which a buffer asks for transparent
// huge pages (below it they would mostly sit empty).
inline constexpr std::size_t kPageSize = 4096;
inline constexpr std::size_t kHugePagesFrom = std::size_t{4} << 20;

// A 64-byte aligned buffer of `n` bytes (at least 1), shared so a Tensor can
// own it. From 4 MiB up it asks for transparent huge pages, as NumPy does for
// its arrays: a pread into fresh 4 KiB pages takes a fault in the kernel's
// copy for every page, 3x the time of the copy itself (1 GiB: 650 against
// 210 ms). Throws std::bad_alloc as operator new does.
std::shared_ptr<std::byte> AllocAligned(std::uint64_t n);

}  // namespace tensorsafe::internal
