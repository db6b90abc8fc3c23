// LoadArena: the loader's fresh memory, one anonymous mapping (docs/LOAD.md
// "4 KiB or 2 MiB pages").
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "load/internal.h"
#include "tensorsafe/load.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

// False when the kernel's transparent huge pages are "[never]": advice
// would change nothing, and the report would say 2 MiB of 4 KiB pages.
bool HugePagesAvailable() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(in, line) && line.find("[never]") == std::string::npos;
}

}  // namespace

Result<std::shared_ptr<LoadArena>> LoadArena::Allocate(std::uint64_t bytes, bool huge_pages) {
  static const bool available = HugePagesAvailable();
  huge_pages = huge_pages && available;
  const std::uint64_t size = (bytes + internal::kBlock - 1) & ~(internal::kBlock - 1);
  const std::uint64_t map_size = huge_pages ? size + internal::kHuge : size;
  void* map = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) {
    return IOError("loader: mmap of " + internal::Str(map_size) + " bytes: " + std::strerror(errno), errno);
  }
  auto* base = static_cast<std::byte*>(map);
  if (huge_pages) {
    const auto addr = reinterpret_cast<std::uintptr_t>(map);
    base += ((addr + internal::kHuge - 1) & ~(internal::kHuge - 1)) - addr;
    ::madvise(base, size, MADV_HUGEPAGE);  // advice: a kernel that cannot still loads
  }
  return std::shared_ptr<LoadArena>(new LoadArena(map, map_size, base, size, huge_pages));
}

void LoadArena::UseSmallPages(std::uint64_t offset) {
  if (!huge_ || offset >= size_) return;
  ::madvise(base_ + offset, size_ - offset, MADV_NOHUGEPAGE);  // advice, as above
}

LoadArena::~LoadArena() { ::munmap(map_, map_size_); }

}  // namespace tensorsafe
