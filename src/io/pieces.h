// An encoded file as byte ranges (Pieces), built once by a codec or a
// stream's wire encoder and then joined in memory or streamed to a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal {

inline std::span<const std::byte> AsByteSpan(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// An encoded file as a sequence of byte ranges: the headers, length fields
// and padding it owns, and views of tensor bytes it does not own (their
// owners must outlive it). A codec builds its output once as Pieces; Encode
// joins them, WriteFile streams them, so writing a file never gathers the
// tensor data in memory.
class Pieces {
 public:
  // Appends owned bytes as a new piece; returns its index for owned().
  std::size_t Append(std::string bytes);
  // Appends a view of bytes owned elsewhere.
  void AppendView(std::span<const std::byte> bytes);
  // `n` zero bytes (padding).
  void AppendZeros(std::uint64_t n);
  // The owned piece returned by Append(index), to patch fields such as an
  // offset table after later pieces are known. Its size must not change.
  std::string& owned(std::size_t index) { return owned_[index]; }
  std::uint64_t size() const { return size_; }
  std::string Join() const;
  // Appends every piece to `file`, small pieces gathered through a 1 MiB
  // buffer, large views written straight from their memory.
  Status WriteTo(WritableFile& file) const;

 private:
  struct Piece {
    bool is_owned = false;
    std::size_t owned_index = 0;
    std::span<const std::byte> view;
  };
  std::span<const std::byte> BytesOf(const Piece& p) const;
  std::deque<std::string> owned_;  // a deque: Append keeps earlier strings in place
  std::vector<Piece> pieces_;
  std::uint64_t size_ = 0;
};

// Streams `pieces` to `path` through an AtomicFile (io/atomic_file.h) made
// by `env` (nullptr: the default).
Status WritePiecesAtomically(const std::string& path, const Pieces& pieces, bool sync, Env* env);

}  // namespace tensorsafe::internal
