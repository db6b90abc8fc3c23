// StatusError -> Python exception. The class is chosen in Python, in
// tensorsafe/errors.py (_from_status), so the mapping lives in one file.
#include <pybind11/pybind11.h>

#include <array>

#include "common.h"
#include "tensorsafe/dtype.h"

namespace tensorsafe::python {

[[noreturn]] void Throw(const Status& status) { throw StatusError(status); }

py::dict InfoToDict(const TensorInfo& info) {
  // Keys made once (and leaked: no release after the interpreter is gone).
  static const auto* keys =
      new std::array<py::str, 7>{py::str("name"),   py::str("dtype"),    py::str("shape"),   py::str("offset"),
                                 py::str("nbytes"), py::str("checksum"), py::str("metadata")};
  py::dict d;
  d[(*keys)[0]] = py::str(info.name);
  d[(*keys)[1]] = py::str(DTypeName(info.dtype).data(), DTypeName(info.dtype).size());
  py::tuple shape(info.shape.size());
  for (std::size_t i = 0; i < info.shape.size(); ++i) shape[i] = py::int_(info.shape[i]);
  d[(*keys)[2]] = shape;
  d[(*keys)[3]] = py::int_(info.data_offset);
  d[(*keys)[4]] = py::int_(info.data_length);
  d[(*keys)[5]] = py::int_(info.data_checksum);
  d[(*keys)[6]] = py::str(info.metadata_json);
  if (info.layout == Layout::kCoo) {  // only then: dense infos stay as small as before
    d["layout"] = "coo";
    d["nnz"] = py::int_(info.nnz);
    d["coalesced"] = py::bool_(info.coalesced);
  }
  return d;
}

void RegisterErrors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const Status& s = e.status();
      py::object factory = py::module_::import("tensorsafe.errors").attr("_from_status");
      // A message may quote bytes of a damaged file: never let decoding it
      // raise UnicodeDecodeError in place of the real error.
      const std::string& m = s.message();
      py::object msg = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(m.data(), static_cast<Py_ssize_t>(m.size()), "backslashreplace"));
      if (!msg) throw py::error_already_set();
      py::object exc = factory(static_cast<int>(s.code()), msg, s.error_number());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
  m.def(
      "status_code_names",
      [] {
        py::dict d;
        for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
          d[py::int_(c)] = py::str(std::string(StatusCodeName(static_cast<StatusCode>(c))));
        }
        return d;
      },
      "The C++ StatusCode values and their stable names (for tensorsafe.errors).");
}

}  // namespace tensorsafe::python
