// tensorsafe._native datasets: the dataset writer, Dataset (open, read one
// sample, verify), merge, and SampleIter, the fast iterator behind
// tensorsafe.dataset (docs/python-dataset.md).
//
// The iterator is where the time goes (one Python object per field per
// sample), so it avoids pybind11 in its hot loop: SampleIter is a plain
// CPython type whose tp_iternext reads a batch of samples with the GIL
// released (views into the mapped shards, no copies), then builds each dict
// with the CPython and NumPy C APIs from field names interned once. Tensor
// fields become read-only ndarrays whose base is a ShardRef, which holds the
// shard (and so its mapping) alive; bytes, str, int, float and JSON fields
// are converted to Python values.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/sampler.h"
#include "tensorsafe/dataset/writer.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;

// ---- errors without pybind11's exception machinery (for tp_iternext) ------

// Sets the Python error for a failed status (the class chosen by errors.py).
void SetStatusError(const Status& s) {
  try {
    py::object factory = py::module_::import("tensorsafe.errors").attr("_from_status");
    py::object exc = factory(static_cast<int>(s.code()), py::str(s.message()), s.error_number());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

// ---- ShardRef: the base object of arrays viewing a shard -------------------

struct ShardRef {
  std::shared_ptr<const ds::ShardSource> shard;
};

// ---- conversion of one sample to a dict ------------------------------------

// What the iterator needs per schema field, made once.
struct FieldConv {
  ds::FieldKind kind = ds::FieldKind::kBytes;
  PyObject* name = nullptr;   // interned str (owned)
  PyObject* descr = nullptr;  // kTensor: numpy dtype (owned); uint8 for packed dtypes
  bool packed = false;        // kTensor of a sub-byte dtype: raw bytes as uint8
  int itemsize = 1;
};

class SampleConverter {
 public:
  SampleConverter(const ds::Schema& schema) {
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
  ~SampleConverter() {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    for (FieldConv& c : fields_) {
      Py_XDECREF(c.name);
      Py_XDECREF(c.descr);
    }
    Py_XDECREF(json_loads_);
    for (auto& [k, v] : refs_) Py_DECREF(v);
  }
  SampleConverter(const SampleConverter&) = delete;
  SampleConverter& operator=(const SampleConverter&) = delete;

  // A new dict for `s`, or nullptr with a Python error set. GIL held.
  PyObject* ToDict(const ds::Sample& s) {
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

 private:
  // The ShardRef of `shard` (borrowed; cached so that consecutive samples of
  // one shard share it). The cache holds at most kMaxRefs shards alive.
  PyObject* Ref(const std::shared_ptr<const ds::ShardSource>& shard) {
    const void* key = shard.get();
    if (key == last_key_) return last_ref_;
    auto it = refs_.find(key);
    if (it == refs_.end()) {
      if (refs_.size() >= kMaxRefs) {
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

  PyObject* Array(const FieldConv& c, const ds::FieldView& v, PyObject* owner) {
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
    PyObject* arr = api.PyArray_NewFromDescr_(api.PyArray_Type_, c.descr, nd, dims, nullptr, data, 0, nullptr);
    if (!arr) return nullptr;
    Py_INCREF(owner);
    if (api.PyArray_SetBaseObject_(arr, owner) < 0) {  // steals owner
      Py_DECREF(arr);
      return nullptr;
    }
    return arr;
  }

  static constexpr std::size_t kMaxRefs = 64;
  std::vector<FieldConv> fields_;
  PyObject* json_loads_ = nullptr;
  std::unordered_map<const void*, PyObject*> refs_;
  const void* last_key_ = nullptr;
  PyObject* last_ref_ = nullptr;
};

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
  PyObject_HEAD
  IterState* st;
};

PyTypeObject* g_iter_type = nullptr;

void IterDealloc(PyObject* self) {
  auto* o = reinterpret_cast<SampleIterObject*>(self);
  delete o->st;
  o->st = nullptr;
  PyTypeObject* tp = Py_TYPE(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

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
    Py_BEGIN_ALLOW_THREADS
    while (n < kBatch && st->it->Next(st->batch[n])) {
      Prefault(st->batch[n]);
      ++n;
    }
    if (n < kBatch) {
      st->exhausted = true;
      st->error = st->it->status();
    }
    Py_END_ALLOW_THREADS
    st->busy = false;
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
PyType_Spec g_iter_spec = {"tensorsafe._native.SampleIter", sizeof(SampleIterObject), 0,
                           Py_TPFLAGS_DEFAULT, g_iter_slots};

py::object MakeIter(std::shared_ptr<ds::Dataset> dataset, ds::SampleIterator it, std::uint64_t total) {
  auto st = std::make_unique<IterState>();
  st->conv = std::make_unique<SampleConverter>(dataset->schema());
  st->dataset = std::move(dataset);
  st->it.emplace(std::move(it));
  st->total = total;
  PyObject* o = PyType_GenericAlloc(g_iter_type, 0);
  if (!o) throw py::error_already_set();
  reinterpret_cast<SampleIterObject*>(o)->st = st.release();
  return py::reinterpret_steal<py::object>(o);
}

// ---- helpers ---------------------------------------------------------------

// An open Dataset and the converter its map-style reads share (field names
// interned once; only used with the GIL held).
struct PyDataset {
  std::shared_ptr<ds::Dataset> d;
  std::unique_ptr<SampleConverter> conv;
};

std::vector<std::uint64_t> ToIds(py::handle ids, std::uint64_t n) {
  auto arr = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
  if (!arr) throw py::error_already_set();
  if (arr.ndim() != 1) Throw(InvalidArgument("sample ids must be a 1-D sequence"));
  std::vector<std::uint64_t> out(static_cast<std::size_t>(arr.size()));
  const std::int64_t* p = arr.data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (p[i] < 0 || static_cast<std::uint64_t>(p[i]) >= n) {
      Throw(OutOfRange("sample id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                       " is outside [0, " + std::to_string(n) + ")"));
    }
    out[i] = static_cast<std::uint64_t>(p[i]);
  }
  return out;
}

ds::World MakeWorld(const std::vector<std::int64_t>& w) {
  if (w.size() != 6) Throw(InvalidArgument("world must be (nodes, ranks_per_node, workers_per_rank, node, rank_of_node, worker_of_rank)"));
  ds::World world;
  world.num_nodes = w[0];
  world.ranks_per_node = w[1];
  world.workers_per_rank = w[2];
  world.node = w[3];
  world.rank_of_node = w[4];
  world.worker_of_rank = w[5];
  return world;
}

std::vector<std::int64_t> ShardCounts(const ds::Dataset& d) {
  std::vector<std::int64_t> out;
  out.reserve(d.shards().size());
  for (const ds::ShardInfo& s : d.shards()) out.push_back(static_cast<std::int64_t>(s.samples));
  return out;
}

std::vector<std::int64_t> EpochIds(const ds::Dataset& d, const std::string& state_json,
                                   const std::vector<std::int64_t>& world) {
  ds::World w = MakeWorld(world);
  std::vector<std::int64_t> counts = ShardCounts(d);
  py::gil_scoped_release release;
  ds::SamplerState state = Unwrap(ds::DecodeSamplerState(state_json));
  return Unwrap(ds::EpochWorkerIds(counts, state, w));
}

py::dict ShardToDict(const ds::ShardInfo& s) {
  py::dict d;
  d["name"] = s.name;
  d["samples"] = s.samples;
  d["bytes"] = s.bytes;
  d["xxh3"] = s.xxh3;
  if (s.zstd) {
    py::dict z;
    z["name"] = s.zstd->name;
    z["bytes"] = s.zstd->bytes;
    z["xxh3"] = s.zstd->xxh3;
    d["zstd"] = z;
  } else {
    d["zstd"] = py::none();
  }
  return d;
}

// ---- the writer ------------------------------------------------------------

// One sample's values and the Python objects that own their bytes until the
// C++ writer has copied them.
struct Pending {
  std::vector<ds::NamedValue> values;
  std::deque<std::string> names;
  std::deque<Entry> entries;
  std::deque<py::buffer_info> buffers;
  std::vector<py::object> keep;

  void Reserve(std::size_t n) {
    values.reserve(n);
    keep.reserve(n);
  }

  void AddTriple(py::handle item) {
    py::tuple t = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
    if (t.size() != 3) Throw(InvalidArgument("dataset writer: each field must be (name, kind, value)"));
    keep.push_back(t);
    const std::string& name = names.emplace_back(t[0].cast<std::string>());
    const std::string kind = t[1].cast<std::string>();
    ds::FieldValue v;
    if (kind == "tensor") {
      const Entry& e = entries.emplace_back(ParseEntry(t[2]));
      std::vector<std::int64_t> shape(e.shape.begin(), e.shape.end());
      v = ds::FieldValue::Tensor(e.dtype, std::move(shape), e.bytes());
    } else if (kind == "bytes") {
      const py::buffer_info& b = buffers.emplace_back(py::reinterpret_borrow<py::buffer>(t[2]).request());
      v = ds::FieldValue::Bytes({static_cast<const std::byte*>(b.ptr), static_cast<std::size_t>(b.size * b.itemsize)});
    } else if (kind == "str" || kind == "json") {
      Py_ssize_t len = 0;
      const char* p = PyUnicode_AsUTF8AndSize(t[2].ptr(), &len);
      if (!p) throw py::error_already_set();
      std::string_view text(p, static_cast<std::size_t>(len));
      v = kind == "str" ? ds::FieldValue::Str(text) : ds::FieldValue::Json(text);
    } else if (kind == "int") {
      v = ds::FieldValue::Int(t[2].cast<std::int64_t>());
    } else if (kind == "float") {
      v = ds::FieldValue::Float(t[2].cast<double>());
    } else {
      Throw(InvalidArgument("dataset writer: field \"" + name + "\": unknown kind \"" + kind + "\""));
    }
    values.push_back(ds::NamedValue{name, std::move(v)});
  }
};

class PyDatasetWriter {
 public:
  void Write(const Pending& p) {
    if (!w_) Throw(FailedPrecondition("dataset writer: already finished or abandoned"));
    Status s;
    {
      py::gil_scoped_release release;
      s = w_->Add(p.values);
    }
    Check(s);
  }

  PyDatasetWriter(const std::string& dir, const std::string& schema_json, std::uint64_t max_shard_bytes,
                  std::uint64_t max_shard_samples, const std::string& shard_prefix, std::uint64_t first_shard,
                  int zstd_level, const std::string& metadata_json, bool sync) {
    ds::DatasetWriterOptions o;
    if (!schema_json.empty()) {
      Result<ds::Schema> schema = ds::SchemaFromJson(schema_json, "the declared schema");
      // A caller's mistake, not damaged data: kInvalidArgument, same message.
      if (!schema.ok()) Throw(InvalidArgument(schema.status().message()));
      o.schema = std::move(schema).value();
    }
    o.max_shard_bytes = max_shard_bytes;
    o.max_shard_samples = max_shard_samples;
    o.shard_prefix = shard_prefix;
    o.first_shard = first_shard;
    o.zstd_level = zstd_level;
    o.metadata_json = metadata_json;
    o.sync = sync;
    py::gil_scoped_release release;
    w_ = Unwrap(ds::DatasetWriter::Create(dir, o));
  }

  // `fields`: a sequence of (name, kind, value) where value is, by kind:
  // "tensor": an entry (name, dtype, shape, data, metadata) as entries.h
  // takes; "bytes": a buffer; "str"/"json": str; "int": int; "float": float.
  void Add(const py::sequence& fields) {
    Pending p;
    const std::size_t n = py::len(fields);
    p.Reserve(n);
    for (std::size_t i = 0; i < n; ++i) p.AddTriple(fields[i]);
    Write(p);
  }

  // The fast path of Writer.add: a dict whose bytes / str / int / float
  // values (exact types, matching the schema's kind) are converted here;
  // any other value goes through `convert(name, value)`, which returns the
  // (name, kind, value) triple Add() takes.
  void AddDict(const py::dict& sample, const py::object& convert) {
    Pending p;
    p.Reserve(static_cast<std::size_t>(PyDict_Size(sample.ptr())));
    const ds::Schema* schema = w_ && !w_->schema().fields.empty() ? &w_->schema() : nullptr;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(sample.ptr(), &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) Throw(InvalidArgument("dataset writer: field names must be str"));
      Py_ssize_t klen = 0;
      const char* k = PyUnicode_AsUTF8AndSize(key, &klen);
      if (!k) throw py::error_already_set();
      std::string_view name(k, static_cast<std::size_t>(klen));
      std::optional<ds::FieldKind> kind;
      if (PyBytes_CheckExact(value)) kind = ds::FieldKind::kBytes;
      else if (PyUnicode_CheckExact(value)) kind = ds::FieldKind::kStr;
      else if (PyFloat_CheckExact(value)) kind = ds::FieldKind::kFloat;
      else if (PyLong_CheckExact(value)) kind = ds::FieldKind::kInt;
      if (kind && schema) {
        const ds::FieldSpec* f = schema->Find(name);
        if (f && f->kind != *kind) kind.reset();  // the schema asks for a conversion
      }
      ds::FieldValue v;
      switch (kind.value_or(ds::FieldKind::kTensor)) {
        case ds::FieldKind::kBytes:
          v = ds::FieldValue::Bytes({reinterpret_cast<const std::byte*>(PyBytes_AS_STRING(value)),
                                     static_cast<std::size_t>(PyBytes_GET_SIZE(value))});
          break;
        case ds::FieldKind::kStr: {
          Py_ssize_t len = 0;
          const char* t = PyUnicode_AsUTF8AndSize(value, &len);
          if (!t) throw py::error_already_set();
          v = ds::FieldValue::Str({t, static_cast<std::size_t>(len)});
          break;
        }
        case ds::FieldKind::kFloat: v = ds::FieldValue::Float(PyFloat_AS_DOUBLE(value)); break;
        case ds::FieldKind::kInt: {
          int overflow = 0;
          long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
          if (overflow == 0) {
            v = ds::FieldValue::Int(x);
            break;
          }
          kind.reset();  // beyond int64: the Python side stores it as JSON
          [[fallthrough]];
        }
        default: {
          py::object t = convert(py::handle(key), py::handle(value));
          p.AddTriple(t);
          continue;
        }
      }
      p.values.push_back(ds::NamedValue{name, std::move(v)});
    }
    Write(p);
  }

  py::dict Finish() {
    if (!w_) Throw(FailedPrecondition("dataset writer: already finished or abandoned"));
    std::optional<Result<ds::DatasetIndex>> r;
    {
      py::gil_scoped_release release;
      r.emplace(w_->Finish());
    }
    w_.reset();
    Check(r->status());
    py::dict d;
    d["samples"] = (*r)->samples;
    d["shards"] = (*r)->shards.size();
    d["schema"] = ds::SchemaToJson((*r)->schema);
    return d;
  }

  void Abandon() {
    if (!w_) return;
    py::gil_scoped_release release;
    w_->Abandon();
    w_.reset();
  }

  std::uint64_t samples() const { return w_ ? w_->samples_written() : 0; }
  std::uint64_t shards() const { return w_ ? w_->shards_written() : 0; }
  std::uint64_t bytes() const { return w_ ? w_->bytes_written() : 0; }
  std::string schema() const { return w_ ? ds::SchemaToJson(w_->schema()) : std::string(); }

 private:
  std::unique_ptr<ds::DatasetWriter> w_;
};

}  // namespace

void RegisterDataset(py::module_& m) {
  g_iter_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_iter_spec));
  if (!g_iter_type) throw py::error_already_set();
  m.add_object("SampleIter", reinterpret_cast<PyObject*>(g_iter_type));

  py::class_<ShardRef>(m, "ShardRef", "Keeps one open dataset shard (and its mapping) alive; the base of sample arrays.");

  py::class_<PyDatasetWriter>(m, "DatasetWriter")
      .def(py::init<const std::string&, const std::string&, std::uint64_t, std::uint64_t, const std::string&,
                    std::uint64_t, int, const std::string&, bool>(),
           py::arg("dir"), py::arg("schema_json") = "", py::arg("max_shard_bytes") = std::uint64_t{64} << 20,
           py::arg("max_shard_samples") = 0, py::arg("shard_prefix") = "shard", py::arg("first_shard") = 0,
           py::arg("zstd_level") = 0, py::arg("metadata_json") = "", py::arg("sync") = true)
      .def("add", &PyDatasetWriter::Add, py::arg("fields"))
      .def("add_dict", &PyDatasetWriter::AddDict, py::arg("sample"), py::arg("convert"))
      .def("finish", &PyDatasetWriter::Finish)
      .def("abandon", &PyDatasetWriter::Abandon)
      .def_property_readonly("samples_written", &PyDatasetWriter::samples)
      .def_property_readonly("shards_written", &PyDatasetWriter::shards)
      .def_property_readonly("bytes_written", &PyDatasetWriter::bytes)
      .def_property_readonly("schema_json", &PyDatasetWriter::schema);

  py::class_<PyDataset>(m, "Dataset")
      .def(py::init([](const std::string& dir, const std::string& cache_dir, std::size_t max_open_shards,
                       bool verify_on_open) {
             ds::DatasetOptions o;
             o.cache_dir = cache_dir;
             o.max_open_shards = max_open_shards;
             o.verify_on_open = verify_on_open;
             PyDataset p;
             {
               py::gil_scoped_release release;
               // Any location kind: DATASET.md "Locations".
               p.d = Unwrap(ds::OpenAny(dir, o));
             }
             p.conv = std::make_unique<SampleConverter>(p.d->schema());
             return p;
           }),
           py::arg("dir"), py::arg("cache_dir") = "", py::arg("max_open_shards") = 64,
           py::arg("verify_on_open") = false)
      .def("__len__", [](const PyDataset& p) { return p.d->num_samples(); })
      .def_property_readonly("location", [](const PyDataset& p) { return p.d->location(); })
      .def_property_readonly("schema_json", [](const PyDataset& p) { return ds::SchemaToJson(p.d->schema()); })
      .def_property_readonly("metadata_json", [](const PyDataset& p) { return p.d->metadata_json(); })
      .def_property_readonly("shard_samples", [](const PyDataset& p) { return ShardCounts(*p.d); })
      .def_property_readonly("shards", [](const PyDataset& p) {
        const ds::Dataset& d = *p.d;
        py::list l;
        for (const ds::ShardInfo& s : d.shards()) l.append(ShardToDict(s));
        return l;
      })
      .def("read", [](PyDataset& p, std::uint64_t i) {
             const std::shared_ptr<ds::Dataset>& d = p.d;
             ds::Sample s;
             Status st;
             {
               py::gil_scoped_release release;
               st = d->Read(i, s);
             }
             Check(st);
             PyObject* out = p.conv->ToDict(s);
             if (!out) throw py::error_already_set();
             return py::reinterpret_steal<py::object>(out);
           }, py::arg("index"), "Sample `index` as a dict (tensor fields are read-only views).")
      .def("iter_range", [](PyDataset& p, std::uint64_t begin, std::uint64_t end) {
             const std::shared_ptr<ds::Dataset>& d = p.d;
             end = std::min(end, d->num_samples());
             begin = std::min(begin, end);
             ds::SampleIterator it = d->IterateRange(begin, end);
             return MakeIter(d, std::move(it), end - begin);
           }, py::arg("begin"), py::arg("end"))
      .def("iter_ids", [](PyDataset& p, py::handle ids) {
             const std::shared_ptr<ds::Dataset>& d = p.d;
             std::vector<std::uint64_t> order = ToIds(ids, d->num_samples());
             const std::uint64_t total = order.size();
             ds::SampleIterator it = d->Iterate(std::move(order));
             return MakeIter(d, std::move(it), total);
           }, py::arg("ids"))
      .def("iter_epoch", [](PyDataset& p, const std::string& state_json,
                            const std::vector<std::int64_t>& world) {
             const std::shared_ptr<ds::Dataset>& d = p.d;
             std::vector<std::int64_t> ids = EpochIds(*d, state_json, world);
             std::vector<std::uint64_t> order(ids.begin(), ids.end());  // padding removed: all >= 0
             const std::uint64_t total = order.size();
             ds::SampleIterator it = d->Iterate(std::move(order));
             return MakeIter(d, std::move(it), total);
           }, py::arg("state_json"), py::arg("world"))
      .def("verify", [](const PyDataset& p) {
             const ds::Dataset& d = *p.d;
             std::vector<Status> problems;
             {
               py::gil_scoped_release release;
               (void)d.Verify(&problems);
             }
             py::list out;
             for (const Status& s : problems) {
               py::object factory = py::module_::import("tensorsafe.errors").attr("_from_status");
               out.append(factory(static_cast<int>(s.code()), py::str(s.message()), s.error_number()));
             }
             return out;
           }, "Every problem found, as exception objects (empty when the dataset is sound).");

  m.def("dataset_merge", [](const std::string& out_dir, const std::vector<std::string>& parts,
                            const std::string& metadata_json, bool overwrite, bool sync) {
          ds::MergeOptions o;
          o.metadata_json = metadata_json;
          o.overwrite = overwrite;
          o.sync = sync;
          std::optional<Result<ds::DatasetIndex>> r;
          {
            py::gil_scoped_release release;
            r.emplace(ds::Merge(out_dir, parts, o));
          }
          Check(r->status());
          py::dict d;
          d["samples"] = (*r)->samples;
          d["shards"] = (*r)->shards.size();
          return d;
        }, py::arg("out_dir"), py::arg("parts"), py::arg("metadata_json") = "", py::arg("overwrite") = false,
        py::arg("sync") = true);
}

}  // namespace tensorsafe::python
