// Tensors handed in from Python: (name, dtype, shape, data, metadata_json)
// tuples whose `data` exports the buffer protocol as C-contiguous bytes.
// ParseEntries converts them with the GIL held; the resulting views stay
// valid (the buffers are held) while the GIL is released for writing.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "common.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::python {

struct Entry {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  py::buffer_info buffer;  // holds the exporter until destroyed (with the GIL)
  std::string metadata_json;

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(buffer.ptr), static_cast<std::size_t>(buffer.size * buffer.itemsize)};
  }
  TensorView view() const { return TensorView::Contiguous(dtype, shape, bytes()); }
};

DType ParseDTypeOrThrow(const std::string& name);
Shape ToShape(const py::sequence& seq);
Entry ParseEntry(const py::handle& item);
std::vector<Entry> ParseEntries(const py::iterable& items);
// A TensorSet viewing the entries' buffers (no owner: the caller keeps
// `entries` alive while the set is used).
TensorSet ToTensorSet(const std::vector<Entry>& entries, std::string metadata_json);

}  // namespace tensorsafe::python
