#include "util/page_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <utility>

#include "util/aligned_alloc.h"

namespace tensorsafe::internal {
namespace {
constexpr std::size_t kMinMapping = std::size_t{64} << 10;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
}  // namespace

PageBuffer::~PageBuffer() {
  if (data_) ::munmap(data_, capacity_);
}

PageBuffer::PageBuffer(PageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)),
      populated_(std::exchange(o.populated_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, capacity_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    populated_ = std::exchange(o.populated_, 0);
  }
  return *this;
}

std::byte* PageBuffer::Grow(std::size_t n) {
  if (n > capacity_ - size_) {
    if (n > SIZE_MAX / 2 - size_) throw std::bad_alloc();
    const std::size_t want = std::max({kMinMapping, 2 * capacity_, size_ + n});
    const std::size_t cap = (want + kMinMapping - 1) / kMinMapping * kMinMapping;
    void* p = data_ ? ::mremap(data_, capacity_, cap, MREMAP_MAYMOVE)
                    : ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    if (cap >= kHugePagesFrom) (void)::madvise(p, cap, MADV_HUGEPAGE);  // advice: ignored where unsupported
    data_ = static_cast<std::byte*>(p);
    capacity_ = cap;
  }
  if (size_ + n > populated_) {
    // Fault in the next stretch in one call: faults taken one page at a time
    // were 13% of a 100k small-tensor write (perf). Ahead by a quarter of
    // what is in use, so that a buffer filled at once (a hash table) is
    // populated at once.
    const std::size_t ahead = std::max({kMinMapping, populated_ / 4, size_ + n - populated_});
    const std::size_t end = std::min(capacity_, (populated_ + ahead + kPageSize - 1) / kPageSize * kPageSize);
    // An old kernel (before 5.14) refuses the advice: the pages then fault
    // in one by one, as before.
    (void)::madvise(data_ + populated_, end - populated_, MADV_POPULATE_WRITE);
    populated_ = end;
  }
  std::byte* out = data_ + size_;
  size_ += n;
  return out;
}

}  // namespace tensorsafe::internal
