// Conversion of Python-side tensors to views (entries.h).
#include "entries.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace tensorsafe::python {

DType ParseDTypeOrThrow(const std::string& name) {
  std::optional<DType> d = ParseDType(name);
  if (!d) Throw(InvalidArgument("unknown dtype \"" + name + "\""));
  return *d;
}

Shape ToShape(const py::sequence& seq) {
  Shape shape;
  shape.reserve(py::len(seq));
  for (py::handle h : seq) {
    long long v = h.cast<long long>();
    if (v < 0) Throw(InvalidArgument("negative dimension " + std::to_string(v)));
    shape.push_back(static_cast<std::uint64_t>(v));
  }
  return shape;
}

namespace {

// The UTF-8 of a str, without a copy; TypeError for anything else.
std::string_view Utf8(PyObject* o, const char* what) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : nullptr;
  if (p == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be str", what);
    throw py::error_already_set();
  }
  return {p, static_cast<std::size_t>(n)};
}

// A tuple of ints (torch.Size is one) without pybind11's per-item casts:
// this runs once per tensor of a state dict.
Shape TupleShape(PyObject* tuple) {
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  Shape shape(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (v < 0) Throw(InvalidArgument("negative dimension " + std::to_string(v)));
    shape[static_cast<std::size_t>(i)] = static_cast<std::uint64_t>(v);
  }
  return shape;
}

}  // namespace

Entry ParseEntry(const py::handle& item, DTypeMemo* memo) {
  if (!PyTuple_Check(item.ptr())) Throw(InvalidArgument("entry must be a tuple"));
  py::tuple t = py::reinterpret_borrow<py::tuple>(item);
  if (t.size() != 5 && t.size() != 7) {
    Throw(
        InvalidArgument("entry must be (name, dtype, shape, data, metadata_json) or, sparse COO, "
                        "(name, dtype, shape, values, metadata_json, indices, coalesced)"));
  }
  PyObject* const* f = &PyTuple_GET_ITEM(t.ptr(), 0);
  Entry e;
  e.name = Utf8(f[0], "tensor name");
  if (memo != nullptr && memo->name.ptr() == f[1]) {
    e.dtype = memo->dtype;
  } else {
    e.dtype = ParseDTypeOrThrow(std::string(Utf8(f[1], "dtype")));
    if (memo != nullptr) {
      memo->name = py::reinterpret_borrow<py::object>(f[1]);  // held, so the address stays this str's
      memo->dtype = e.dtype;
    }
  }
  py::handle data(f[3]);
  const bool is_array = py::isinstance<py::array>(data);
  if (f[2] == Py_None) {
    // An ndarray's own shape, read from the array struct: building the
    // a.shape tuple was a third of the Python side of a numpy save.
    if (!is_array) {
      Throw(InvalidArgument("tensor \"" + e.name + "\": a shape of None needs an ndarray as data"));
    }
    auto a = py::reinterpret_borrow<py::array>(data);
    e.shape.assign(a.shape(), a.shape() + a.ndim());
  } else {
    e.shape = PyTuple_Check(f[2]) ? TupleShape(f[2]) : ToShape(py::reinterpret_borrow<py::sequence>(f[2]));
  }
  if (PyLong_Check(f[3])) {
    // An address: the size is computed here, never taken from the caller.
    Result<std::uint64_t> n = DenseByteSize(e.dtype, e.shape);
    Check(n.status());
    e.data = reinterpret_cast<const std::byte*>(data.cast<std::uintptr_t>());
    e.size = static_cast<std::size_t>(*n);
    if (e.data == nullptr && e.size != 0) Throw(InvalidArgument("tensor \"" + e.name + "\": null data address"));
  } else if (is_array && (py::reinterpret_borrow<py::array>(data).flags() & py::array::c_style) != 0) {
    // A C-contiguous ndarray: its pointer and size straight from the array
    // struct (a buffer request cost as much as writing a small tensor).
    auto a = py::reinterpret_borrow<py::array>(data);
    e.keep = a;
    e.data = static_cast<const std::byte*>(a.data());
    e.size = static_cast<std::size_t>(a.nbytes());
  } else {
    const py::buffer_info& b = e.hold().buffer.emplace(py::reinterpret_borrow<py::buffer>(data).request());
    // Strided exporters are refused rather than written in the wrong order.
    py::ssize_t expect = b.itemsize;
    for (py::ssize_t i = b.ndim; i-- > 0;) {
      if (b.shape[i] > 1 && b.strides[i] != expect) {
        Throw(InvalidArgument("tensor \"" + e.name + "\": data is not C-contiguous"));
      }
      expect *= b.shape[i];
    }
    e.data = static_cast<const std::byte*>(b.ptr);
    e.size = static_cast<std::size_t>(b.size * b.itemsize);
  }
  if (t.size() == 5 && !PyLong_Check(f[3])) {
    // A buffer's size must be what dtype and shape say: the writer reads
    // that many bytes from it.
    Result<std::uint64_t> want = DenseByteSize(e.dtype, e.shape);
    Check(want.status());
    if (*want != e.size) {
      Throw(InvalidArgument("tensor \"" + e.name + "\": " + std::to_string(e.size) + " bytes of data for " +
                            std::string(DTypeName(e.dtype)) + " " + ShapeToString(e.shape) + " (" +
                            std::to_string(*want) + " bytes)"));
    }
  }
  if (f[4] != Py_None) e.metadata_json = Utf8(f[4], "metadata_json");
  if (t.size() == 7) {
    if (py::isinstance<py::int_>(t[3])) Throw(InvalidArgument("tensor \"" + e.name + "\": COO values by address"));
    e.coo = true;
    e.coalesced = t[6].cast<bool>();
    const py::buffer_info& b = e.hold().indices_buffer.emplace(py::reinterpret_borrow<py::buffer>(t[5]).request());
    const bool contiguous =
        b.size == 0 || b.ndim <= 1 ||
        (b.ndim == 2 && (b.shape[0] <= 1 || b.strides[0] == b.shape[1] * 8) && (b.shape[1] <= 1 || b.strides[1] == 8));
    if (b.itemsize != 8 || (b.format != "q" && b.format != "l" && b.format != "<q" && b.format != "<l") ||
        !contiguous) {
      Throw(InvalidArgument("tensor \"" + e.name + "\": COO indices must be C-contiguous int64 [nnz, rank]"));
    }
    const auto n = static_cast<std::size_t>(b.size);
    if (reinterpret_cast<std::uintptr_t>(b.ptr) % alignof(std::int64_t) == 0) {
      e.indices = {static_cast<const std::int64_t*>(b.ptr), n};
    } else {
      std::vector<std::int64_t>& copy = e.hold().indices_copy;
      copy.resize(n);
      std::memcpy(copy.data(), b.ptr, n * 8);
      e.indices = copy;
    }
  }
  return e;
}

std::vector<Entry> ParseEntries(const py::iterable& items) {
  std::vector<Entry> out;
  if (py::isinstance<py::sequence>(items)) out.reserve(py::len(items));
  DTypeMemo memo;
  for (py::handle h : items) out.push_back(ParseEntry(h, &memo));
  return out;
}

TensorSet ToTensorSet(const std::vector<Entry>& entries, std::string metadata_json) {
  TensorSet set;
  set.metadata_json = std::move(metadata_json);
  set.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t;
    t.info.name = e.name;
    t.info.dtype = e.dtype;
    t.info.shape = e.shape;
    t.info.metadata_json = e.metadata_json;
    if (e.coo) {
      // A TensorSet holds a COO tensor as one region, indices then values:
      // joined here (sparse tensors are rare; dense ones stay views).
      const std::span<const std::byte> idx = std::as_bytes(e.indices);
      auto region = std::make_shared<std::vector<std::byte>>(idx.size() + e.size);
      std::copy(idx.begin(), idx.end(), region->begin());
      std::copy(e.data, e.data + e.size, region->begin() + static_cast<std::ptrdiff_t>(idx.size()));
      t.info.layout = Layout::kCoo;
      // With rank 0 there are no index columns: nnz comes from the values.
      const DTypeInfo& di = GetDTypeInfo(e.dtype);
      t.info.nnz = !e.shape.empty() ? e.indices.size() / e.shape.size() : e.size / di.block_bytes * di.block_elems;
      t.info.coo_values_offset = idx.size();
      t.info.coalesced = e.coalesced;
      t.data = *region;
      t.owner = std::move(region);
    } else {
      t.data = e.bytes();
    }
    t.info.data_length = t.data.size();
    set.tensors.push_back(std::move(t));
  }
  return set;
}

bool AnyOverlap(const std::vector<Entry>& entries) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;  // [begin, end)
  spans.reserve(entries.size());
  for (const Entry& e : entries) {
    if (e.coo || e.size == 0) continue;
    const auto p = reinterpret_cast<std::uintptr_t>(e.data);
    spans.push_back({p, p + e.size});
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) return true;
    spans[i].second = std::max(spans[i].second, spans[i - 1].second);
  }
  return false;
}

}  // namespace tensorsafe::python
