// tensorsafe._native.Reader: the .tsafe Reader (include/tensorsafe/reader.h).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "tensorsafe/checksum.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/reader.h"

namespace tensorsafe::python {
namespace {

using ReaderPtr = std::shared_ptr<Reader>;

ReaderPtr OpenReader(const std::string& path, const std::string& mode, unsigned read_threads) {
  ReaderOptions options;
  options.read_threads = read_threads;
  if (mode == "mmap") {
    options.access = ReaderOptions::Access::kMmap;
  } else if (mode == "pread") {
    options.access = ReaderOptions::Access::kPread;
  } else {
    Throw(InvalidArgument("mode must be \"mmap\" or \"pread\", not \"" + mode + "\""));
  }
  Result<ReaderPtr> r = [&] {
    py::gil_scoped_release nogil;
    return ExplainFormatMismatch(path, Format::kTsafe, Reader::Open(path, options));
  }();
  return Unwrap(std::move(r));
}

py::object Get(const Reader& r, const std::string& name) {
  Result<Tensor> t = [&] {
    py::gil_scoped_release nogil;
    return r.Get(name);
  }();
  return MakeBuffer(Unwrap(std::move(t)));
}

// Every tensor (or those of `names`) as name -> ndarray (or TensorBuffer),
// in file order or, with `by_offset`, in data order (ties keep file order);
// one GIL release for all the lookups. With `cow` (a writable buffer holding
// the whole file, e.g. a private copy-on-write mapping), each dense tensor
// NumPy can hold becomes a writable ndarray viewing `cow` at its file offset
// (base `cow`); the others stay TensorBuffers.
py::dict GetMany(const Reader& r, std::optional<std::vector<std::string>> names, bool as_numpy, bool packed,
                 bool by_offset, py::object cow) {
  std::vector<Tensor> tensors;
  Status status;
  {
    py::gil_scoped_release nogil;
    if (!names) {
      tensors.reserve(r.size());
      status = r.ForEachTensor([&](Tensor&& t) {
        tensors.push_back(std::move(t));
        return true;
      });
    } else {
      for (const std::string& n : *names) {
        Result<Tensor> t = r.Get(n);
        if (!t.ok()) {
          status = t.status();
          break;
        }
        tensors.push_back(std::move(t).value());
      }
    }
    if (status.ok() && by_offset) {
      std::stable_sort(tensors.begin(), tensors.end(),
                       [](const Tensor& a, const Tensor& b) { return a.info.data_offset < b.info.data_offset; });
    }
  }
  Check(status);
  std::optional<py::buffer_info> cow_info;
  if (!cow.is_none()) {
    cow_info.emplace(py::reinterpret_borrow<py::buffer>(cow).request(/*writable=*/true));
  }
  GcPause pause;
  py::dict out;
  for (Tensor& t : tensors) {
    py::str key(t.info.name);
    Check(CheckPythonShape(t.info.name, t.info.dtype, t.info.shape, t.info.layout));
    if (cow_info && t.info.layout == Layout::kDense && t.info.data_length != 0) {
      py::object dt = NumpyDtypeFor(t.info.dtype);
      const auto size = static_cast<std::uint64_t>(cow_info->size * cow_info->itemsize);
      if (!dt.is_none() && t.info.data_offset <= size && t.info.data_length <= size - t.info.data_offset) {
        std::vector<py::ssize_t> shape(t.info.shape.begin(), t.info.shape.end());
        out[key] = py::array(py::reinterpret_borrow<py::dtype>(dt), std::move(shape),
                             static_cast<std::byte*>(cow_info->ptr) + t.info.data_offset, cow);
        continue;
      }
    }
    py::object buf = MakeBuffer(std::move(t));
    out[key] = as_numpy && !cow_info ? ToNdarray(buf, packed) : buf;
  }
  return out;
}

void ReadSlice(const Reader& r, const std::string& name, const std::vector<std::uint64_t>& start,
               const std::vector<std::uint64_t>& stop, const std::vector<std::uint64_t>& step, py::buffer out) {
  if (start.size() != stop.size() || start.size() != step.size()) {
    Throw(InvalidArgument("start, stop and step must have one value per dimension"));
  }
  std::vector<SliceDim> dims(start.size());
  for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = SliceDim{start[i], stop[i], step[i]};
  py::buffer_info info = out.request(/*writable=*/true);
  std::span<std::byte> bytes(static_cast<std::byte*>(info.ptr), static_cast<std::size_t>(info.size * info.itemsize));
  Status s;
  {
    py::gil_scoped_release nogil;
    s = r.ReadSlice(name, dims, bytes);
  }
  Check(s);
}

py::dict Summary(const Reader& r) {
  FileSummary s = r.summary();
  py::dict d;
  d["format"] = "tsafe";
  d["version"] = py::make_tuple(s.version_major, s.version_minor);
  d["alignment"] = s.alignment;
  d["file_size"] = s.file_size;
  d["tensor_count"] = s.tensor_count;
  d["index_offset"] = s.index_offset;
  d["index_length"] = s.index_length;
  d["sequence"] = s.sequence;
  d["live_slot"] = s.live_slot;
  d["via_trailer"] = s.via_trailer;
  d["data_bytes"] = s.data_bytes;
  d["unused_bytes"] = s.unused_bytes;
  return d;
}

}  // namespace

void RegisterReader(py::module_& m) {
  m.def(
      "data_checksum",
      [](py::buffer data) {
        py::buffer_info info = data.request();
        std::span<const std::byte> bytes(static_cast<const std::byte*>(info.ptr),
                                         static_cast<std::size_t>(info.size * info.itemsize));
        py::gil_scoped_release nogil;
        return DataChecksum(bytes);
      },
      py::arg("data"), "XXH3-64 of a buffer's bytes, as the .tsafe index stores a tensor's.");
  py::class_<Reader, ReaderPtr>(m, "Reader", "The native .tsafe reader; use tensorsafe.open().")
      .def_static("open", &OpenReader, py::arg("path"), py::arg("mode") = "mmap", py::arg("read_threads") = 0)
      .def_property_readonly("path", &Reader::path)
      .def("__len__", &Reader::size)
      .def("summary", &Summary)
      .def("metadata",
           [](const Reader& r) {
             Result<std::string> j = [&] {
               py::gil_scoped_release nogil;
               return r.Metadata();
             }();
             return Unwrap(std::move(j));
           })
      .def("find",
           [](const Reader& r, const std::string& name) {
             Result<TensorInfo> i = [&] {
               py::gil_scoped_release nogil;
               return r.Find(name);
             }();
             return InfoToDict(Unwrap(std::move(i)));
           })
      .def("contains", &Reader::Contains)
      .def("get", &Get, py::arg("name"))
      .def("get_many", &GetMany, py::arg("names") = py::none(), py::arg("numpy") = true, py::arg("packed") = false,
           py::arg("by_offset") = false, py::arg("cow") = py::none())
      .def("read_slice", &ReadSlice, py::arg("name"), py::arg("start"), py::arg("stop"), py::arg("step"),
           py::arg("out"))
      .def(
          "read_into",
          [](const Reader& r, const std::string& name, py::buffer out, bool verify) {
            py::buffer_info info = out.request(/*writable=*/true);
            std::span<std::byte> bytes(static_cast<std::byte*>(info.ptr),
                                       static_cast<std::size_t>(info.size * info.itemsize));
            Status s;
            {
              py::gil_scoped_release nogil;
              s = r.ReadInto(name, bytes, verify);
            }
            Check(s);
          },
          py::arg("name"), py::arg("out"), py::arg("verify") = false)
      .def("names",
           [](const Reader& r) {
             Result<std::vector<std::string>> n = [&] {
               py::gil_scoped_release nogil;
               return r.Names();
             }();
             return Unwrap(std::move(n));
           })
      .def("infos",
           [](const Reader& r) {
             std::vector<TensorInfo> infos;
             Status s;
             {
               py::gil_scoped_release nogil;
               s = r.ForEach([&](const TensorInfo& i) {
                 infos.push_back(i);
                 return true;
               });
             }
             Check(s);
             GcPause pause;
             py::list out;
             for (const TensorInfo& i : infos) out.append(InfoToDict(i));
             return out;
           })
      .def("verify", [](const Reader& r) {
        std::vector<std::string> damaged;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = r.Verify(&damaged);
        }
        if (!s.ok() && !damaged.empty()) {
          std::string list;
          for (const std::string& n : damaged) list += (list.empty() ? "" : ", ") + ("\"" + n + "\"");
          Throw(Status(s.code(), s.message() + " (damaged tensors: " + list + ")", s.error_number()));
        }
        Check(s);
      });
}

}  // namespace tensorsafe::python
