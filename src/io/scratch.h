// Writable scratch memory backed by an unlinked temporary file: for data a
// command builds before writing it out (convert --dtype's cast tensors),
// so that memory use stays bounded by the page cache rather than by the
// data's size. The file's blocks are reserved up front, so a full disk is
// an error here, never a SIGBUS later; nothing is left behind on any path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe::internal {

// Where scratch for the output `path` goes: its directory, or $TMPDIR when
// it is a URL (written locally first, then stored: docs/REMOTE.md).
std::string ScratchDirFor(const std::string& path);

class ScratchRegion {
 public:
  // `size` bytes of zeroed, writable memory in a temporary file created in
  // `dir` (unlinked at once). Errors: kIOError (with errno) when the file
  // cannot be created, reserved (ENOSPC) or mapped.
  static Result<std::shared_ptr<ScratchRegion>> Create(const std::string& dir, std::uint64_t size);
  ~ScratchRegion();
  ScratchRegion(const ScratchRegion&) = delete;
  ScratchRegion& operator=(const ScratchRegion&) = delete;

  std::span<std::byte> bytes() const { return {data_, size_}; }

 private:
  ScratchRegion(std::byte* data, std::size_t size) : data_(data), size_(size) {}
  std::byte* data_;
  std::size_t size_;
};

}  // namespace tensorsafe::internal
