// Tensors handed in from Python: (name, dtype, shape, data, metadata_json)
// tuples, or for a sparse COO tensor (name, dtype, dense shape, values,
// metadata_json, indices, coalesced) where `values` and `indices` (int64
// [nnz, rank], C-contiguous) export the buffer protocol. Dense tuples `data` exports the buffer protocol as C-contiguous bytes, or
// is an int: the address of a C-contiguous CPU tensor of exactly
// DenseByteSize(dtype, shape) bytes that the caller keeps alive for the call
// (tensorsafe._arrays passes torch tensors so, saving four torch calls per
// tensor). ParseEntries converts them with the GIL held; the views stay valid
// (buffers are held) while the GIL is released for writing.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
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
  std::optional<py::buffer_info> buffer;  // holds the exporter until destroyed (with the GIL)
  py::object keep;                        // or the ndarray whose memory `data` points at
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::string metadata_json;
  // Sparse COO (7-tuples): the indices, row-major [nnz, rank]. `data`/`size`
  // are then the values.
  bool coo = false;
  bool coalesced = false;
  std::optional<py::buffer_info> indices_buffer;
  std::vector<std::int64_t> indices_copy;  // when the exporter's memory is not 8-aligned
  std::span<const std::int64_t> indices;

  std::span<const std::byte> bytes() const { return {data, size}; }
  TensorView view() const { return TensorView::Contiguous(dtype, shape, bytes()); }
};

DType ParseDTypeOrThrow(const std::string& name);
Shape ToShape(const py::sequence& seq);
Entry ParseEntry(const py::handle& item);
std::vector<Entry> ParseEntries(const py::iterable& items);
// A TensorSet viewing the entries' buffers (no owner: the caller keeps
// `entries` alive while the set is used).
TensorSet ToTensorSet(const std::vector<Entry>& entries, std::string metadata_json);
// kUnsupported naming the first sparse entry when `format` (not "tsafe")
// cannot hold sparse tensors; OK otherwise.
Status RefuseSparse(const std::vector<Entry>& entries, const std::string& format);

// Whether the bytes of two dense entries overlap in memory.
bool AnyOverlap(const std::vector<Entry>& entries);
// Adds `e` (dense or COO) to any writer with Add and AddCoo.
template <typename W>
Status AddEntry(W& w, const Entry& e) {
  if (e.coo) return w.AddCoo(e.name, e.dtype, e.shape, e.indices, e.bytes(), e.coalesced, e.metadata_json);
  return w.Add(e.name, e.view(), e.metadata_json);
}

}  // namespace tensorsafe::python
