// tensorsafe._native LMDB classes: LmdbStore and LmdbSnapshot
// (include/tensorsafe/stream/lmdb.h), for tensorsafe.lmdb. Batches come in as
// entries (entries.h) and go out as TensorBuffers viewing LMDB's mapping,
// each holding its snapshot (read transaction) open; every LMDB call runs
// without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/stream/lmdb.h"

namespace tensorsafe::python {
namespace {

// (list of TensorBuffer, metadata JSON or "").
py::tuple BatchToPython(TensorSet&& batch) {
  py::list tensors(batch.tensors.size());
  for (std::size_t i = 0; i < batch.tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(batch.tensors[i]));
  return py::make_tuple(tensors, py::str(batch.metadata_json));
}

TensorSet BatchFromPython(const std::vector<Entry>& entries, const std::string& metadata_json) {
  for (const Entry& e : entries) {
    if (e.coo) {
      Throw(Unsupported("tensor \"" + e.name +
                        "\": a sparse COO tensor cannot be stored in an LMDB batch "
                        "(values are dense stream messages); store t.to_dense() or its indices and values"));
    }
  }
  return ToTensorSet(entries, metadata_json);
}

py::list EntriesToPython(const std::vector<LmdbEntry>& entries) {
  py::list out;
  for (const LmdbEntry& e : entries) out.append(py::make_tuple(e.key, e.tensor_count, e.value_bytes));
  return out;
}

template <typename T>
const std::shared_ptr<T>& Live(const std::shared_ptr<T>& p, const char* what) {
  if (!p) Throw(FailedPrecondition(std::string(what) + " is closed"));
  return p;
}

struct PyLmdbStore {
  std::shared_ptr<LmdbStore> store;
};
struct PyLmdbSnapshot {
  std::shared_ptr<LmdbSnapshot> snapshot;
};

PyLmdbSnapshot OpenSnapshot(const PyLmdbStore& self) {
  const auto& store = Live(self.store, "the LMDB store");
  py::gil_scoped_release nogil;
  return PyLmdbSnapshot{Unwrap(store->Snapshot())};
}

py::tuple SnapshotGet(const std::shared_ptr<LmdbSnapshot>& snap, const std::string& key) {
  Result<TensorSet> b = [&] {
    py::gil_scoped_release nogil;
    return snap->Get(key);
  }();
  return BatchToPython(Unwrap(std::move(b)));
}

}  // namespace

void RegisterLmdb(py::module_& m) {
  py::class_<PyLmdbSnapshot>(m, "LmdbSnapshot", "A read transaction of an LMDB store; use tensorsafe.lmdb.")
      .def(
          "get",
          [](const PyLmdbSnapshot& self, const std::string& key) {
            return SnapshotGet(Live(self.snapshot, "the LMDB snapshot"), key);
          },
          py::arg("key"), "(tensors viewing the mapping, metadata JSON); NotFoundError when absent.")
      .def(
          "list",
          [](const PyLmdbSnapshot& self, const std::string& prefix) {
            const auto& snap = Live(self.snapshot, "the LMDB snapshot");
            Result<std::vector<LmdbEntry>> r = [&] {
              py::gil_scoped_release nogil;
              return snap->List(prefix);
            }();
            return EntriesToPython(Unwrap(std::move(r)));
          },
          py::arg("prefix") = "", "[(key, tensor_count, value_bytes)] in key order.")
      .def("close", [](PyLmdbSnapshot& self) {
        // Views already handed out keep the transaction open until they go.
        std::shared_ptr<LmdbSnapshot> doomed = std::move(self.snapshot);
        py::gil_scoped_release nogil;
        doomed.reset();
      });

  py::class_<PyLmdbStore>(m, "LmdbStore", "A key -> batch store on LMDB; use tensorsafe.lmdb.")
      .def_static(
          "open",
          [](const std::string& path, std::uint64_t map_size, bool read_only, bool subdir, unsigned max_readers,
             bool sync, bool verify_data) {
            LmdbOptions o;
            o.map_size = map_size;
            o.read_only = read_only;
            o.subdir = subdir;
            o.max_readers = max_readers;
            o.sync = sync;
            o.read.verify_data = verify_data;
            py::gil_scoped_release nogil;
            return PyLmdbStore{Unwrap(LmdbStore::Open(path, o))};
          },
          py::arg("path"), py::arg("map_size") = std::uint64_t{64} << 30, py::arg("read_only") = false,
          py::arg("subdir") = true, py::arg("max_readers") = 126, py::arg("sync") = true, py::arg("verify_data") = true)
      .def(
          "put",
          [](const PyLmdbStore& self, const std::string& key, const py::iterable& items,
             const std::string& metadata_json) {
            const auto& store = Live(self.store, "the LMDB store");
            std::vector<Entry> entries = ParseEntries(items);
            TensorSet set = BatchFromPython(entries, metadata_json);
            Status s;
            {
              py::gil_scoped_release nogil;
              s = store->Put(key, set);
            }
            Check(s);
          },
          py::arg("key"), py::arg("entries"), py::arg("metadata_json") = "")
      .def(
          "put_many",
          [](const PyLmdbStore& self, const py::iterable& items) {
            // items: (key, entries, metadata_json); one transaction, all or nothing.
            const auto& store = Live(self.store, "the LMDB store");
            std::deque<std::vector<Entry>> keep;  // the views' owners, held until the put
            std::vector<std::pair<std::string, TensorSet>> batches;
            for (py::handle item : items) {
              py::tuple t = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
              if (t.size() != 3) Throw(InvalidArgument("put_many: each item is (key, entries, metadata_json)"));
              keep.push_back(ParseEntries(py::reinterpret_borrow<py::iterable>(t[1])));
              batches.emplace_back(t[0].cast<std::string>(), BatchFromPython(keep.back(), t[2].cast<std::string>()));
            }
            Status s;
            {
              py::gil_scoped_release nogil;
              s = store->PutMany(batches);
            }
            Check(s);
          },
          py::arg("items"))
      .def(
          "load",
          [](const PyLmdbStore& self, const std::string& source, std::uint32_t group, const std::string& prefix) {
            const auto& store = Live(self.store, "the LMDB store");
            LmdbLoadOptions o;
            o.tensors_per_batch = group;
            o.key_prefix = prefix;
            py::gil_scoped_release nogil;
            return Unwrap(LoadTsafeFile(*store, source, o));
          },
          py::arg("source"), py::arg("group") = 1, py::arg("prefix") = "")
      .def(
          "load_directory",
          [](const PyLmdbStore& self, const std::string& dir, std::uint32_t group, const std::string& prefix) {
            const auto& store = Live(self.store, "the LMDB store");
            LmdbLoadOptions o;
            o.tensors_per_batch = group;
            o.key_prefix = prefix;
            py::gil_scoped_release nogil;
            return Unwrap(LoadTsafeDirectory(*store, dir, o));
          },
          py::arg("dir"), py::arg("group") = 1, py::arg("prefix") = "")
      .def(
          "delete",
          [](const PyLmdbStore& self, const std::string& key) {
            const auto& store = Live(self.store, "the LMDB store");
            Status s;
            {
              py::gil_scoped_release nogil;
              s = store->Delete(key);
            }
            Check(s);
          },
          py::arg("key"))
      .def(
          "get_copy",
          [](const PyLmdbStore& self, const std::string& key) {
            const auto& store = Live(self.store, "the LMDB store");
            Result<TensorSet> b = [&] {
              py::gil_scoped_release nogil;
              return store->Get(key);
            }();
            return BatchToPython(Unwrap(std::move(b)));
          },
          py::arg("key"), "(tensors owning a copy, metadata JSON): holds no transaction.")
      .def(
          "list",
          [](const PyLmdbStore& self, const std::string& prefix) {
            const auto& store = Live(self.store, "the LMDB store");
            Result<std::vector<LmdbEntry>> r = [&] {
              py::gil_scoped_release nogil;
              return store->List(prefix);
            }();
            return EntriesToPython(Unwrap(std::move(r)));
          },
          py::arg("prefix") = "")
      .def("snapshot", &OpenSnapshot)
      .def_property_readonly("path", [](const PyLmdbStore& self) { return Live(self.store, "the LMDB store")->path(); })
      .def("close", [](PyLmdbStore& self) {
        std::shared_ptr<LmdbStore> doomed = std::move(self.store);
        py::gil_scoped_release nogil;
        doomed.reset();
      });
}

}  // namespace tensorsafe::python
