// tensorsafe._native: the private extension module re-exported by the pure-
// Python package in python/tensorsafe/. One file per concept registers its
// part: errors.cc, buffer.cc, reader.cc, writer.cc, codecs.cc.
#include <pybind11/pybind11.h>

#include "common.h"

namespace tensorsafe::python {
void RegisterSampleIter(py::module_& m);        // sample_iter.cc
void RegisterDatasetWriter(py::module_& m);     // dataset_writer.cc
void RegisterDataset(py::module_& m);           // dataset.cc
void RegisterSampler(py::module_& m);           // sampler.cc
void RegisterDatasetPartition(py::module_& m);  // dataset_partition.cc
void RegisterGguf(py::module_& m);              // gguf.cc
void RegisterLmdb(py::module_& m);              // lmdb.cc
void RegisterSharded(py::module_& m);           // sharded.cc
void RegisterLoad(py::module_& m);              // load.cc
void RegisterUrlHandler(py::module_& m);        // url_handler.cc
void RegisterDcp(py::module_& m);               // dcp.cc
void RegisterCli(py::module_& m);               // cli.cc
}  // namespace tensorsafe::python

PYBIND11_MODULE(_native, m) {
  namespace tp = tensorsafe::python;
  m.doc() = "tensorsafe native bindings (private: import tensorsafe instead)";
  tp::RegisterErrors(m);
  tp::RegisterBuffer(m);
  tp::RegisterReader(m);
  tp::RegisterWriter(m);
  tp::RegisterCodecs(m);
  tp::RegisterStream(m);
  tp::RegisterSampleIter(m);
  tp::RegisterDatasetWriter(m);
  tp::RegisterSampler(m);
  tp::RegisterDataset(m);
  tp::RegisterDatasetPartition(m);
  tp::RegisterGguf(m);
  tp::RegisterLmdb(m);
  tp::RegisterSharded(m);
  tp::RegisterLoad(m);
  tp::RegisterUrlHandler(m);
  tp::RegisterDcp(m);
  tp::RegisterCli(m);
}
