// Helpers of the format table shared by its rows (src/formats/).
#pragma once

#include <span>
#include <string>

#include "tensorsafe/formats/registry.h"

namespace tensorsafe::internal {

// The counts and metadata of `set`, the layout fields left unset.
FileDescription Describe(const TensorSet& set);

// Each tensor's data against its info.data_checksum (a format with
// Capabilities::checksums; FORMAT.md §6.2): kCorruption naming `path` and
// the first damaged tensor.
Status CheckChecksums(std::span<const Tensor> tensors, const std::string& path);

}  // namespace tensorsafe::internal
