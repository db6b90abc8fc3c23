// ConvertOptions::dtype for Convert and WriteTensorSet (docs/CONVERT.md,
// docs/CAST.md).
#pragma once

#include <string>

#include "tensorsafe/convert.h"

namespace tensorsafe::internal {

// `set` with every floating tensor as `dtype` (convert.h's rule), the new
// bytes in one scratch region created in the directory of `out_path`.
// Errors: kInvalidArgument for a dtype other than f32, f16, bf16; those of
// gguf::DequantizedInfo, naming the tensor; kIOError from the scratch file.
Result<TensorSet> CastForConvert(const TensorSet& set, DType dtype, const std::string& out_path);

}  // namespace tensorsafe::internal
