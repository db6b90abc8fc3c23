// tensorsafe._native dataset partitioning: thin wrappers over
// include/tensorsafe/dataset/{partition,shuffle,sampler}.h returning numpy
// int64 arrays (docs/PARTITION.md). Used by tensorsafe.partition and by the
// interop tests against MosaicML streaming.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "tensorsafe/dataset/partition.h"
#include "tensorsafe/dataset/sampler.h"
#include "tensorsafe/dataset/shuffle.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;

py::array_t<std::int64_t> ToArray(std::vector<std::int64_t>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<std::int64_t>(std::move(v));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<std::int64_t>*>(p); });
  return py::array_t<std::int64_t>(shape, owned->data(), base);
}

ds::World MakeWorld(std::int64_t nodes, std::int64_t ranks, std::int64_t workers, std::int64_t node, std::int64_t rank,
                    std::int64_t worker) {
  ds::World w;
  w.num_nodes = nodes;
  w.ranks_per_node = ranks;
  w.workers_per_rank = workers;
  w.node = node;
  w.rank_of_node = rank;
  w.worker_of_rank = worker;
  return w;
}

}  // namespace

void RegisterDatasetPartition(py::module_& m) {
  m.def(
      "partition_seed",
      [](std::vector<std::int64_t> shards, std::int64_t nodes, std::int64_t ranks, std::int64_t workers,
         std::int64_t node, std::int64_t rank, std::int64_t worker, std::optional<std::int64_t> batch_size) {
        ds::SeedPartition p;
        {
          py::gil_scoped_release release;
          p = Unwrap(ds::GetSeedPartition(shards, MakeWorld(nodes, ranks, workers, node, rank, worker), batch_size));
        }
        py::dict d;
        d["min_id"] = p.min_id;
        d["max_id"] = p.max_id;
        d["shard_begin"] = p.shard_begin;
        d["shard_end"] = p.shard_end;
        d["download_end"] = p.download_end;
        return d;
      },
      py::arg("samples_per_shard"), py::arg("num_nodes"), py::arg("ranks_per_node"), py::arg("workers_per_rank"),
      py::arg("node"), py::arg("rank_of_node"), py::arg("worker_of_rank"), py::arg("batch_size") = py::none(),
      "Composer's get_partition for one worker: {min_id, max_id, shard_begin, shard_end, download_end}.");

  m.def(
      "partition_elastic",
      [](const std::string& algo, std::int64_t num_samples, std::int64_t ncn, std::int64_t nodes, std::int64_t ranks,
         std::int64_t workers, std::int64_t batch_size, std::int64_t drop_first,
         std::optional<std::int64_t> initial_nodes) {
        ds::ElasticParams p;
        p.algo = Unwrap(ds::ParsePartitionAlgo(algo));
        p.num_samples = num_samples;
        p.num_canonical_nodes = ncn;
        p.num_nodes = nodes;
        p.ranks_per_node = ranks;
        p.workers_per_rank = workers;
        p.batch_size = batch_size;
        p.drop_first = drop_first;
        p.initial_nodes = initial_nodes;
        std::vector<std::int64_t> ids;
        std::array<std::int64_t, 5> shape{};
        {
          py::gil_scoped_release release;
          ds::ElasticPartition part = Unwrap(ds::ElasticPartition::Create(p));
          shape = part.shape();
          ids = Unwrap(part.Materialize());
        }
        return ToArray(std::move(ids), {shape[0], shape[1], shape[2], shape[3], shape[4]});
      },
      py::arg("algo"), py::arg("num_samples"), py::arg("num_canonical_nodes"), py::arg("num_nodes"),
      py::arg("ranks_per_node"), py::arg("workers_per_rank"), py::arg("batch_size"), py::arg("drop_first") = 0,
      py::arg("initial_nodes") = py::none(),
      "MosaicML's orig/relaxed partition: int64 (nodes, ranks, workers, batches, batch_size), -1 = padding.");

  m.def(
      "epoch_shuffle",
      [](std::vector<std::int64_t> shard_sizes, std::int64_t ncn, std::uint64_t seed, std::uint64_t epoch,
         std::int64_t block_size) {
        std::vector<std::int64_t> ids;
        {
          py::gil_scoped_release release;
          ds::EpochShuffle s = Unwrap(ds::EpochShuffle::Create(shard_sizes, ncn, seed, epoch, block_size));
          ids.resize(static_cast<std::size_t>(s.num_samples()));
          Check(s.Fill(ids));
        }
        const auto n = static_cast<py::ssize_t>(ids.size());
        return ToArray(std::move(ids), {n});
      },
      py::arg("shard_sizes"), py::arg("num_canonical_nodes"), py::arg("seed"), py::arg("epoch"), py::arg("block_size"),
      "The epoch's permutation: out[canonical position] = sample id.");

  m.def(
      "epoch_worker_ids",
      [](std::vector<std::int64_t> shards, const ds::SamplerState& state, std::int64_t nodes, std::int64_t ranks,
         std::int64_t workers, std::int64_t node, std::int64_t rank, std::int64_t worker, bool keep_padding) {
        std::vector<std::int64_t> ids;
        {
          py::gil_scoped_release release;
          ids = Unwrap(
              ds::EpochWorkerIds(shards, state, MakeWorld(nodes, ranks, workers, node, rank, worker), keep_padding));
        }
        const auto n = static_cast<py::ssize_t>(ids.size());
        return ToArray(std::move(ids), {n});
      },
      py::arg("samples_per_shard"), py::arg("state"), py::arg("num_nodes"), py::arg("ranks_per_node"),
      py::arg("workers_per_rank"), py::arg("node"), py::arg("rank_of_node"), py::arg("worker_of_rank"),
      py::arg("keep_padding") = false,
      "One worker's sample ids for the epoch and position in `state` (a SamplerState).");
}

}  // namespace tensorsafe::python
