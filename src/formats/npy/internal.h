// Pieces of the npy codec shared with the npz codec.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tensorsafe/env.h"
#include "tensorsafe/formats/npy.h"
#include "util/aligned_alloc.h"

namespace tensorsafe::npy::internal {

// Decodes one .npy image into a tensor named `name`. `where` prefixes every
// error ("a.npz: member \"w.npy\""). data_offset is relative to `bytes`.
Result<Tensor> DecodeArray(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, const std::string& name,
                           const std::string& where, const tensorsafe::npy::ReadOptions& options);

// Whether NumPy can hold an array of `shape` and `itemsize`: the non-zero
// dimensions' product times the item size fits in 2^63 - 1 (npy_intp).
bool WithinNumpySizeLimit(std::span<const std::uint64_t> shape, std::uint64_t itemsize);

// The last path component without `suffix` (when it ends with it).
std::string StemOf(const std::string& path, std::string_view suffix);

}  // namespace tensorsafe::npy::internal
