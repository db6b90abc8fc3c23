// tensorsafe._native.LoadPlan: the loader (include/tensorsafe/load.h) for
// tensorsafe.load. plan_load() opens the indexes; LoadPlan.load() reads into
// one fresh arena, returned as a writable uint8 ndarray that keeps the arena
// alive, and on request one writable DLPack capsule per tensor (torch makes
// a tensor of each in about 2 us, against 13 us for slicing the arena in
// Python); LoadPlan.start() does the same on threads of its own and returns
// while the bytes arrive (StartedLoad); LoadPlan.load_into() fills caller
// buffers (writable buffer-protocol objects) in place. LoadPlan.match_into()
// finds the `into` entries read into in place (matching contiguous CPU
// tensors); the checks and errors of the rest live in Python
// (tensorsafe/_load_into.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "tensorsafe/load.h"

namespace tensorsafe::python {
namespace {

struct PlanHandle {
  LoadPlan plan;
};

LoadOptions Options(bool verify, bool direct, unsigned io_threads, std::uint64_t request_bytes, bool prefault,
                    std::optional<bool> huge_pages, unsigned verify_threads, bool cached_buffered) {
  LoadOptions o;
  o.verify = verify;
  o.direct = direct;
  o.cached_buffered = cached_buffered;
  o.io_threads = io_threads;
  o.request_bytes = request_bytes;
  o.prefault = prefault;
  o.huge_pages = huge_pages;
  o.verify_threads = verify_threads;
  return o;
}

// Whether `dest` is a contiguous CPU torch tensor (of `tensor_type`) with
// `want` as its dtype and exactly `shape`: what load(into=) reads into in
// place. Any error on the way (an odd subclass) means no: Python's checks
// then look again and raise it.
bool PlainTensorFor(PyObject* dest, PyTypeObject* tensor_type, PyObject* want, const Shape& shape) {
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  static PyObject* const kShape = PyUnicode_InternFromString("shape");
  static PyObject* const kIsCpu = PyUnicode_InternFromString("is_cpu");
  static PyObject* const kIsContiguous = PyUnicode_InternFromString("is_contiguous");
  if (!PyObject_TypeCheck(dest, tensor_type)) return false;
  py::object dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(dest, kDtype));
  if (!dtype || dtype.ptr() != want) return PyErr_Clear(), false;
  py::object size = py::reinterpret_steal<py::object>(PyObject_GetAttr(dest, kShape));
  if (!size || !PyTuple_Check(size.ptr()) || static_cast<std::size_t>(PyTuple_GET_SIZE(size.ptr())) != shape.size()) {
    return PyErr_Clear(), false;
  }
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const unsigned long long d = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(size.ptr(), k));
    if (d != shape[k]) return PyErr_Clear(), false;
  }
  py::object cpu = py::reinterpret_steal<py::object>(PyObject_GetAttr(dest, kIsCpu));
  if (cpu.ptr() != Py_True) return PyErr_Clear(), false;
  py::object contiguous = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(dest, kIsContiguous));
  return contiguous.ptr() == Py_True || (PyErr_Clear(), false);
}

py::dict ReportDict(const LoadReport& r) {
  py::dict d;
  d["direct"] = r.direct;
  d["buffered_reason"] = r.buffered_reason;
  d["tensors"] = r.tensors;
  d["verified"] = r.verified;
  d["unverifiable"] = r.unverifiable;
  d["verification"] = r.verification;
  d["bytes"] = r.bytes;
  d["bytes_read"] = r.bytes_read;
  d["requests"] = r.requests;
  d["seconds"] = r.seconds;
  if (!r.pages.empty()) d["pages"] = r.pages;
  return d;
}

// The arena as a writable uint8 ndarray that keeps it alive, each item's
// offset into it, and with `capsules` a writable DLPack capsule per item
// (None where DLPack has no dtype: packed sub-byte types), each holding the
// arena; else None.
std::tuple<py::array_t<std::uint8_t>, std::vector<std::uint64_t>, py::object> Targets(
    const LoadPlan& plan, std::span<const std::span<std::byte>> data, const std::shared_ptr<LoadArena>& held,
    bool capsules) {
  auto* keep = new std::shared_ptr<LoadArena>(held);
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<LoadArena>*>(p); });
  std::span<std::byte> bytes = held->bytes();
  py::array_t<std::uint8_t> arena({static_cast<py::ssize_t>(bytes.size())}, {1},
                                  reinterpret_cast<std::uint8_t*>(bytes.data()), owner);
  std::vector<std::uint64_t> offsets;
  offsets.reserve(data.size());
  for (const std::span<std::byte>& d : data) {
    offsets.push_back(d.size() ? static_cast<std::uint64_t>(d.data() - bytes.data()) : 0);
  }
  py::object caps = py::none();
  if (capsules) {
    py::list list(data.size());
    for (std::size_t i = 0; i < data.size(); ++i) {
      const LoadItem& it = plan.items[i];
      Tensor t;
      t.info.name = it.info.name;
      t.info.dtype = it.info.dtype;
      t.info.shape = it.shape;
      t.data = data[i];
      t.owner = held;
      list[i] = CheckPythonShape(t.info.name, t.info.dtype, t.info.shape).ok() ? WritableDLPack(t) : py::none();
    }
    caps = std::move(list);
  }
  return {arena, std::move(offsets), caps};
}

// LoadPlan.start()'s load, holding its plan (the reads use it) until the
// load is gone: `load` goes first, cancelled and joined if unfinished.
struct Started {
  std::shared_ptr<PlanHandle> plan;
  std::unique_ptr<StartedLoad> load;
};

}  // namespace

void RegisterLoad(py::module_& m) {
  py::class_<Started, std::shared_ptr<Started>>(m, "StartedLoad")
      // Returns once the arena is faulted in (StartedLoad::WaitFaulted).
      .def("wait_faulted",
           [](Started& s) {
             py::gil_scoped_release nogil;
             s.load->WaitFaulted();
           })
      // (arena, offsets, capsules) as load() returns them, before the bytes
      // are there.
      .def(
          "targets",
          [](Started& s, bool capsules) {
            auto [arena, offsets, caps] = Targets(s.plan->plan, s.load->data(), s.load->arena(), capsules);
            return py::make_tuple(arena, offsets, caps);
          },
          py::arg("capsules") = false)
      // Waits for the reads and checks: the report, or load()'s errors.
      .def("finish",
           [](Started& s) {
             Result<Loaded> r = Internal("not finished");
             {
               py::gil_scoped_release nogil;
               r = s.load->Finish();
             }
             return ReportDict(Unwrap(std::move(r)).report);
           })
      // Stops the reads and waits for them (an error on the caller's side).
      .def("cancel", [](Started& s) {
        py::gil_scoped_release nogil;
        s.load->Cancel();
      });
  py::class_<PlanHandle, std::shared_ptr<PlanHandle>>(m, "LoadPlan")
      .def_property_readonly("files",
                             [](const PlanHandle& h) {
                               py::list out;
                               for (const LoadPlan::File& f : h.plan.files)
                                 out.append(py::make_tuple(f.path, FormatName(f.format), f.size));
                               return out;
                             })
      .def_property_readonly("bytes", [](const PlanHandle& h) { return h.plan.bytes; })
      // (name, dtype name, loaded shape, bytes, file index, checksum?) per tensor, in read order.
      .def("items",
           [](const PlanHandle& h) {
             GcPause pause;
             py::list out;
             for (const LoadItem& it : h.plan.items) {
               out.append(py::make_tuple(it.info.name, std::string(DTypeName(it.info.dtype)),
                                         py::tuple(py::cast(it.shape)), it.bytes, it.file, it.checksum));
             }
             return out;
           })
      // load(into=)'s common case, per item in one pass (2 us an item in
      // Python): ({name: into[name]} in item order, per item the data_ptr()
      // of an into= entry read into in place or None, the indices of the
      // items Python must look at: missing from `into`, another type,
      // dtype (by `dtypes`: tensorsafe name -> torch.dtype), shape, device
      // or layout, or no bytes).
      .def("match_into",
           [](const PlanHandle& h, py::dict into, py::dict dtypes, py::object tensor_type) {
             static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
             const std::size_t n = h.plan.items.size();
             py::dict out;
             py::list outs(n);
             std::vector<std::size_t> slow;
             std::vector<std::pair<DType, PyObject*>> wants;  // the few dtypes of a plan, looked up once each
             auto* type = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
             const bool is_type = PyType_Check(tensor_type.ptr());
             for (std::size_t i = 0; i < n; ++i) {
               const LoadItem& it = h.plan.items[i];
               py::str name(it.info.name);
               PyObject* dest = PyDict_GetItemWithError(into.ptr(), name.ptr());  // borrowed
               if (dest == nullptr) {
                 if (PyErr_Occurred()) throw py::error_already_set();
                 outs[i] = py::none();
                 slow.push_back(i);
                 continue;
               }
               if (PyDict_SetItem(out.ptr(), name.ptr(), dest) != 0) throw py::error_already_set();
               auto found =
                   std::find_if(wants.begin(), wants.end(), [&](const auto& w) { return w.first == it.info.dtype; });
               if (found == wants.end()) {
                 py::str key(std::string(DTypeName(it.info.dtype)));
                 PyObject* w = PyDict_GetItemWithError(dtypes.ptr(), key.ptr());  // borrowed
                 if (w == nullptr && PyErr_Occurred()) throw py::error_already_set();
                 found = wants.emplace(wants.end(), it.info.dtype, w);
               }
               PyObject* want = found->second;
               py::object ptr;
               if (is_type && want != nullptr && it.bytes > 0 && PlainTensorFor(dest, type, want, it.shape)) {
                 ptr = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(dest, kDataPtr));
                 if (!ptr || !PyLong_Check(ptr.ptr())) ptr = py::object(), PyErr_Clear();
               }
               if (ptr) {
                 outs[i] = std::move(ptr);
               } else {
                 outs[i] = py::none();
                 slow.push_back(i);
               }
             }
             return py::make_tuple(out, outs, slow);
           })
      // A plan of some of this one's items (ascending indices into items(),
      // which keeps the read order), over the same files: no index is read
      // again.
      .def("subset",
           [](const PlanHandle& h, const std::vector<std::size_t>& indices) {
             auto sub = std::make_shared<PlanHandle>();
             sub->plan.files = h.plan.files;
             sub->plan.items.reserve(indices.size());
             std::size_t last = 0;
             for (std::size_t i : indices) {
               if (i >= h.plan.items.size() || (!sub->plan.items.empty() && i <= last)) {
                 Throw(InvalidArgument("LoadPlan.subset: item " + std::to_string(i) + " of " +
                                       std::to_string(h.plan.items.size()) + " is out of range or order"));
               }
               last = i;
               sub->plan.items.push_back(h.plan.items[i]);
               sub->plan.bytes += h.plan.items[i].bytes;
             }
             return sub;
           })
      // (arena: writable uint8 ndarray, offsets into it per item, report,
      // capsules): with `capsules`, a list of a writable DLPack capsule per
      // item (None where DLPack has no dtype: packed sub-byte types), each
      // holding the arena; otherwise None.
      .def(
          "load",
          [](std::shared_ptr<PlanHandle> h, bool verify, bool direct, unsigned io_threads, std::uint64_t request_bytes,
             bool prefault, std::optional<bool> huge_pages, unsigned verify_threads, bool cached_buffered,
             bool capsules) {
            Result<Loaded> r = Internal("not loaded");
            {
              py::gil_scoped_release nogil;
              r = Load(h->plan, Options(verify, direct, io_threads, request_bytes, prefault, huge_pages, verify_threads,
                                        cached_buffered));
            }
            Loaded loaded = Unwrap(std::move(r));
            auto [arena, offsets, caps] = Targets(h->plan, loaded.data, loaded.arena, capsules);
            return py::make_tuple(arena, offsets, ReportDict(loaded.report), caps);
          },
          py::arg("verify") = true, py::arg("direct") = true, py::arg("io_threads") = 8,
          py::arg("request_bytes") = 4u << 20, py::arg("prefault") = true, py::arg("huge_pages") = py::none(),
          py::arg("verify_threads") = 1, py::arg("cached_buffered") = true, py::arg("capsules") = false)
      // load() on threads of its own (StartedLoad), returned while the
      // bytes arrive: StartedLoad.targets() says where each tensor lands,
      // finish() waits and gives the report or raises load()'s errors.
      .def(
          "start",
          [](std::shared_ptr<PlanHandle> h, bool verify, bool direct, unsigned io_threads, std::uint64_t request_bytes,
             bool prefault, std::optional<bool> huge_pages, unsigned verify_threads, bool cached_buffered) {
            auto started = std::make_shared<Started>();
            started->plan = h;
            Result<std::unique_ptr<StartedLoad>> r = Internal("not started");
            {
              py::gil_scoped_release nogil;
              r = StartedLoad::Start(h->plan, Options(verify, direct, io_threads, request_bytes, prefault, huge_pages,
                                                      verify_threads, cached_buffered));
            }
            started->load = Unwrap(std::move(r));
            return started;
          },
          py::arg("verify") = true, py::arg("direct") = true, py::arg("io_threads") = 8,
          py::arg("request_bytes") = 4u << 20, py::arg("prefault") = true, py::arg("huge_pages") = py::none(),
          py::arg("verify_threads") = 1, py::arg("cached_buffered") = true)
      // `outs`: per item, a writable buffer-protocol object, or an int: the
      // address of a contiguous CPU tensor of exactly the item's bytes,
      // which tensorsafe/_load.py has checked and keeps alive (a torch
      // tensor's data_ptr(): 1 us, where its uint8 NumPy view costs 10).
      .def(
          "load_into",
          [](std::shared_ptr<PlanHandle> h, py::list outs, bool verify, bool direct, unsigned io_threads,
             std::uint64_t request_bytes, unsigned verify_threads, bool cached_buffered) {
            if (outs.size() != h->plan.items.size()) {
              Throw(InvalidArgument("load_into: " + std::to_string(outs.size()) + " buffers for " +
                                    std::to_string(h->plan.items.size()) + " tensors"));
            }
            std::vector<py::buffer_info> infos;
            std::vector<std::span<std::byte>> spans;
            infos.reserve(outs.size());
            spans.reserve(outs.size());
            for (std::size_t i = 0; i < outs.size(); ++i) {
              py::handle o = outs[i];
              if (PyLong_Check(o.ptr())) {
                const std::uint64_t n = h->plan.items[i].bytes;
                auto* p = reinterpret_cast<std::byte*>(o.cast<std::uintptr_t>());
                if (!p && n) Throw(InvalidArgument("load_into: a null address for " + h->plan.items[i].info.name));
                spans.emplace_back(p, static_cast<std::size_t>(n));
                continue;
              }
              infos.push_back(py::reinterpret_borrow<py::buffer>(o).request(true));
              const py::buffer_info& b = infos.back();
              spans.emplace_back(static_cast<std::byte*>(b.ptr), static_cast<std::size_t>(b.size * b.itemsize));
            }
            Result<LoadReport> r = Internal("not loaded");
            {
              py::gil_scoped_release nogil;
              r = LoadInto(
                  h->plan, spans,
                  Options(verify, direct, io_threads, request_bytes, false, false, verify_threads, cached_buffered));
            }
            return ReportDict(Unwrap(std::move(r)));
          },
          py::arg("outs"), py::arg("verify") = true, py::arg("direct") = true, py::arg("io_threads") = 8,
          py::arg("request_bytes") = 4u << 20, py::arg("verify_threads") = 1, py::arg("cached_buffered") = true);

  m.def(
      "plan_load",
      [](std::vector<std::string> paths, std::optional<std::vector<std::string>> names,
         std::optional<std::tuple<std::uint32_t, std::uint64_t, std::uint64_t, std::uint32_t>> slice) {
        PlanOptions o;
        o.names = std::move(names);
        if (slice)
          o.slice = RankSlice{std::get<0>(*slice), std::get<1>(*slice), std::get<2>(*slice), std::get<3>(*slice)};
        auto h = std::make_shared<PlanHandle>();
        Result<LoadPlan> r = Internal("not planned");
        {
          py::gil_scoped_release nogil;
          r = PlanLoad(paths, o);
        }
        h->plan = Unwrap(std::move(r));
        return h;
      },
      py::arg("paths"), py::arg("names") = py::none(), py::arg("slice") = py::none());

  m.def(
      "populate",
      [](py::buffer mapping, unsigned threads) {
        py::buffer_info b = mapping.request();
        const std::span<const std::byte> bytes(static_cast<const std::byte*>(b.ptr),
                                               static_cast<std::size_t>(b.size * b.itemsize));
        py::gil_scoped_release nogil;  // the buffer stays exported: the mapping cannot be closed meanwhile
        return PopulateMapping(bytes, threads);
      },
      py::arg("mapping"), py::arg("threads") = 0,
      "Reads a file mapping's pages in and maps them, in 32 MiB pieces over several threads "
      "(MADV_POPULATE_READ); False where the kernel lacks it (readahead was asked for instead).");
}

}  // namespace tensorsafe::python
