// Shared helpers of the native module tensorsafe._native: how a failed
// Status becomes a Python exception, and how TensorInfo becomes a dict.
//
// The bindings are thin (STYLE.md, Python): they convert arguments, call the
// public C++ API with the GIL released, and convert results. Which Python
// class a StatusCode becomes is decided once, in tensorsafe/errors.py.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::python {

namespace py = pybind11;

// Thrown by the bindings for a non-OK Status (possibly without the GIL);
// the translator registered by RegisterErrors turns it into the exception
// that tensorsafe.errors._from_status() picks for the code.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

inline void Check(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(Result<T>&& result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Pauses Python's cyclic GC while a binding makes an object or a container
// per tensor: every 700 new containers start a collection (see
// tensorsafe._arrays.no_gc), and one of them may be a full collection the
// program has owed since torch's import (70 ms here). LoadPlan.items() of
// 20,000 tensors took 89-94 ms with the collector on, 6 ms paused; the
// owed collection then falls on the program's next burst of new objects,
// as it would have anyway. The previous state is restored.
#if PY_VERSION_HEX >= 0x030A0000
struct GcPause {
  GcPause() = default;
  GcPause(const GcPause&) = delete;  // a copy would enable it twice
  GcPause& operator=(const GcPause&) = delete;
  ~GcPause() {
    if (was) PyGC_Enable();
  }
  int was = PyGC_Disable();
};
#else  // Python 3.9: through the gc module
struct GcPause {
  GcPause(const GcPause&) = delete;
  GcPause& operator=(const GcPause&) = delete;
  py::module_ gc = py::module_::import("gc");
  bool was = gc.attr("isenabled")().cast<bool>();
  GcPause() {
    if (was) gc.attr("disable")();
  }
  ~GcPause() {
    if (was) gc.attr("enable")();
  }
};
#endif

// Raises tensorsafe's exception for `status` (which must not be OK).
[[noreturn]] void Throw(const Status& status);

// {"name", "dtype", "shape", "offset", "nbytes", "checksum", "metadata"}:
// metadata is the per-tensor JSON text ("" when none).
py::dict InfoToDict(const TensorInfo& info);

// Module registration, one function per concept file.
void RegisterErrors(py::module_& m);
void RegisterBuffer(py::module_& m);
void RegisterReader(py::module_& m);
void RegisterWriter(py::module_& m);
void RegisterCodecs(py::module_& m);
void RegisterStream(py::module_& m);

}  // namespace tensorsafe::python
