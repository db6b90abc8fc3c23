// tensorsafe._native codec functions over the format table
// (tensorsafe/formats/registry.h): read, decode, encode, write and convert
// every format, .tsafe included, as TensorSets. No format is named here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/registry.h"

namespace tensorsafe::python {
namespace {

// A format by name ("auto" or "": kUnknown, detected), or InvalidArgument.
Format FormatArg(const std::string& name, const char* which) {
  if (name.empty() || name == "auto") return Format::kUnknown;
  std::optional<Format> f = ParseFormat(name);
  if (!f) Throw(InvalidArgument(std::string(which) + " format \"" + name + "\" is not one of " + FormatList()));
  return *f;
}

Format KnownFormatArg(const std::string& name) {
  const Format f = FormatArg(name, "the");
  if (f == Format::kUnknown) Throw(InvalidArgument("name a format: one of " + FormatList()));
  return f;
}

// What Python's write and encode consent to (tensorsafe.formats.write).
Consent ConsentArg(bool stringify_metadata, bool drop_metadata, bool drop_tensor_metadata, bool drop_names,
                   bool densify) {
  Consent c;
  c.stringify_metadata = stringify_metadata;
  c.drop_metadata = drop_metadata;
  c.drop_tensor_metadata = drop_tensor_metadata;
  c.drop_names = drop_names;
  c.densify = densify;
  return c;
}

// (list of TensorBuffer in the set's order, metadata JSON text or "").
py::tuple SetToPython(TensorSet&& set) {
  py::list tensors(set.tensors.size());
  for (std::size_t i = 0; i < set.tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(set.tensors[i]));
  return py::make_tuple(tensors, py::str(set.metadata_json));
}

// One row of the table as Python sees it (tensorsafe.formats.FORMATS).
py::dict RowToPython(const FormatInfo& row) {
  py::dict d;
  d["name"] = std::string(row.name);
  d["description"] = std::string(row.description);
  py::list aliases, extensions;
  for (std::string_view a : row.aliases) aliases.append(std::string(a));
  for (std::string_view e : row.extensions) extensions.append(std::string(e));
  d["aliases"] = aliases;
  d["extensions"] = extensions;
  d["readable"] = row.read_file != nullptr;
  d["writable"] = row.write_file != nullptr;
  d["encodable"] = row.encode != nullptr;
  const Capabilities& c = row.caps;
  auto md = [](Capabilities::Metadata m) {
    return m == Capabilities::Metadata::kAny ? "any" : m == Capabilities::Metadata::kStrings ? "strings" : "none";
  };
  d["file_metadata"] = md(c.file_metadata);
  d["tensor_metadata"] = md(c.tensor_metadata);
  d["names"] = c.check_names == nullptr;
  d["sparse_coo"] = c.sparse_coo;
  d["alignment"] = c.alignment;
  d["compress"] = c.compress;
  d["checksums"] = c.checksums;
  d["max_rank"] = c.max_rank;
  return d;
}

}  // namespace

void RegisterCodecs(py::module_& m) {
  m.def("formats", [] {
    py::list rows;
    for (const FormatInfo& row : AllFormats()) rows.append(RowToPython(row));
    return rows;
  });

  m.def(
      "detect_format",
      [](const std::string& path) {
        Result<Format> f = [&] {
          py::gil_scoped_release nogil;
          return DetectFormat(path);
        }();
        return std::string(FormatName(Unwrap(std::move(f))));
      },
      py::arg("path"));

  m.def(
      "read_file",
      [](const std::string& path, const std::string& format, bool pread) {
        const Format f = FormatArg(format, "the");
        Result<TensorSet> r = [&] {
          py::gil_scoped_release nogil;
          FormatReadOptions o;
          o.pread = pread;
          return ReadTensorSet(path, f, o);
        }();
        return SetToPython(Unwrap(std::move(r)));
      },
      py::arg("path"), py::arg("format") = "auto", py::arg("pread") = false);

  m.def(
      "decode",
      [](py::bytes data, const std::string& format, const std::string& name) {
        const Format f = KnownFormatArg(format);
        // The bytes are copied once into memory the tensors can share without
        // holding a Python object (whose release would need the GIL).
        std::string_view view = data;
        auto owned = std::make_shared<std::string>(view);
        Result<TensorSet> r = [&] {
          py::gil_scoped_release nogil;
          std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(owned->data()), owned->size());
          return DecodeTensorSet(bytes, owned, f, name);
        }();
        return SetToPython(Unwrap(std::move(r)));
      },
      py::arg("data"), py::arg("format"), py::arg("name") = "<bytes>");

  m.def(
      "write_file",
      [](const std::string& path, const std::string& format, const py::iterable& items,
         const std::string& metadata_json, bool sync, bool compress, std::uint32_t alignment, py::object on_overlap,
         bool stringify_metadata, bool drop_metadata, bool drop_tensor_metadata, bool drop_names, bool densify) {
        const Format f = KnownFormatArg(format);
        std::vector<Entry> entries = ParseEntries(items);
        // Before anything is written: `on_overlap()` (which may raise) when the
        // bytes of two dense entries overlap in memory (shared tensors).
        if (!on_overlap.is_none() && AnyOverlap(entries)) on_overlap();
        const Consent consent =
            ConsentArg(stringify_metadata, drop_metadata, drop_tensor_metadata, drop_names, densify);
        TensorSet set = ToTensorSet(entries, metadata_json);
        Status s;
        {
          py::gil_scoped_release nogil;
          FormatWriteOptions o;
          o.sync = sync;
          o.compress = compress;
          o.alignment = alignment;
          s = WriteTensorSet(path, std::move(set), f, o, consent);
        }
        Check(s);
      },
      py::arg("path"), py::arg("format"), py::arg("entries"), py::arg("metadata_json") = "", py::arg("sync") = true,
      py::arg("compress") = false, py::arg("alignment") = 0, py::arg("on_overlap") = py::none(),
      py::arg("stringify_metadata") = false, py::arg("drop_metadata") = false, py::arg("drop_tensor_metadata") = false,
      py::arg("drop_names") = false, py::arg("densify") = false);

  m.def(
      "encode",
      [](const std::string& format, const py::iterable& items, const std::string& metadata_json, bool compress,
         bool stringify_metadata, bool drop_metadata, bool drop_tensor_metadata, bool drop_names, bool densify) {
        const Format f = KnownFormatArg(format);
        std::vector<Entry> entries = ParseEntries(items);
        const Consent consent =
            ConsentArg(stringify_metadata, drop_metadata, drop_tensor_metadata, drop_names, densify);
        TensorSet set = ToTensorSet(entries, metadata_json);
        Result<std::string> r = [&] {
          py::gil_scoped_release nogil;
          FormatWriteOptions o;
          o.compress = compress;
          return EncodeTensorSet(set, f, o, consent);
        }();
        return py::bytes(Unwrap(std::move(r)));
      },
      py::arg("format"), py::arg("entries"), py::arg("metadata_json") = "", py::arg("compress") = false,
      py::arg("stringify_metadata") = false, py::arg("drop_metadata") = false, py::arg("drop_tensor_metadata") = false,
      py::arg("drop_names") = false, py::arg("densify") = false);

  // tensorsafe.convert: the C++ Convert() (convert.h), as `tensorsafe convert`
  // runs it, so both write the same bytes and refuse the same things.
  m.def(
      "convert",
      [](const std::string& src, const std::string& dst, const std::string& dst_format, const std::string& src_format,
         std::vector<std::string> tensors, bool stringify_metadata, bool drop_metadata, bool drop_tensor_metadata,
         bool drop_names, bool densify, std::uint32_t alignment, bool compress, bool verify, bool sync,
         py::object progress, const std::string& dtype, std::vector<std::string> gguf_kv, std::uint64_t max_shard_size,
         std::vector<std::string> discard_names) {
        ConvertOptions o;
        o.max_shard_size = max_shard_size;  // sharded output (docs/SHARDED.md)
        if (!dtype.empty()) {
          std::optional<DType> d = ParseDType(dtype);
          if (!d || (*d != DType::kF32 && *d != DType::kF16 && *d != DType::kBF16)) {
            Throw(InvalidArgument("dtype \"" + dtype + "\": expected f32, f16 or bf16"));
          }
          o.dtype = *d;
        }
        o.gguf_kv = std::move(gguf_kv);
        o.from = FormatArg(src_format, "source");
        o.to = FormatArg(dst_format, "destination");
        o.tensors = std::move(tensors);
        o.discard_names = std::move(discard_names);
        static_cast<Consent&>(o) =
            ConsentArg(stringify_metadata, drop_metadata, drop_tensor_metadata, drop_names, densify);
        o.alignment = alignment;
        o.compress = compress;
        o.verify = verify;
        o.sync = sync;
        // The callback runs without the GIL (on this thread or the writer's
        // background one): it takes it back. An exception from it is kept and
        // raised once Convert has returned.
        std::optional<py::error_already_set> callback_error;
        if (!progress.is_none()) {
          o.progress = [&](const ConvertProgress& p) {
            py::gil_scoped_acquire gil;
            if (callback_error) return;
            try {
              py::dict d;
              d["bytes_written"] = p.bytes_written;
              d["bytes_total"] = p.bytes_total;
              d["tensor_count"] = p.tensor_count;
              d["done"] = p.done;
              progress(d);
            } catch (py::error_already_set& e) {
              callback_error.emplace(std::move(e));
            }
          };
        }
        Result<ConvertStats> r = [&] {
          py::gil_scoped_release nogil;
          return Convert(src, dst, o);
        }();
        if (callback_error) throw std::move(*callback_error);
        ConvertStats st = Unwrap(std::move(r));
        py::dict d;
        d["from"] = std::string(FormatName(st.from));
        d["to"] = std::string(FormatName(st.to));
        d["tensor_count"] = st.tensor_count;
        d["data_bytes"] = st.data_bytes;
        d["file_size"] = st.file_size;
        d["warnings"] = st.warnings;
        return d;
      },
      py::arg("src"), py::arg("dst"), py::arg("dst_format") = "auto", py::arg("src_format") = "auto",
      py::arg("tensors") = std::vector<std::string>{}, py::arg("stringify_metadata") = false,
      py::arg("drop_metadata") = false, py::arg("drop_tensor_metadata") = false, py::arg("drop_names") = false,
      py::arg("densify") = false, py::arg("alignment") = 0, py::arg("compress") = false, py::arg("verify") = true,
      py::arg("sync") = true, py::arg("progress") = py::none(), py::arg("dtype") = "",
      py::arg("gguf_kv") = std::vector<std::string>{}, py::arg("max_shard_size") = 0,
      py::arg("discard_names") = std::vector<std::string>{});
}

}  // namespace tensorsafe::python
