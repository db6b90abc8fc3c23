// Floating-point dtype casts that round exactly as torch's Tensor.to() does
// (docs/CAST.md): f64, f32, f16 and bf16 to f32, f16 or bf16.
//
// - Narrowing rounds to nearest, ties to even; values beyond the target's
//   range become infinities; infinities and signed zeros are kept.
// - f64 -> f16 and f64 -> bf16 go through f32 (so round twice), as torch
//   does: the result can differ by one ulp from a direct rounding.
// - NaN stays NaN with its sign; narrowing sets the quiet bit and keeps the
//   top payload bits, widening keeps every bit. (torch's NaN bits depend on
//   its code path and the tensor's length; the values never do.)
//
// Thread safety: the functions are reentrant.
#pragma once

#include <cstddef>
#include <span>

#include "tensorsafe/dtype.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe {

// True when Cast converts `from` to `to`: from f64, f32, f16 or bf16, to
// f32, f16 or bf16 (the same dtype included: a copy).
bool CanCast(DType from, DType to);

// Converts the elements in `in` (of dtype `from`) into `out` (of dtype
// `to`), on up to `threads` threads (0: one per core, at most 8). Errors:
// kUnsupported when !CanCast(from, to); kInvalidArgument when `in` is not
// a whole number of elements or `out` does not hold exactly as many.
// `in` and `out` must not overlap.
Status Cast(DType from, std::span<const std::byte> in, DType to, std::span<std::byte> out, unsigned threads = 0);

// `t` cast to `to`: a dense tensor that owns its new bytes, with t's name,
// shape and metadata; `t` itself (sharing its data) when its dtype is
// already `to`. Errors: kUnsupported (a dtype Cast does not take, a sparse
// tensor), kInvalidArgument (data that is not the shape's size), each
// naming the tensor.
Result<Tensor> CastTensor(const Tensor& t, DType to, unsigned threads = 0);

}  // namespace tensorsafe
