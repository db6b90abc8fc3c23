// Helpers shared by the foreign-format codecs (tenbin, btf, zio):
// zero-copy-or-copy tensor construction, dense-size checks, and the
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

#include "io/pieces.h"
#include "tensorsafe/env.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::internal {

// A Tensor viewing `bytes` (sharing `owner`) when their address is a multiple
// of `align`, so callers may cast the data to the element type; otherwise a
// Tensor owning an aligned copy.
Tensor ViewOrCopy(TensorInfo info, std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                  std::size_t align);
// A Tensor owning `bytes`.
Tensor OwnedTensor(TensorInfo info, std::vector<std::byte> bytes);

// OK when `size` bytes hold a dense tensor of `dtype` and `shape`; else
// kInvalidArgument "<what>: 8 data bytes, but shape [2, 3] of f32 needs 24"
// (kOutOfRange when the shape's byte size overflows).
Status CheckDenseSize(DType dtype, std::span<const std::uint64_t> shape, std::uint64_t size, const std::string& what);

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
