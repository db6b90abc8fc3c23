#include "util/aligned_alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <new>

namespace tensorsafe::internal {
namespace {

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

}  // namespace

std::shared_ptr<std::byte> AllocAligned(std::uint64_t n) {
  const std::size_t size = static_cast<std::size_t>(std::max<std::uint64_t>(n, 1));
  auto* p = static_cast<std::byte*>(::operator new[](size, std::align_val_t{64}));
  std::shared_ptr<std::byte> out(p, AlignedDelete{});
  if (n >= kHugePagesFrom) {
    // The whole pages inside the block; advice only, ignored where THP is off.
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kPageSize - 1) & ~(kPageSize - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + size) & ~(kPageSize - 1);
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  return out;
}

}  // namespace tensorsafe::internal
