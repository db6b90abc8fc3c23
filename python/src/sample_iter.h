// Dataset samples as Python dicts, and SampleIter, the fast iterator behind
// tensorsafe.dataset (docs/python-dataset.md, "The fast iterator").
//
// The iterator is where the time goes (one Python object per field per
// sample), so it avoids pybind11 in its hot loop: SampleIter is a plain
// CPython type whose tp_iternext reads a batch of samples with the GIL
// released (views into the mapped shards, no copies), then builds each dict
// with the CPython and NumPy C APIs from field names interned once. Tensor
// fields become read-only ndarrays (of tensorsafe.dataset.SampleArray once
// that module registered it) whose base is a ShardRef, which holds the shard
// (and so its mapping) alive; bytes, str, int, float and JSON fields are
// converted to Python values.
//
// Thread safety: a SampleConverter is used with the GIL held; a SampleIter
// refuses a second thread while one reads (as a generator would).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/sample.h"

namespace tensorsafe::python {

// Sets the Python error for a failed status (the class chosen by errors.py)
// without pybind11's exception machinery (for tp_iternext).
void SetStatusError(const Status& s);

class SampleConverter {
 public:
  // `max_refs`: the shards whose ShardRef is cached (the dataset's
  // max_open_shards: a cached ref keeps its shard open, and a remote shard
  // pinned in the cache).
  SampleConverter(const dataset::Schema& schema, std::size_t max_refs);  // GIL acquired inside
  ~SampleConverter();
  SampleConverter(const SampleConverter&) = delete;
  SampleConverter& operator=(const SampleConverter&) = delete;

  // A new dict for `s`, or nullptr with a Python error set. GIL held.
  PyObject* ToDict(const dataset::Sample& s);

 private:
  // What the iterator needs per schema field, made once.
  struct FieldConv {
    dataset::FieldKind kind = dataset::FieldKind::kBytes;
    PyObject* name = nullptr;   // interned str (owned)
    PyObject* descr = nullptr;  // kTensor: numpy dtype (owned); uint8 for packed dtypes
    bool packed = false;        // kTensor of a sub-byte dtype: raw bytes as uint8
    int itemsize = 1;
  };
  PyObject* Ref(const std::shared_ptr<const dataset::ShardSource>& shard);
  PyObject* Array(const FieldConv& c, const dataset::FieldView& v, PyObject* owner);

  std::size_t max_refs_ = 1;
  std::vector<FieldConv> fields_;
  PyObject* json_loads_ = nullptr;
  std::unordered_map<const void*, PyObject*> refs_;
  const void* last_key_ = nullptr;
  PyObject* last_ref_ = nullptr;
};

// Drops a dataset reference with the GIL released when this thread holds it:
// the last reference stops the shard cache's download threads, and one may
// be waiting for the GIL inside a Python URL handler (fsspec).
void ReleaseDataset(std::shared_ptr<dataset::Dataset>& d);

// A SampleIter over `it`; `total` is what it will yield (__length_hint__).
py::object MakeSampleIter(std::shared_ptr<dataset::Dataset> dataset, dataset::SampleIterator it, std::uint64_t total,
                          std::size_t max_open_shards);

// SampleIter, ShardRef and _set_sample_array_type.
void RegisterSampleIter(py::module_& m);

}  // namespace tensorsafe::python
