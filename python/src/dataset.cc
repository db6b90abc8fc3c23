// tensorsafe._native.Dataset: open any dataset location, read one sample,
// iterate (SampleIter, sample_iter.h) a range, a list of ids or one worker's
// share of an epoch (SamplerState, sampler.cc), verify; and dataset_merge.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "sample_iter.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/sampler.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;

// ---- helpers ---------------------------------------------------------------

// An open Dataset and the converter its map-style reads share (field names
// interned once; only used with the GIL held).
struct PyDataset {
  std::shared_ptr<ds::Dataset> d;
  std::unique_ptr<SampleConverter> conv;
  std::size_t max_open_shards = 64;

  PyDataset() = default;
  PyDataset(PyDataset&&) = default;
  ~PyDataset() { ReleaseDataset(d); }
};

std::vector<std::uint64_t> ToIds(py::handle ids, std::uint64_t n) {
  auto arr = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
  if (!arr) throw py::error_already_set();
  if (arr.ndim() != 1) Throw(InvalidArgument("sample ids must be a 1-D sequence"));
  std::vector<std::uint64_t> out(static_cast<std::size_t>(arr.size()));
  const std::int64_t* p = arr.data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (p[i] < 0 || static_cast<std::uint64_t>(p[i]) >= n) {
      Throw(OutOfRange("sample id " + std::to_string(p[i]) + " at position " + std::to_string(i) + " is outside [0, " +
                       std::to_string(n) + ")"));
    }
    out[i] = static_cast<std::uint64_t>(p[i]);
  }
  return out;
}

ds::World MakeWorld(const std::vector<std::int64_t>& w) {
  if (w.size() != 6)
    Throw(
        InvalidArgument("world must be (nodes, ranks_per_node, workers_per_rank, node, rank_of_node, worker_of_rank)"));
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

std::vector<std::int64_t> EpochIds(const ds::Dataset& d, const ds::SamplerState& state,
                                   const std::vector<std::int64_t>& world) {
  ds::World w = MakeWorld(world);
  std::vector<std::int64_t> counts = ShardCounts(d);
  py::gil_scoped_release release;
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

}  // namespace

void RegisterDataset(py::module_& m) {
  py::class_<PyDataset>(m, "Dataset")
      .def(py::init([](const std::string& dir, const std::string& cache_dir, std::size_t max_open_shards,
                       bool verify_on_open, std::uint64_t cache_limit) {
             ds::DatasetOptions o;
             o.cache_dir = cache_dir;
             o.max_open_shards = max_open_shards;
             o.verify_on_open = verify_on_open;
             o.remote.cache_limit_bytes = cache_limit;
             PyDataset p;
             {
               py::gil_scoped_release release;
               // Any location kind: DATASET.md "Locations".
               p.d = Unwrap(ds::OpenAny(dir, o));
             }
             p.max_open_shards = max_open_shards;
             p.conv = std::make_unique<SampleConverter>(p.d->schema(), max_open_shards);
             return p;
           }),
           py::arg("dir"), py::arg("cache_dir") = "", py::arg("max_open_shards") = 64,
           py::arg("verify_on_open") = false, py::arg("cache_limit") = 0)
      .def("__len__", [](const PyDataset& p) { return p.d->num_samples(); })
      .def_property_readonly("location", [](const PyDataset& p) { return p.d->location(); })
      .def_property_readonly("schema_json", [](const PyDataset& p) { return ds::SchemaToJson(p.d->schema()); })
      .def_property_readonly("metadata_json", [](const PyDataset& p) { return p.d->metadata_json(); })
      .def_property_readonly("shard_samples", [](const PyDataset& p) { return ShardCounts(*p.d); })
      .def_property_readonly("shards",
                             [](const PyDataset& p) {
                               const ds::Dataset& d = *p.d;
                               py::list l;
                               for (const ds::ShardInfo& s : d.shards()) l.append(ShardToDict(s));
                               return l;
                             })
      .def(
          "read",
          [](PyDataset& p, std::uint64_t i) {
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
          },
          py::arg("index"), "Sample `index` as a dict (tensor fields are read-only views).")
      .def(
          "iter_range",
          [](PyDataset& p, std::uint64_t begin, std::uint64_t end) {
            const std::shared_ptr<ds::Dataset>& d = p.d;
            end = std::min(end, d->num_samples());
            begin = std::min(begin, end);
            ds::SampleIterator it = d->IterateRange(begin, end);
            return MakeSampleIter(d, std::move(it), end - begin, p.max_open_shards);
          },
          py::arg("begin"), py::arg("end"))
      .def(
          "iter_ids",
          [](PyDataset& p, py::handle ids) {
            const std::shared_ptr<ds::Dataset>& d = p.d;
            std::vector<std::uint64_t> order = ToIds(ids, d->num_samples());
            const std::uint64_t total = order.size();
            ds::SampleIterator it = d->Iterate(std::move(order));
            return MakeSampleIter(d, std::move(it), total, p.max_open_shards);
          },
          py::arg("ids"))
      .def(
          "iter_epoch",
          [](PyDataset& p, const ds::SamplerState& state, const std::vector<std::int64_t>& world) {
            const std::shared_ptr<ds::Dataset>& d = p.d;
            std::vector<std::int64_t> ids = EpochIds(*d, state, world);
            std::vector<std::uint64_t> order(ids.begin(), ids.end());  // padding removed: all >= 0
            const std::uint64_t total = order.size();
            ds::SampleIterator it = d->Iterate(std::move(order));
            return MakeSampleIter(d, std::move(it), total, p.max_open_shards);
          },
          py::arg("state"), py::arg("world"),
          "One worker's samples of the epoch and position in `state` (a SamplerState); world = (nodes, "
          "ranks_per_node, workers_per_rank, node, rank_of_node, worker_of_rank).")
      .def(
          "verify",
          [](const PyDataset& p) {
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
          },
          "Every problem found, as exception objects (empty when the dataset is sound).");

  m.def(
      "dataset_merge",
      [](const std::string& out_dir, const std::vector<std::string>& parts, const std::string& metadata_json,
         bool overwrite, bool sync) {
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
      },
      py::arg("out_dir"), py::arg("parts"), py::arg("metadata_json") = "", py::arg("overwrite") = false,
      py::arg("sync") = true);
}

}  // namespace tensorsafe::python
