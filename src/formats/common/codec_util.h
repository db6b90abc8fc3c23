// Pieces shared by the foreign-format codecs (tenbin, btf, zio): the file seam
// for ReadFile/WriteFile, zero-copy-or-copy tensor construction, and the
// naming rule for formats whose tensors have no (or no unique) names.
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
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

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


// A Tensor viewing `bytes` (sharing `owner`) when their address is a multiple
// of `align`, so callers may cast the data to the element type; otherwise a
// Tensor owning an aligned copy.
Tensor ViewOrCopy(TensorInfo info, std::span<const std::byte> bytes,
                  std::shared_ptr<const void> owner, std::size_t align);
// A Tensor owning `bytes`.
Tensor OwnedTensor(TensorInfo info, std::vector<std::byte> bytes);

// OK when `size` bytes hold a dense tensor of `dtype` and `shape`; else
// kInvalidArgument "<what>: 8 data bytes, but shape [2, 3] of f32 needs 24"
// (kOutOfRange when the shape's byte size overflows).
Status CheckDenseSize(DType dtype, std::span<const std::uint64_t> shape, std::uint64_t size,
                      const std::string& what);

// Names for tensors whose format offers at most a preferred name each
// (tenbin's info, zio's metadata "name"): preferred[i] is kept when it is
// non-empty, unique, and not the positional name of another tensor; every
// other tensor is named by its decimal index ("0", "1", ...).
std::vector<std::string> AssignNames(const std::vector<std::string>& preferred);
// True when `name` is the positional name of index `i`.
bool IsPositionalName(std::string_view name, std::size_t i);

// The names a reader of such a format gives `set`'s tensors: each tensor
// stores its metadata's `key` when that is a string, else its name unless
// that is positional; `read` maps a stored name to the one the reader sees;
// then AssignNames.
std::vector<std::string> ReadBackNames(const TensorSet& set, std::string_view key,
                                       std::string (*read)(std::string_view stored));
// OK when back[i] is tensor i's name for every i, or `drop_names`; else
// kInvalidArgument: "tensor 3 \"w\": <why(tensor)>, so it would read back
// as \"3\" (consent to positional names: drop_names, --drop-names)".
Status CheckReadBackNames(const TensorSet& set, const std::vector<std::string>& back, bool drop_names,
                          std::string (*why)(const Tensor& t));

// "name: " for message prefixes, or "" when the name is empty.
std::string Context(std::string_view display_name);

}  // namespace tensorsafe::internal
