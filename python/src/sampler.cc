// tensorsafe._native.SamplerState: the epoch sampler's state
// (include/tensorsafe/dataset/sampler.h, docs/PARTITION.md §5) as a Python
// type. Keys, defaults and checks are the C++ ones: a dict is checked by
// SamplerStateFromFields, value by value, with no JSON text in between.
#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "common.h"
#include "tensorsafe/dataset/sampler.h"

namespace tensorsafe::python {
namespace {

namespace ds = tensorsafe::dataset;
using Kind = ds::SamplerValue::Kind;

// A Python value as the field checker sees it. Integers include anything
// with __index__ (NumPy and torch integers) except bool.
ds::SamplerValue ToValue(py::handle v) {
  if (v.is_none()) return ds::SamplerValue::Null();
  if (PyBool_Check(v.ptr())) return ds::SamplerValue::Bool(v.ptr() == Py_True);
  if (PyUnicode_Check(v.ptr())) return ds::SamplerValue::String(v.cast<std::string>());
  if (!PyFloat_Check(v.ptr()) && PyIndex_Check(v.ptr())) {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0 && !PyErr_Occurred()) return ds::SamplerValue::Int(x);
    PyErr_Clear();
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
      if (!PyErr_Occurred()) return ds::SamplerValue::UInt(u);
      PyErr_Clear();
    }
    return ds::SamplerValue::Other("integer " + py::str(i).cast<std::string>());
  }
  std::string repr = py::repr(v).cast<std::string>();
  if (repr.size() > 60) repr = repr.substr(0, 57) + "...";
  return ds::SamplerValue::Other(std::string(Py_TYPE(v.ptr())->tp_name) + " " + repr);
}

py::object ToPython(const ds::SamplerValue& v) {
  switch (v.kind) {
    case Kind::kNull: return py::none();
    case Kind::kBool: return py::bool_(v.boolean);
    case Kind::kInt: return py::int_(v.integer);
    case Kind::kUInt: return py::int_(v.uinteger);
    case Kind::kString: return py::str(v.text);
    case Kind::kOther: break;
  }
  return py::str(v.text);
}

// `fields` with the (key, value) items of `kwargs` put in place (unknown keys
// appended, for SamplerStateFromFields to name).
ds::SamplerState WithFields(ds::SamplerFields fields, const py::dict& kwargs) {
  for (auto item : kwargs) {
    const std::string key = py::str(item.first).cast<std::string>();
    ds::SamplerValue value = ToValue(item.second);
    bool found = false;
    for (auto& [k, v] : fields) {
      if (k == key) {
        v = std::move(value);
        found = true;
      }
    }
    if (!found) fields.emplace_back(key, std::move(value));
  }
  return Unwrap(ds::SamplerStateFromFields(fields));
}

py::dict ToDict(const ds::SamplerState& s) {
  py::dict d;
  for (const auto& [k, v] : ds::SamplerStateToFields(s)) d[py::str(k)] = ToPython(v);
  return d;
}

ds::SamplerState FromMapping(const py::handle& mapping) {
  if (!PyMapping_Check(mapping.ptr()) || PyUnicode_Check(mapping.ptr())) {
    Throw(InvalidArgument(std::string("sampler state: expected a dict, got ") + Py_TYPE(mapping.ptr())->tp_name));
  }
  ds::SamplerFields fields;
  py::object items = py::reinterpret_steal<py::object>(PyMapping_Items(mapping.ptr()));
  if (!items) throw py::error_already_set();
  for (auto item : items) {
    py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
    if (!PyUnicode_Check(kv[0].ptr())) {
      Throw(InvalidArgument("sampler state: keys are str, not " + std::string(Py_TYPE(kv[0].ptr())->tp_name)));
    }
    fields.emplace_back(kv[0].cast<std::string>(), ToValue(kv[1]));
  }
  return Unwrap(ds::SamplerStateFromFields(fields));
}

py::object Opt(const std::optional<std::int64_t>& v) { return v ? py::object(py::int_(*v)) : py::object(py::none()); }

}  // namespace

void RegisterSampler(py::module_& m) {
  py::class_<ds::SamplerState>(
      m, "SamplerState",
      "The epoch sampler's state (docs/PARTITION.md §5): configuration and position. SamplerState(**fields) "
      "starts from the C++ defaults; every construction is checked strictly (InvalidArgumentError naming the "
      "key).")
      .def(py::init([](py::kwargs kwargs) { return WithFields(ds::SamplerStateToFields(ds::SamplerState{}), kwargs); }))
      .def_static("from_dict", &FromMapping, py::arg("state"),
                  "Strict: exactly the keys of a version 1 or 2 state, with their types and ranges.")
      .def_static(
          "from_json", [](const std::string& text) { return Unwrap(ds::DecodeSamplerState(text)); }, py::arg("text"),
          "Strict, from the JSON text of PARTITION.md §5.1.")
      .def(
          "to_json", [](const ds::SamplerState& s) { return ds::EncodeSamplerState(s); },
          "The canonical JSON text (PARTITION.md §5.1).")
      .def("to_dict", &ToDict, "Every key of the version-2 state in order (None where unset).")
      .def(
          "replace",
          [](const ds::SamplerState& s, py::kwargs kwargs) { return WithFields(ds::SamplerStateToFields(s), kwargs); },
          "A copy with the given fields changed (checked as a whole).")
      .def_property_readonly("mode",
                             [](const ds::SamplerState& s) { return std::string(ds::PartitionModeName(s.mode)); })
      .def_property_readonly("partition",
                             [](const ds::SamplerState& s) { return std::string(ds::PartitionAlgoName(s.partition)); })
      .def_readonly("epoch", &ds::SamplerState::epoch)
      .def_readonly("sample_in_epoch", &ds::SamplerState::sample_in_epoch)
      .def_readonly("seed", &ds::SamplerState::seed)
      .def_readonly("num_canonical_nodes", &ds::SamplerState::num_canonical_nodes)
      .def_readonly("global_batch_size", &ds::SamplerState::global_batch_size)
      .def_readonly("shuffle", &ds::SamplerState::shuffle)
      .def_property_readonly("shuffle_block_size", [](const ds::SamplerState& s) { return Opt(s.shuffle_block_size); })
      .def_property_readonly("block_size", &ds::SamplerState::block_size,
                             "The shuffle block size in effect (the default for num_canonical_nodes when unset).")
      .def_property_readonly("initial_nodes", [](const ds::SamplerState& s) { return Opt(s.initial_nodes); })
      .def_property_readonly(
          "worker_samples",
          [](const ds::SamplerState& s) {
            return s.worker ? py::object(py::int_(s.worker->samples)) : py::object(py::none());
          },
          "A worker position's count of ids already yielded, or None for a global state.")
      .def_property_readonly(
          "worker_world",
          [](const ds::SamplerState& s) -> py::object {
            if (!s.worker) return py::none();
            const ds::World& w = s.worker->world;
            return py::make_tuple(w.num_nodes, w.ranks_per_node, w.workers_per_rank, w.node, w.rank_of_node,
                                  w.worker_of_rank);
          },
          "A worker position's world (nodes, ranks_per_node, workers_per_rank, node, rank_of_node, worker_of_rank).")
      .def(
          "check", [](const ds::SamplerState& s) { Check(ds::CheckSamplerState(s)); },
          "The checks that need neither shards nor a world (seed mode: no shuffle, no mid-epoch position).")
      .def("__eq__", [](const ds::SamplerState& a, const ds::SamplerState& b) { return a == b; })
      .def("__eq__", [](const ds::SamplerState&, const py::object&) { return false; })
      .def("__repr__", [](const ds::SamplerState& s) { return "SamplerState(" + ds::EncodeSamplerState(s) + ")"; })
      .def(py::pickle([](const ds::SamplerState& s) { return ToDict(s); },
                      [](const py::dict& d) { return FromMapping(d); }));
  m.def("default_shuffle_block_size", &ds::DefaultShuffleBlockSize, py::arg("num_canonical_nodes"),
        "MosaicML's default shuffle block size: max(4_000_000 // num_canonical_nodes, 1 << 18).");
}

}  // namespace tensorsafe::python
