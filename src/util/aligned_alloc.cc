#include "util/aligned_alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <new>

namespace tensorsafe::internal {
namespace {

constexpr std::uint64_t kHugeFrom = std::uint64_t{4} << 20;
constexpr std::uintptr_t kPage = 4096;

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

}  // namespace

std::shared_ptr<std::byte> AllocAligned(std::uint64_t n) {
  const std::size_t size = static_cast<std::size_t>(std::max<std::uint64_t>(n, 1));
  auto* p = static_cast<std::byte*>(::operator new[](size, std::align_val_t{64}));
  std::shared_ptr<std::byte> out(p, AlignedDelete{});
  if (n >= kHugeFrom) {
    // The whole pages inside the block; advice only, ignored where THP is off.
    const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + size) & ~(kPage - 1);
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  return out;
}

}  // namespace tensorsafe::internal
