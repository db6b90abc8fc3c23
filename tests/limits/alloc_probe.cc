// Replaces the global operator new/delete (all forms) with malloc/free
// wrappers that count requests on threads with an active AllocProbe. ASan and
// UBSan builds still see every allocation (through malloc).
#include "limits/alloc_probe.h"

#include <cstdlib>
#include <new>

namespace tensorsafe::testing {
namespace {
thread_local int t_active = 0;
thread_local std::size_t t_peak = 0;
thread_local std::size_t t_total = 0;

void Note(std::size_t n) {
  if (t_active > 0) {
    if (n > t_peak) t_peak = n;
    t_total += n;
  }
}

void* Alloc(std::size_t n, std::size_t align, bool nothrow) {
  Note(n);
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n == 0 ? 1 : n);
  } else if (posix_memalign(&p, align, n == 0 ? 1 : n) != 0) {
    p = nullptr;
  }
  if (p == nullptr && !nothrow) throw std::bad_alloc();
  return p;
}
}  // namespace

AllocProbe::AllocProbe() {
  if (t_active++ == 0) t_peak = t_total = 0;
}
AllocProbe::~AllocProbe() { --t_active; }
std::size_t AllocProbe::peak() const { return t_peak; }
std::size_t AllocProbe::total() const { return t_total; }

}  // namespace tensorsafe::testing

using tensorsafe::testing::Alloc;

void* operator new(std::size_t n) { return Alloc(n, 0, false); }
void* operator new[](std::size_t n) { return Alloc(n, 0, false); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return Alloc(n, 0, true); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return Alloc(n, 0, true); }
void* operator new(std::size_t n, std::align_val_t a) { return Alloc(n, static_cast<std::size_t>(a), false); }
void* operator new[](std::size_t n, std::align_val_t a) { return Alloc(n, static_cast<std::size_t>(a), false); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Alloc(n, static_cast<std::size_t>(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Alloc(n, static_cast<std::size_t>(a), true);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
