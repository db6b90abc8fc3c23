// TensorSet: a format-neutral collection of named tensors with metadata, the
// common currency of the foreign-format codecs and of `tensorsafe convert`.
//
// Tensors in a set usually view memory they do not own outright (a file
// mapping, a received message) and share ownership of it through
// Tensor::owner, so a set stays valid on its own.
//
// Thread safety: a value; const access from many threads is safe.
#pragma once

#include <string>
#include <vector>

#include "tensorsafe/tensor.h"

namespace tensorsafe {

struct TensorSet {
  // In the source's order. Each Tensor's info carries name, dtype, shape and
  // per-tensor metadata (a JSON object text or ""); data_offset is the
  // position in the source file when known.
  std::vector<Tensor> tensors;
  // File-level metadata as a JSON object text ("" when none).
  std::string metadata_json;
};

}  // namespace tensorsafe
