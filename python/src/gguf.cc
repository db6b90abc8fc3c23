// tensorsafe._native GGUF block codecs and dtype casts
// (include/tensorsafe/formats/gguf_quants.h, include/tensorsafe/cast.h):
// read_gguf(dequantize=...), tensorsafe.gguf.quantize / dequantize and
// tensorsafe.cast. Tensors come in as writer entries and go out as
// TensorBuffers owning their new bytes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::python {
namespace {

gguf::GgmlType TypeOrThrow(const std::string& name) {
  auto t = gguf::FindGgmlType(name);
  if (!t) Throw(InvalidArgument("\"" + name + "\" is not a ggml type name (F32, Q4_0, Q4_K, IQ2_XXS, ...)"));
  return *t;
}

DType TargetOrThrow(const std::string& name) {
  DType d = ParseDTypeOrThrow(name);
  if (d != DType::kF32 && d != DType::kF16 && d != DType::kBF16) {
    Throw(InvalidArgument("dtype \"" + name + "\": expected f32, f16 or bf16"));
  }
  return d;
}

// The one tensor of a single-entry list, viewing the entry's buffer.
Tensor OneTensor(const std::vector<Entry>& entries) {
  if (entries.size() != 1) Throw(InvalidArgument("expected exactly one tensor"));
  TensorSet set = ToTensorSet(entries, "");
  return std::move(set.tensors.front());
}

}  // namespace

void RegisterGguf(py::module_& m) {
  m.def("gguf_types", [] {
    py::list out;
    for (std::uint32_t code = 0; code < 256; ++code) {
      auto t = gguf::LookupGgmlType(code);
      if (!t) continue;
      out.append(py::make_tuple(std::string(t->name), t->code, t->block_elems, t->block_bytes, gguf::CanDequantize(*t),
                                gguf::CanQuantize(*t)));
    }
    return out;
  });

  m.def(
      "gguf_read",
      [](const std::string& path, const std::string& dtype, unsigned threads) {
        const DType target = TargetOrThrow(dtype);
        Result<TensorSet> r = [&]() -> Result<TensorSet> {
          py::gil_scoped_release nogil;
          TS_ASSIGN_OR_RETURN(TensorSet set, gguf::ReadFile(path));
          return gguf::DequantizeSet(set, target, {.threads = threads});
        }();
        TensorSet set = Unwrap(std::move(r));
        py::list tensors(set.tensors.size());
        for (std::size_t i = 0; i < set.tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(set.tensors[i]));
        return py::make_tuple(tensors, py::str(set.metadata_json));
      },
      py::arg("path"), py::arg("dtype"), py::arg("threads") = 0);

  // One entry (ggml blocks marked as gguf::Decode marks them, or f64, f32,
  // f16, bf16 values) to `dtype`.
  m.def(
      "gguf_dequantize",
      [](const py::iterable& items, const std::string& dtype, unsigned threads) {
        const DType target = TargetOrThrow(dtype);
        std::vector<Entry> entries = ParseEntries(items);
        Tensor t = OneTensor(entries);
        Result<Tensor> r = [&] {
          py::gil_scoped_release nogil;
          return gguf::DequantizeTensor(t, target, {.threads = threads});
        }();
        Tensor out = Unwrap(std::move(r));
        if (out.owner == nullptr || out.data.data() == t.data.data()) {
          Throw(InvalidArgument("tensor \"" + t.info.name + "\" is already " + dtype));
        }
        return MakeBuffer(std::move(out));
      },
      py::arg("entries"), py::arg("dtype"), py::arg("threads") = 0);

  m.def(
      "gguf_quantize",
      [](const py::iterable& items, const std::string& type, unsigned threads) {
        const gguf::GgmlType t = TypeOrThrow(type);
        std::vector<Entry> entries = ParseEntries(items);
        Tensor in = OneTensor(entries);
        Result<Tensor> r = [&] {
          py::gil_scoped_release nogil;
          return gguf::QuantizeTensor(in, t, {.threads = threads});
        }();
        return MakeBuffer(Unwrap(std::move(r)));
      },
      py::arg("entries"), py::arg("type"), py::arg("threads") = 0);
}

}  // namespace tensorsafe::python
