// A growable array of bytes in its own anonymous mapping, for the writer's
// index, which grows to hundreds of MB at a million tensors: growing moves
// the mapping (mremap) instead of copying it, fresh pages come zeroed from
// the kernel (no memset), large buffers ask for transparent huge pages, and
// pages are faulted in by the stretch, ahead of use, not one at a time. A std::string
// or std::vector of the same size spent a fifth of the writer's time in
// page faults and copies (docs/format-bench.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorsafe::internal {

class PageBuffer {
 public:
  PageBuffer() = default;
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept;
  PageBuffer& operator=(PageBuffer&& o) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Appends `n` zero bytes and returns them. Throws std::bad_alloc when the
  // system has no memory for them, as a std::vector would.
  std::byte* Grow(std::size_t n);

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;   // bytes mapped
  std::size_t populated_ = 0;  // bytes prefaulted (MADV_POPULATE_WRITE), a multiple of 4 KiB
};

}  // namespace tensorsafe::internal
