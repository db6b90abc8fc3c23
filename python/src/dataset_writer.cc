// tensorsafe._native.DatasetWriter: the dataset writer behind
// tensorsafe.dataset.Writer (docs/python-dataset.md). Values are converted
// with the GIL held; the C++ writer copies them with it released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "entries.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/writer.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;

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
      if (PyBytes_CheckExact(value))
        kind = ds::FieldKind::kBytes;
      else if (PyUnicode_CheckExact(value))
        kind = ds::FieldKind::kStr;
      else if (PyFloat_CheckExact(value))
        kind = ds::FieldKind::kFloat;
      else if (PyLong_CheckExact(value))
        kind = ds::FieldKind::kInt;
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

void RegisterDatasetWriter(py::module_& m) {
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
}

}  // namespace tensorsafe::python
