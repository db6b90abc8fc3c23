// Tensors handed in from Python: (name, dtype, shape, data, metadata_json)
// tuples, or for a sparse COO tensor (name, dtype, dense shape, values,
// metadata_json, indices, coalesced) where `values` and `indices` (int64
// [nnz, rank], C-contiguous) export the buffer protocol. A dense tuple's
// `data` exports the buffer protocol as C-contiguous bytes, or is an int:
// the address of a C-contiguous CPU tensor of exactly
// DenseByteSize(dtype, shape) bytes that the caller keeps alive for the call
// (tensorsafe._arrays passes torch tensors so, saving four torch calls per
// tensor). Its shape may be None when `data` is an ndarray: the array's own
// (tensorsafe._arrays passes C-contiguous arrays so). ParseEntries converts them with the GIL held; the views stay
// valid (buffers are held) while the GIL is released for writing.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::python {

struct Entry {
  // Buffer requests of exporters other than ndarrays, and sparse indices:
  // rare, so apart. An Entry is made per tensor (100,000 for a large state
  // dict), and with these inline it was 3x the size (456 bytes, not 152):
  // the first touch of 100,000 of them was a measurable part of a save.
  struct Held {
    std::optional<py::buffer_info> buffer;  // holds the exporter until destroyed (with the GIL)
    std::optional<py::buffer_info> indices_buffer;
    std::vector<std::int64_t> indices_copy;  // when the exporter's memory is not 8-aligned
  };

  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  py::object keep;  // the ndarray whose memory `data` points at, if it is one
  std::unique_ptr<Held> held;
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::string metadata_json;
  // Sparse COO (7-tuples): the indices, row-major [nnz, rank]. `data`/`size`
  // are then the values.
  bool coo = false;
  bool coalesced = false;
  std::span<const std::int64_t> indices;

  Held& hold() {
    if (!held) held = std::make_unique<Held>();
    return *held;
  }

  std::span<const std::byte> bytes() const { return {data, size}; }
  TensorView view() const { return TensorView::Contiguous(dtype, shape, bytes()); }
};

DType ParseDTypeOrThrow(const std::string& name);
Shape ToShape(const py::sequence& seq);
// The last dtype object parsed and its DType: entries of one call mostly
// share one interned dtype str, whose parse (a lower-cased copy and a table
// scan) is then skipped.
struct DTypeMemo {
  py::object name;
  DType dtype = DType::kU8;
};
Entry ParseEntry(const py::handle& item, DTypeMemo* memo = nullptr);
std::vector<Entry> ParseEntries(const py::iterable& items);
// A TensorSet viewing the entries' dense buffers (no owner: the caller keeps
// `entries` alive while the set is used); a COO entry's indices and values
// are copied into one region the set owns.
TensorSet ToTensorSet(const std::vector<Entry>& entries, std::string metadata_json);

// Whether the bytes of two dense entries overlap in memory.
bool AnyOverlap(const std::vector<Entry>& entries);
// Adds `e` (dense or COO) to any writer with Add and AddCoo.
template <typename W>
Status AddEntry(W& w, const Entry& e) {
  if (e.coo) return w.AddCoo(e.name, e.dtype, e.shape, e.indices, e.bytes(), e.coalesced, e.metadata_json);
  // The Writer's span form builds no view (a shape copy a tensor).
  if constexpr (std::is_same_v<W, Writer>) return w.Add(e.name, e.dtype, e.shape, e.bytes(), e.metadata_json);
  return w.Add(e.name, e.view(), e.metadata_json);
}

}  // namespace tensorsafe::python
