// SampleConverter and SampleIter (sample_iter.h).
#include "sample_iter.h"

#include <pybind11/numpy.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "buffer.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;

// The base object of arrays viewing a shard.
struct ShardRef {
  std::shared_ptr<const ds::ShardSource> shard;
};

// The ndarray subtype of tensor fields (tensorsafe.dataset.SampleArray, so
// that torch's default_collate can stack them without its non-writable-array
// warning); nullptr: plain ndarray. Owned (a strong reference).
PyTypeObject* g_array_type = nullptr;

}  // namespace

void SetStatusError(const Status& s) {
  try {
    py::object factory = py::module_::import("tensorsafe.errors").attr("_from_status");
    py::object exc = factory(static_cast<int>(s.code()), py::str(s.message()), s.error_number());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

// ---- conversion of one sample to a dict ------------------------------------

SampleConverter::SampleConverter(const ds::Schema& schema, std::size_t max_refs)
    : max_refs_(std::max<std::size_t>(max_refs, 1)) {
  py::gil_scoped_acquire gil;
  fields_.resize(schema.fields.size());
  for (std::size_t k = 0; k < schema.fields.size(); ++k) {
    const ds::FieldSpec& f = schema.fields[k];
    FieldConv& c = fields_[k];
    c.kind = f.kind;
    c.name = PyUnicode_FromStringAndSize(f.name.data(), static_cast<Py_ssize_t>(f.name.size()));
    if (!c.name) throw py::error_already_set();
    PyUnicode_InternInPlace(&c.name);
    if (f.kind == ds::FieldKind::kTensor) {
      py::object dt = NumpyDtypeFor(f.dtype);
      if (dt.is_none()) {
        dt = py::dtype("uint8");
        c.packed = true;
      }
      c.itemsize = static_cast<int>(py::reinterpret_borrow<py::dtype>(dt).itemsize());
      c.descr = dt.release().ptr();
    }
  }
  json_loads_ = py::object(py::module_::import("json").attr("loads")).release().ptr();
}

SampleConverter::~SampleConverter() {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  for (FieldConv& c : fields_) {
    Py_XDECREF(c.name);
    Py_XDECREF(c.descr);
  }
  Py_XDECREF(json_loads_);
  for (auto& [k, v] : refs_) Py_DECREF(v);
}

PyObject* SampleConverter::ToDict(const ds::Sample& s) {
  PyObject* owner = nullptr;  // borrowed from refs_
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  const std::size_t n = std::min(s.fields.size(), fields_.size());
  for (std::size_t k = 0; k < n; ++k) {
    const FieldConv& c = fields_[k];
    const ds::FieldView& v = s.fields[k];
    PyObject* value = nullptr;
    const char* p = reinterpret_cast<const char*>(v.bytes.data());
    const auto size = static_cast<Py_ssize_t>(v.bytes.size());
    switch (c.kind) {
      case ds::FieldKind::kTensor: {
        if (!owner) owner = Ref(s.owner);
        if (!owner) break;
        value = Array(c, v, owner);
        break;
      }
      case ds::FieldKind::kBytes: value = PyBytes_FromStringAndSize(p, size); break;
      case ds::FieldKind::kStr: value = PyUnicode_DecodeUTF8(p, size, "strict"); break;
      case ds::FieldKind::kInt: {
        Result<std::int64_t> x = ds::AsInt(v);
        if (!x.ok()) {
          SetStatusError(x.status());
          break;
        }
        value = PyLong_FromLongLong(*x);
        break;
      }
      case ds::FieldKind::kFloat: {
        Result<double> x = ds::AsFloat(v);
        if (!x.ok()) {
          SetStatusError(x.status());
          break;
        }
        value = PyFloat_FromDouble(*x);
        break;
      }
      case ds::FieldKind::kJson: {
        PyObject* text = PyUnicode_DecodeUTF8(p, size, "strict");
        if (text) {
          value = PyObject_CallOneArg(json_loads_, text);
          Py_DECREF(text);
        }
        break;
      }
    }
    if (!value || PyDict_SetItem(d, c.name, value) < 0) {
      Py_XDECREF(value);
      Py_DECREF(d);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return d;
}

// The ShardRef of `shard` (borrowed; cached so that consecutive samples of
// one shard share it). The cache holds at most max_refs_ shards alive.
PyObject* SampleConverter::Ref(const std::shared_ptr<const ds::ShardSource>& shard) {
  const void* key = shard.get();
  if (key == last_key_) return last_ref_;
  auto it = refs_.find(key);
  if (it == refs_.end()) {
    if (refs_.size() >= max_refs_) {
      for (auto& [k, v] : refs_) Py_DECREF(v);
      refs_.clear();
    }
    PyObject* ref;
    try {
      ref = py::cast(ShardRef{shard}).release().ptr();
    } catch (py::error_already_set& e) {
      e.restore();
      return nullptr;
    }
    it = refs_.emplace(key, ref).first;
  }
  last_key_ = key;
  last_ref_ = it->second;
  return last_ref_;
}

PyObject* SampleConverter::Array(const FieldConv& c, const ds::FieldView& v, PyObject* owner) {
  auto& api = py::detail::npy_api::get();
  Py_ssize_t dims[64];
  int nd;
  if (c.packed) {
    nd = 1;
    dims[0] = static_cast<Py_ssize_t>(v.bytes.size());
  } else {
    nd = static_cast<int>(std::min<std::size_t>(v.shape.size(), 64));
    std::uint64_t udims[64];
    for (int i = 0; i < nd; ++i) {
      dims[i] = static_cast<Py_ssize_t>(v.shape[i]);
      udims[i] = static_cast<std::uint64_t>(v.shape[i]);
    }
    // A zero dim lets the others multiply past what NumPy can size.
    if (Status s = CheckPythonShape(v.spec->name, v.spec->dtype, {udims, static_cast<std::size_t>(nd)}); !s.ok()) {
      SetStatusError(s);
      return nullptr;
    }
  }
  // Empty tensors still need a non-null address (NumPy would allocate).
  static const std::byte kEmpty[16] = {};
  void* data = const_cast<std::byte*>(v.bytes.empty() ? kEmpty : v.bytes.data());
  Py_INCREF(c.descr);  // stolen by NewFromDescr
  // flags 0: read-only (the mapping is PROT_READ); NumPy computes the
  // contiguity and alignment flags itself.
  PyObject* arr = api.PyArray_NewFromDescr_(g_array_type ? g_array_type : api.PyArray_Type_, c.descr, nd, dims, nullptr,
                                            data, 0, nullptr);
  if (!arr) return nullptr;
  Py_INCREF(owner);
  if (api.PyArray_SetBaseObject_(arr, owner) < 0) {  // steals owner
    Py_DECREF(arr);
    return nullptr;
  }
  return arr;
}

namespace {

// ---- SampleIter: a CPython iterator type -----------------------------------

// Samples read per GIL release: enough to amortise the release, few enough
// that the first sample comes quickly.
constexpr std::size_t kBatch = 64;

struct IterState {
  std::shared_ptr<ds::Dataset> dataset;
  std::optional<ds::SampleIterator> it;
  std::unique_ptr<SampleConverter> conv;
  std::vector<ds::Sample> batch = std::vector<ds::Sample>(kBatch);
  std::size_t pos = 0, len = 0;
  bool exhausted = false;  // the C++ iterator returned false
  bool busy = false;       // a thread is reading a batch (with the GIL released)
  Status error;            // its status then
  std::uint64_t yielded = 0;
  std::uint64_t total = 0;
};

// Values copied into Python objects (bytes, str, JSON) are read here once
// anyway: for large ones, one madvise(MADV_POPULATE_READ) maps their pages
// (already in the page cache) in one call instead of a page fault per
// 4 KiB during the copy with the GIL held. Best effort: errors ignored.
constexpr std::size_t kPrefaultBytes = std::size_t{64} << 10;

void Prefault(const ds::Sample& s) {
#ifdef MADV_POPULATE_READ
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const ds::FieldView& v : s.fields) {
    if (v.bytes.size() < kPrefaultBytes || !v.spec || v.spec->kind == ds::FieldKind::kTensor) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(v.bytes.data()) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(v.bytes.data()) + v.bytes.size();
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
  }
#else
  (void)s;
#endif
}

struct SampleIterObject {
  PyObject_HEAD IterState* st;
};

PyTypeObject* g_iter_type = nullptr;

void IterDealloc(PyObject* self) {
  auto* o = reinterpret_cast<SampleIterObject*>(self);
  IterState* st = o->st;
  o->st = nullptr;
  if (st != nullptr) {
    // As ReleaseDataset; the converter takes the GIL back for its objects.
    Py_BEGIN_ALLOW_THREADS delete st;
    Py_END_ALLOW_THREADS
  }
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

}  // namespace

void ReleaseDataset(std::shared_ptr<ds::Dataset>& d) {
  if (d == nullptr) return;
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    d.reset();
    return;
  }
  py::gil_scoped_release release;
  d.reset();
}

namespace {

PyObject* IterNext(PyObject* self) {
  IterState* st = reinterpret_cast<SampleIterObject*>(self)->st;
  if (!st) return nullptr;
  if (st->pos == st->len) {
    if (st->exhausted) {
      if (!st->error.ok()) {
        Status e = std::move(st->error);
        st->error = Status();
        SetStatusError(e);
      }
      return nullptr;  // StopIteration (no error set)
    }
    if (st->busy) {
      // Another thread is inside this iterator with the GIL released: as a
      // generator would, refuse rather than race on the batch.
      PyErr_SetString(PyExc_ValueError, "SampleIter already executing in another thread");
      return nullptr;
    }
    st->busy = true;
    std::size_t n = 0;
    Py_BEGIN_ALLOW_THREADS while (n < kBatch && st->it->Next(st->batch[n])) {
      Prefault(st->batch[n]);
      ++n;
    }
    if (n < kBatch) {
      st->exhausted = true;
      st->error = st->it->status();
    }
    Py_END_ALLOW_THREADS st->busy = false;
    st->pos = 0;
    st->len = n;
    if (n == 0) return IterNext(self);
  }
  PyObject* d = st->conv->ToDict(st->batch[st->pos++]);
  if (d) ++st->yielded;
  return d;
}

PyObject* IterLengthHint(PyObject* self, PyObject*) {
  IterState* st = reinterpret_cast<SampleIterObject*>(self)->st;
  return PyLong_FromUnsignedLongLong(st ? st->total - std::min(st->total, st->yielded) : 0);
}

PyObject* IterYielded(PyObject* self, void*) {
  IterState* st = reinterpret_cast<SampleIterObject*>(self)->st;
  return PyLong_FromUnsignedLongLong(st ? st->yielded : 0);
}

PyMethodDef g_iter_methods[] = {
    {"__length_hint__", IterLengthHint, METH_NOARGS, "samples left"},
    {nullptr, nullptr, 0, nullptr},
};
PyGetSetDef g_iter_getset[] = {
    {"yielded", IterYielded, nullptr, "samples returned so far", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot g_iter_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(IterDealloc)},
    {Py_tp_iter, reinterpret_cast<void*>(PyObject_SelfIter)},
    {Py_tp_iternext, reinterpret_cast<void*>(IterNext)},
    {Py_tp_methods, g_iter_methods},
    {Py_tp_getset, g_iter_getset},
    {Py_tp_doc, const_cast<char*>("Iterator over dataset samples as dicts (tensorsafe.dataset).")},
    {0, nullptr},
};
PyType_Spec g_iter_spec = {"tensorsafe._native.SampleIter", sizeof(SampleIterObject), 0, Py_TPFLAGS_DEFAULT,
                           g_iter_slots};

}  // namespace

py::object MakeSampleIter(std::shared_ptr<ds::Dataset> dataset, ds::SampleIterator it, std::uint64_t total,
                          std::size_t max_open_shards) {
  auto st = std::make_unique<IterState>();
  st->conv = std::make_unique<SampleConverter>(dataset->schema(), max_open_shards);
  st->dataset = std::move(dataset);
  st->it.emplace(std::move(it));
  st->total = total;
  PyObject* o = PyType_GenericAlloc(g_iter_type, 0);
  if (!o) throw py::error_already_set();
  reinterpret_cast<SampleIterObject*>(o)->st = st.release();
  return py::reinterpret_steal<py::object>(o);
}

void RegisterSampleIter(py::module_& m) {
  g_iter_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_iter_spec));
  if (!g_iter_type) throw py::error_already_set();
  m.add_object("SampleIter", reinterpret_cast<PyObject*>(g_iter_type));

  py::class_<ShardRef>(m, "ShardRef",
                       "Keeps one open dataset shard (and its mapping) alive; the base of sample arrays.");

  m.def(
      "_set_sample_array_type",
      [](py::object type) {
        auto& api = py::detail::npy_api::get();
        if (!type.is_none() && (!PyType_Check(type.ptr()) ||
                                !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type.ptr()), api.PyArray_Type_))) {
          Throw(InvalidArgument("the sample array type must be an ndarray subclass"));
        }
        Py_XDECREF(reinterpret_cast<PyObject*>(g_array_type));
        g_array_type = type.is_none() ? nullptr : reinterpret_cast<PyTypeObject*>(type.inc_ref().ptr());
      },
      py::arg("type"), "The ndarray subclass of tensor fields (None: ndarray); tensorsafe.dataset sets it.");
}

}  // namespace tensorsafe::python
