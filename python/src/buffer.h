// TensorBuffer: one tensor's bytes exported to Python without a copy.
//
// It holds a tensorsafe::Tensor, whose `owner` keeps the file mapping (or the
// heap buffer of a pread or decoded tensor) alive, so every NumPy array,
// memoryview or DLPack capsule made from it stays valid after the reader that
// produced it is gone. Exports: the buffer protocol (read-only bytes, "B"),
// __dlpack__ / __dlpack_device__ (CPU), and ndarray views built by
// ToNdarray with the TensorBuffer as the array's base.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "common.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::python {

struct TensorBuffer {
  Tensor tensor;
};

// The NumPy dtype table set by tensorsafe._arrays at import: index = DType
// code, value = numpy.dtype or None (packed types NumPy cannot hold).
py::object NumpyDtypeFor(DType dtype);

// A read-only ndarray viewing `buffer` (which becomes its base). Packed
// sub-byte dtypes raise UnsupportedError unless `packed`, which returns their
// raw bytes as uint8 of shape (nbytes,).
py::object ToNdarray(py::object buffer, bool packed);

// A writable "dltensor" capsule of dense `tensor` (torch.utils.dlpack.
// from_dlpack makes a tensor of exactly its bytes from it, owning a
// reference to tensor.owner), or None for packed sub-byte dtypes.
py::object WritableDLPack(const Tensor& tensor);

// NumPy and torch size arrays in signed 64-bit integers, but the format lets
// a shape's nonzero dims multiply to anything below 2^64 (a zero dim makes
// the tensor empty). OK when every dim and the product of the nonzero dims
// fit in int64, times the element size for a dense tensor (NumPy sizes its
// bytes; a sparse one's dense shape only needs torch's element count);
// otherwise UnsupportedError naming the tensor and its shape.
Status CheckPythonShape(std::string_view name, DType dtype, std::span<const std::uint64_t> shape,
                        Layout layout = Layout::kDense);

// Wraps `tensor` as a Python TensorBuffer object; raises CheckPythonShape's
// error first, so no TensorBuffer has a shape Python cannot index.
py::object MakeBuffer(Tensor tensor);

}  // namespace tensorsafe::python
