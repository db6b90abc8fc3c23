// tensorsafe._native.Writer / Updater / compact (writer.h, updater.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common.h"
#include "entries.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/updater.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::python {
namespace {

// Runs `fn` (returning a Status) without the GIL and raises on failure.
template <typename Fn>
void NoGil(Fn&& fn) {
  Status s;
  {
    py::gil_scoped_release nogil;
    s = fn();
  }
  Check(s);
}

std::unique_ptr<Writer> CreateWriter(const std::string& path, std::uint32_t alignment, bool sync) {
  WriterOptions options;
  options.alignment = alignment;
  options.sync = sync;
  Result<std::unique_ptr<Writer>> w = [&] {
    py::gil_scoped_release nogil;
    return Writer::Create(path, options);
  }();
  return Unwrap(std::move(w));
}

void WriterAddMany(Writer& w, const py::iterable& items) {
  std::vector<Entry> entries = ParseEntries(items);
  NoGil([&] {
    for (const Entry& e : entries) {
      Status s = AddEntry(w, e);
      if (!s.ok()) return s;
    }
    return Status::OK();
  });
}

std::unique_ptr<Updater> OpenUpdater(const std::string& path, double lock_timeout, bool sync) {
  UpdaterOptions options;
  options.lock_timeout = std::chrono::milliseconds(static_cast<long long>(lock_timeout * 1000));
  options.sync = sync;
  Result<std::unique_ptr<Updater>> u = [&] {
    py::gil_scoped_release nogil;
    return ExplainFormatMismatch(path, Format::kTsafe, Updater::Open(path, options));
  }();
  return Unwrap(std::move(u));
}

// updater.h has no AddCoo yet; a COO tuple must not be written as dense.
void RefuseSparseUpdate(const Entry& e) {
  if (e.coo) {
    Throw(Unsupported("tensor \"" + e.name +
                      "\": the updater cannot add sparse COO tensors; write them with "
                      "tensorsafe.Writer"));
  }
}

}  // namespace

void RegisterWriter(py::module_& m) {
  py::class_<Writer>(m, "Writer", "The native .tsafe writer; use tensorsafe.Writer.")
      .def_static("create", &CreateWriter, py::arg("path"), py::arg("alignment") = 64, py::arg("sync") = true)
      .def("add",
           [](Writer& w, const py::tuple& entry) {
             Entry e = ParseEntry(entry);
             NoGil([&] { return AddEntry(w, e); });
           })
      .def("add_many", &WriterAddMany)
      .def(
          "begin_tensor",
          [](Writer& w, const std::string& name, const std::string& dtype, const py::sequence& shape,
             const std::string& metadata_json) {
            DType d = ParseDTypeOrThrow(dtype);
            Shape s = ToShape(shape);
            Check(w.BeginTensor(name, d, s, metadata_json));
          },
          py::arg("name"), py::arg("dtype"), py::arg("shape"), py::arg("metadata_json") = "")
      .def("append",
           [](Writer& w, py::buffer data) {
             py::buffer_info b = data.request();
             std::span<const std::byte> bytes(static_cast<const std::byte*>(b.ptr),
                                              static_cast<std::size_t>(b.size * b.itemsize));
             NoGil([&] { return w.Append(bytes); });
           })
      .def("end_tensor", [](Writer& w) { Check(w.EndTensor()); })
      .def("set_metadata", [](Writer& w, const std::string& json) { Check(w.SetMetadata(json)); })
      .def("finish", [](Writer& w) { NoGil([&] { return w.Finish(); }); })
      .def("abandon",
           [](Writer& w) {
             py::gil_scoped_release nogil;
             w.Abandon();
           })
      .def_property_readonly("tensor_count", &Writer::tensor_count)
      .def_property_readonly("bytes_written", &Writer::bytes_written);

  py::class_<Updater>(m, "Updater", "The native .tsafe updater; use tensorsafe.Updater.")
      .def_static("open", &OpenUpdater, py::arg("path"), py::arg("lock_timeout") = 0.0, py::arg("sync") = true)
      .def("add",
           [](Updater& u, const py::tuple& entry) {
             Entry e = ParseEntry(entry);
             RefuseSparseUpdate(e);
             NoGil([&] { return u.Add(e.name, e.view(), e.metadata_json); });
           })
      .def(
          "replace",
          [](Updater& u, const py::tuple& entry, bool keep_metadata) {
            Entry e = ParseEntry(entry);
            RefuseSparseUpdate(e);
            std::optional<std::string_view> meta;
            if (!keep_metadata) meta = e.metadata_json;
            NoGil([&] { return u.Replace(e.name, e.view(), meta); });
          },
          py::arg("entry"), py::arg("keep_metadata"))
      .def("remove", [](Updater& u, const std::string& name) { Check(u.Remove(name)); })
      .def("rename", [](Updater& u, const std::string& from, const std::string& to) { Check(u.Rename(from, to)); })
      .def("set_tensor_metadata",
           [](Updater& u, const std::string& name, const std::string& json) { Check(u.SetTensorMetadata(name, json)); })
      .def("merge_tensor_metadata", [](Updater& u, const std::string& name,
                                       const std::string& json) { Check(u.MergeTensorMetadata(name, json)); })
      .def("set_metadata", [](Updater& u, const std::string& json) { Check(u.SetMetadata(json)); })
      .def("merge_metadata", [](Updater& u, const std::string& json) { Check(u.MergeMetadata(json)); })
      .def("contains", &Updater::Contains)
      .def("find", [](const Updater& u, const std::string& name) { return InfoToDict(Unwrap(u.Find(name))); })
      .def("metadata", [](const Updater& u) { return Unwrap(u.Metadata()); })
      .def("commit", [](Updater& u) { NoGil([&] { return u.Commit(); }); })
      .def("abort",
           [](Updater& u) {
             py::gil_scoped_release nogil;
             u.Abort();
           })
      .def_property_readonly("sequence", &Updater::sequence)
      .def_property_readonly("has_changes", &Updater::has_changes);

  m.def(
      "compact",
      [](const std::string& path, bool sync) {
        UpdaterOptions options;
        options.sync = sync;
        Result<CompactResult> r = [&] {
          py::gil_scoped_release nogil;
          return ExplainFormatMismatch(path, Format::kTsafe, Compact(path, options));
        }();
        CompactResult c = Unwrap(std::move(r));
        return py::make_tuple(c.bytes_before, c.bytes_after);
      },
      py::arg("path"), py::arg("sync") = true);
}

}  // namespace tensorsafe::python
