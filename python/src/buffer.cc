// TensorBuffer: buffer protocol, DLPack and ndarray export (buffer.h).
#include "buffer.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tensorsafe/dtype.h"

namespace tensorsafe::python {
namespace {

// A non-null address for empty tensors: NumPy allocates when given nullptr,
// and DLPack consumers may reject a null data pointer.
alignas(64) const std::byte kEmpty[64] = {};

const std::byte* DataOrEmpty(const Tensor& t) { return t.data.empty() ? kEmpty : t.data.data(); }

// ---- DLPack (ABI of dlpack.h 1.x, declared here from its documented layout) --

struct DLDevice {
  std::int32_t device_type;  // 1 = kDLCPU
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool, 7.. float8
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t kDLReadOnly = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY
constexpr DLPackVersion kDLVersion{1, 1};

// The DLPack type of a whole-byte dtype (dlpack.h DLDataTypeCode values).
std::optional<DLDataType> DLTypeOf(DType d) {
  const std::uint8_t bits = static_cast<std::uint8_t>(GetDTypeInfo(d).bits);
  switch (d) {
    case DType::kBool: return DLDataType{6, 8, 1};
    case DType::kU8:
    case DType::kU16:
    case DType::kU32:
    case DType::kU64: return DLDataType{1, bits, 1};
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64: return DLDataType{0, bits, 1};
    case DType::kF16:
    case DType::kF32:
    case DType::kF64: return DLDataType{2, bits, 1};
    case DType::kBF16: return DLDataType{4, 16, 1};
    case DType::kC64: return DLDataType{5, 64, 1};
    case DType::kC128: return DLDataType{5, 128, 1};
    case DType::kF8E4M3FN: return DLDataType{10, 8, 1};
    case DType::kF8E4M3FNUZ: return DLDataType{11, 8, 1};
    case DType::kF8E5M2: return DLDataType{12, 8, 1};
    case DType::kF8E5M2FNUZ: return DLDataType{13, 8, 1};
    case DType::kF8E8M0: return DLDataType{14, 8, 1};
    default: return std::nullopt;  // packed sub-byte types
  }
}

// Owns what a capsule's DLTensor points at; freed by the consumer's call of
// the deleter (or by the capsule if never consumed). Holds no Python object,
// so the deleter may run without the GIL.
struct DLContext {
  std::shared_ptr<const void> owner;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
};

void FillDLTensor(DLContext* ctx, const Tensor& t, DLDataType type, DLTensor* out) {
  const std::size_t n = t.info.shape.size();
  ctx->shape.resize(n);
  ctx->strides.resize(n);
  std::int64_t stride = 1;
  for (std::size_t i = n; i-- > 0;) {
    ctx->shape[i] = static_cast<std::int64_t>(t.info.shape[i]);
    ctx->strides[i] = stride;
    stride *= ctx->shape[i] > 0 ? ctx->shape[i] : 1;
  }
  out->data = const_cast<std::byte*>(DataOrEmpty(t));
  out->device = DLDevice{1, 0};
  out->ndim = static_cast<std::int32_t>(n);
  out->dtype = type;
  out->shape = ctx->shape.data();
  out->strides = ctx->strides.data();
  out->byte_offset = 0;
}

void DeleteLegacy(DLManagedTensor* m) { delete static_cast<DLContext*>(m->manager_ctx); }
void DeleteVersioned(DLManagedTensorVersioned* m) { delete static_cast<DLContext*>(m->manager_ctx); }

void CapsuleLegacy(PyObject* capsule) {
  // A consumer renames the capsule "used_dltensor" and then owns the tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}
void CapsuleVersioned(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

// A "dltensor" capsule (DLPack 0.x ABI, writable: it has no read-only flag)
// that owns `ctx`.
py::object LegacyCapsule(std::unique_ptr<DLContext> ctx, const Tensor& t, DLDataType type) {
  DLManagedTensor* m = &ctx->legacy;
  m->manager_ctx = ctx.get();
  m->deleter = DeleteLegacy;
  FillDLTensor(ctx.get(), t, type, &m->dl_tensor);
  PyObject* cap = PyCapsule_New(m, "dltensor", CapsuleLegacy);
  if (!cap) throw py::error_already_set();
  ctx.release();
  return py::reinterpret_steal<py::object>(cap);
}

py::object ToDLPack(const TensorBuffer& b, py::object max_version, py::object dl_device, py::object copy) {
  const Tensor& t = b.tensor;
  if (!copy.is_none() && copy.cast<bool>()) {
    throw py::buffer_error("tensorsafe: __dlpack__(copy=True) is not supported; the export is zero-copy");
  }
  if (!dl_device.is_none()) {
    auto dev = dl_device.cast<std::pair<int, int>>();
    if (dev.first != 1) throw py::buffer_error("tensorsafe: tensors live on the CPU (kDLCPU)");
  }
  if (t.info.layout != Layout::kDense) {
    Throw(Unsupported("tensor \"" + t.info.name +
                      "\" is sparse COO, which DLPack cannot describe; use "
                      "tensorsafe's torch or NumPy readers (torch.sparse_coo_tensor / SparseCoo)"));
  }
  std::optional<DLDataType> type = DLTypeOf(t.info.dtype);
  if (!type) {
    Throw(Unsupported("tensor \"" + t.info.name + "\": dtype " + std::string(DTypeName(t.info.dtype)) +
                      " is packed (several elements per byte) and has no DLPack export"));
  }
  bool versioned = false;
  if (!max_version.is_none()) versioned = max_version.cast<std::pair<int, int>>().first >= 1;
  auto ctx = std::make_unique<DLContext>();
  ctx->owner = t.owner;
  if (versioned) {
    DLManagedTensorVersioned* m = &ctx->versioned;
    m->version = kDLVersion;
    m->manager_ctx = ctx.get();
    m->deleter = DeleteVersioned;
    m->flags = kDLReadOnly;
    FillDLTensor(ctx.get(), t, *type, &m->dl_tensor);
    PyObject* cap = PyCapsule_New(m, "dltensor_versioned", CapsuleVersioned);
    if (!cap) throw py::error_already_set();
    ctx.release();
    return py::reinterpret_steal<py::object>(cap);
  }
  return LegacyCapsule(std::move(ctx), t, *type);
}

// Set once by tensorsafe._arrays; leaked on purpose so that no Python object
// is released after the interpreter has finalised.
py::list* g_numpy_dtypes = nullptr;

}  // namespace

py::object NumpyDtypeFor(DType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  if (g_numpy_dtypes && i < g_numpy_dtypes->size()) return (*g_numpy_dtypes)[i];
  return py::none();
}

py::object WritableDLPack(const Tensor& t) {
  std::optional<DLDataType> type = DLTypeOf(t.info.dtype);
  if (!type || t.info.layout != Layout::kDense) return py::none();
  auto ctx = std::make_unique<DLContext>();
  ctx->owner = t.owner;
  return LegacyCapsule(std::move(ctx), t, *type);
}

// A read-only ndarray of `shape` and `dt` over `data`, with `base` as its base.
py::object ReadOnlyArray(py::object dt, std::vector<py::ssize_t> shape, const std::byte* data, py::object base) {
  py::array arr(py::reinterpret_borrow<py::dtype>(dt), std::move(shape), static_cast<const void*>(data), base);
  py::detail::array_proxy(arr.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return arr;
}

// (indices i64 [nnz, rank], values [nnz], values' offset in the file) of a
// COO tensor, both read-only views of `buffer`, after CheckCooIndices (which
// the reader defers to Verify): nothing downstream bound-checks them.
py::tuple CooArrays(py::object buffer, bool packed) {
  const Tensor& t = buffer.cast<const TensorBuffer&>().tensor;
  if (t.info.layout != Layout::kCoo) Throw(InvalidArgument("tensor \"" + t.info.name + "\" is not sparse COO"));
  Result<tensorsafe::CooParts> parts = SplitCoo(t.info, t.data);
  Status s = parts.status();
  if (s.ok()) {
    py::gil_scoped_release nogil;
    s = CheckCooIndices(t.info, parts->indices);
  }
  // SplitCoo's disagreement is the file's fault here (the reader checked R30).
  if (!s.ok()) Throw(s.code() == StatusCode::kInvalidArgument ? Corruption(s.message()) : s);
  const auto rank = static_cast<py::ssize_t>(t.info.shape.size());
  const auto nnz = static_cast<py::ssize_t>(t.info.nnz);
  py::object indices = ReadOnlyArray(py::dtype("int64"), {nnz, rank}, DataOrEmpty(t), buffer);
  py::object dt = NumpyDtypeFor(t.info.dtype);
  std::vector<py::ssize_t> vshape{nnz};
  if (dt.is_none()) {
    if (!packed) {
      Throw(Unsupported("tensor \"" + t.info.name + "\": dtype " + std::string(DTypeName(t.info.dtype)) +
                        " is packed (several elements per byte) and NumPy has no such type; "
                        "pass packed=True for its raw bytes as uint8"));
    }
    dt = py::dtype("uint8");
    vshape[0] = static_cast<py::ssize_t>(parts->values.size());
  }
  const std::byte* values = parts->values.empty() ? kEmpty : parts->values.data();
  py::object vals = ReadOnlyArray(dt, std::move(vshape), values, buffer);
  return py::make_tuple(indices, vals, t.info.data_offset + t.info.coo_values_offset);
}

py::object ToNdarray(py::object buffer, bool packed) {
  const TensorBuffer& b = buffer.cast<const TensorBuffer&>();
  const Tensor& t = b.tensor;
  if (t.info.layout == Layout::kCoo) {
    // NumPy has no sparse arrays: tensorsafe._arrays builds its SparseCoo.
    return py::module_::import("tensorsafe._arrays").attr("coo_numpy")(buffer, packed);
  }
  py::object dt = NumpyDtypeFor(t.info.dtype);
  std::vector<py::ssize_t> shape;
  if (dt.is_none()) {
    if (!packed) {
      Throw(Unsupported("tensor \"" + t.info.name + "\": dtype " + std::string(DTypeName(t.info.dtype)) +
                        " is packed (several elements per byte) and NumPy has no such type; "
                        "pass packed=True for its raw bytes as uint8"));
    }
    dt = py::dtype("uint8");
    shape.push_back(static_cast<py::ssize_t>(t.data.size()));
  } else {
    shape.reserve(t.info.shape.size());
    for (std::uint64_t d : t.info.shape) shape.push_back(static_cast<py::ssize_t>(d));
  }
  return ReadOnlyArray(dt, std::move(shape), DataOrEmpty(t), buffer);
}

// A COO tensor's buffer holds its whole region (indices, padding, values);
// numpy() and coo() interpret it, __dlpack__ refuses it.
Status CheckPythonShape(std::string_view name, DType dtype, std::span<const std::uint64_t> shape, Layout layout) {
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
  const std::uint32_t size = layout == Layout::kDense ? ElementSize(dtype) : 1;
  std::uint64_t bytes = size ? size : 1;
  bool fits = true;
  for (std::uint64_t d : shape) {
    if (d > kMax || (d != 0 && bytes > kMax / d)) {
      fits = false;
      break;
    }
    if (d != 0) bytes *= d;
  }
  if (fits) return Status::OK();
  return Unsupported("tensor \"" + std::string(name) + "\": shape " + ShapeToString(shape) + " of " +
                     std::string(DTypeName(dtype)) +
                     (layout == Layout::kDense ? " does not fit NumPy or torch (a dim, or the nonzero dims times the "
                                                 "element size, exceeds 2^63-1)"
                                               : " does not fit torch (a dim, or the nonzero dims' product, exceeds "
                                                 "2^63-1)"));
}

py::object MakeBuffer(Tensor tensor) {
  Check(CheckPythonShape(tensor.info.name, tensor.info.dtype, tensor.info.shape, tensor.info.layout));
  return py::cast(TensorBuffer{std::move(tensor)});
}

void RegisterBuffer(py::module_& m) {
  m.def(
      "check_shape",
      [](const std::string& name, const std::string& dtype, const std::vector<std::uint64_t>& shape) {
        std::optional<DType> dt = ParseDType(dtype);
        if (!dt) Throw(InvalidArgument("unknown dtype \"" + dtype + "\""));
        Check(CheckPythonShape(name, *dt, shape));
      },
      py::arg("name"), py::arg("dtype"), py::arg("shape"),
      "Raises UnsupportedError when NumPy and torch cannot size a tensor of this shape.");
  py::class_<TensorBuffer>(m, "TensorBuffer", py::buffer_protocol(), R"doc(
A tensor's bytes, exported without a copy.

It keeps the memory it views alive (the file mapping of a reader, or the
buffer of a pread or decoded tensor) for as long as it, or anything made from
it, lives. It exports the buffer protocol (read-only bytes) and DLPack
(``torch.from_dlpack(buf)``, ``numpy.from_dlpack(buf)``).
)doc")
      .def_buffer([](TensorBuffer& b) {
        const Tensor& t = b.tensor;
        return py::buffer_info(const_cast<std::byte*>(DataOrEmpty(t)), 1, "B", 1,
                               {static_cast<py::ssize_t>(t.data.size())}, {1}, /*readonly=*/true);
      })
      .def_property_readonly("name", [](const TensorBuffer& b) { return b.tensor.info.name; })
      .def_property_readonly("dtype", [](const TensorBuffer& b) { return std::string(DTypeName(b.tensor.info.dtype)); })
      .def_property_readonly("shape",
                             [](const TensorBuffer& b) {
                               py::tuple s(b.tensor.info.shape.size());
                               for (std::size_t i = 0; i < b.tensor.info.shape.size(); ++i)
                                 s[i] = py::int_(b.tensor.info.shape[i]);
                               return s;
                             })
      .def_property_readonly("nbytes", [](const TensorBuffer& b) { return b.tensor.data.size(); })
      .def_property_readonly(
          "offset", [](const TensorBuffer& b) { return b.tensor.info.data_offset; },
          "The data's offset in its file (0 when unknown).")
      .def_property_readonly(
          "address", [](const TensorBuffer& b) { return reinterpret_cast<std::uintptr_t>(b.tensor.data.data()); })
      .def_property_readonly("metadata_json", [](const TensorBuffer& b) { return b.tensor.info.metadata_json; })
      .def_property_readonly("info", [](const TensorBuffer& b) { return InfoToDict(b.tensor.info); })
      .def(
          "numpy", [](py::object self, bool packed) { return ToNdarray(self, packed); }, py::arg("packed") = false,
          "A read-only ndarray viewing these bytes (see tensorsafe.Reader); a tensorsafe.SparseCoo for a sparse "
          "COO tensor.")
      .def_property_readonly(
          "layout", [](const TensorBuffer& b) { return b.tensor.info.layout == Layout::kCoo ? "coo" : "dense"; })
      .def_property_readonly(
          "nnz", [](const TensorBuffer& b) { return b.tensor.info.nnz; },
          "Stored elements of a sparse COO tensor (0 for dense).")
      .def_property_readonly("coalesced", [](const TensorBuffer& b) { return b.tensor.info.coalesced; })
      .def("coo", &CooArrays, py::arg("packed") = false,
           "(indices int64 [nnz, rank], values [nnz], values' file offset) of a sparse COO tensor, read-only views, "
           "after checking every index (CorruptionError).")
      .def(
          "__dlpack__",
          [](const TensorBuffer& b, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
            return ToDLPack(b, max_version, dl_device, copy);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const TensorBuffer&) { return py::make_tuple(1, 0); })
      .def("__repr__", [](const TensorBuffer& b) {
        return "<tensorsafe.TensorBuffer " + b.tensor.info.name + " " + std::string(DTypeName(b.tensor.info.dtype)) +
               " " + ShapeToString(b.tensor.info.shape) + ">";
      });
  m.def(
      "_set_numpy_dtypes",
      [](py::list table) {
        if (!g_numpy_dtypes) g_numpy_dtypes = new py::list();
        *g_numpy_dtypes = table;
      },
      "Sets the DType-code -> numpy.dtype table (called once by tensorsafe._arrays).");
}

}  // namespace tensorsafe::python
