// tensorsafe._native codec functions: read, decode, encode and write every
// format through its codec in include/tensorsafe/formats/, and .tsafe
// through Reader/Writer, all as TensorSets (tensor_set.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/detect.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::python {
namespace {

// Options that the Python side may pass; each codec uses what it has.
struct WriteParams {
  bool sync = true;
  bool compress = false;    // npz
  std::uint32_t alignment = 64;  // tsafe
};

Result<TensorSet> ReadTsafe(const std::string& path, ReaderOptions::Access access) {
  ReaderOptions options;
  options.access = access;
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> r, Reader::Open(path, options));
  TensorSet set;
  TS_ASSIGN_OR_RETURN(std::string meta, r->Metadata());
  if (meta != "{}") set.metadata_json = std::move(meta);
  set.tensors.reserve(r->size());
  Status inner;
  Status s = r->ForEach([&](const TensorInfo& info) {
    Result<Tensor> t = r->Get(info.name);
    if (!t.ok()) {
      inner = t.status();
      return false;
    }
    set.tensors.push_back(std::move(t).value());
    return true;
  });
  TS_RETURN_IF_ERROR(s);
  TS_RETURN_IF_ERROR(inner);
  return set;
}

Result<TensorSet> ReadAny(const std::string& path, std::string format, bool pread) {
  if (format.empty() || format == "auto") {
    TS_ASSIGN_OR_RETURN(Format f, DetectFormat(path));
    if (f == Format::kUnknown) return Unsupported(path + ": unrecognised file format");
    format = std::string(FormatName(f));
  }
  if (format == "tsafe") {
    return ReadTsafe(path, pread ? ReaderOptions::Access::kPread : ReaderOptions::Access::kMmap);
  }
  if (format == "safetensors") return safetensors::ReadFile(path);
  if (format == "npy") return npy::ReadFile(path);
  if (format == "npz") return npz::ReadFile(path);
  if (format == "gguf") return gguf::ReadFile(path);
  if (format == "tenbin") return tenbin::ReadFile(path);
  if (format == "btf") return btf::ReadFile(path);
  if (format == "zio") return zio::ReadFile(path);
  return InvalidArgument("unknown format \"" + format + "\"");
}

Result<TensorSet> DecodeAny(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                            const std::string& format, const std::string& name) {
  if (format == "safetensors") return safetensors::Decode(bytes, owner, name);
  if (format == "npy") return npy::Decode(bytes, owner, name);
  if (format == "npz") return npz::Decode(bytes, owner, name);
  if (format == "gguf") return gguf::Decode(bytes, owner, name);
  if (format == "tenbin") return tenbin::Decode(bytes, owner, name);
  if (format == "btf") return btf::Decode(bytes, owner, name);
  if (format == "zio") return zio::Decode(bytes, owner, name);
  if (format == "tsafe") {
    TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> r, Reader::OpenBuffer(bytes, owner, name));
    TensorSet set;
    TS_ASSIGN_OR_RETURN(std::string meta, r->Metadata());
    if (meta != "{}") set.metadata_json = std::move(meta);
    Status inner;
    TS_RETURN_IF_ERROR(r->ForEach([&](const TensorInfo& info) {
      Result<Tensor> t = r->Get(info.name);
      if (!t.ok()) {
        inner = t.status();
        return false;
      }
      set.tensors.push_back(std::move(t).value());
      return true;
    }));
    TS_RETURN_IF_ERROR(inner);
    return set;
  }
  return InvalidArgument("unknown format \"" + format + "\"");
}

// Python entries to .tsafe, sparse COO included (a TensorSet cannot carry
// a COO tensor whose indices and values are separate buffers).
Status WriteTsafeEntries(const std::string& path, const std::vector<Entry>& entries, const std::string& metadata,
                         const WriteParams& p) {
  WriterOptions options;
  options.sync = p.sync;
  options.alignment = p.alignment;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Writer::Create(path, options));
  for (const Entry& e : entries) TS_RETURN_IF_ERROR(AddEntry(*w, e));
  if (!metadata.empty()) TS_RETURN_IF_ERROR(w->SetMetadata(metadata));
  return w->Finish();
}

Status WriteTsafe(const std::string& path, const TensorSet& set, const WriteParams& p) {
  WriterOptions options;
  options.sync = p.sync;
  options.alignment = p.alignment;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Writer> w, Writer::Create(path, options));
  for (const Tensor& t : set.tensors) {
    TensorView v = TensorView::Contiguous(t.info.dtype, t.info.shape, t.data);
    TS_RETURN_IF_ERROR(w->Add(t.info.name, v, t.info.metadata_json));
  }
  if (!set.metadata_json.empty()) TS_RETURN_IF_ERROR(w->SetMetadata(set.metadata_json));
  return w->Finish();
}

Status WriteAny(const std::string& path, const std::string& format, const TensorSet& set, const WriteParams& p) {
  if (format == "tsafe") return WriteTsafe(path, set, p);
  if (format == "safetensors") return safetensors::WriteFile(path, set, {.sync = p.sync});
  if (format == "npy") return npy::WriteFile(path, set, {.sync = p.sync});
  if (format == "npz") return npz::WriteFile(path, set, {.compress = p.compress, .sync = p.sync});
  if (format == "gguf") return gguf::WriteFile(path, set, {.sync = p.sync});
  if (format == "tenbin") return tenbin::WriteFile(path, set, {.sync = p.sync});
  if (format == "btf") return btf::WriteFile(path, set, {.sync = p.sync});
  if (format == "zio") return zio::WriteFile(path, set, {.sync = p.sync});
  return InvalidArgument("unknown format \"" + format + "\"");
}

Result<std::string> EncodeAny(const std::string& format, const TensorSet& set, const WriteParams& p) {
  if (format == "safetensors") return safetensors::Encode(set);
  if (format == "npy") {
    if (set.tensors.size() != 1) return InvalidArgument("npy holds exactly one tensor");
    return npy::Encode(set.tensors[0]);
  }
  if (format == "npz") return npz::Encode(set, {.compress = p.compress});
  if (format == "gguf") return gguf::Encode(set);
  if (format == "tenbin") return tenbin::Encode(set);
  if (format == "btf") return btf::Encode(set);
  if (format == "zio") return zio::Encode(set);
  return InvalidArgument("cannot encode format \"" + format + "\" in memory");
}

// (list of TensorBuffer in the set's order, metadata JSON text or "").
py::tuple SetToPython(TensorSet&& set) {
  py::list tensors(set.tensors.size());
  for (std::size_t i = 0; i < set.tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(set.tensors[i]));
  return py::make_tuple(tensors, py::str(set.metadata_json));
}

}  // namespace

void RegisterCodecs(py::module_& m) {
  m.def("detect_format", [](const std::string& path) {
    Result<Format> f = [&] {
      py::gil_scoped_release nogil;
      return DetectFormat(path);
    }();
    return std::string(FormatName(Unwrap(std::move(f))));
  }, py::arg("path"));

  m.def("read_file", [](const std::string& path, const std::string& format, bool pread) {
    Result<TensorSet> r = [&] {
      py::gil_scoped_release nogil;
      return ReadAny(path, format, pread);
    }();
    return SetToPython(Unwrap(std::move(r)));
  }, py::arg("path"), py::arg("format") = "auto", py::arg("pread") = false);

  m.def("decode", [](py::bytes data, const std::string& format, const std::string& name) {
    // The bytes are copied once into memory the tensors can share without
    // holding a Python object (whose release would need the GIL).
    std::string_view view = data;
    auto owned = std::make_shared<std::string>(view);
    Result<TensorSet> r = [&] {
      py::gil_scoped_release nogil;
      std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(owned->data()), owned->size());
      return DecodeAny(bytes, owned, format, name);
    }();
    return SetToPython(Unwrap(std::move(r)));
  }, py::arg("data"), py::arg("format"), py::arg("name") = "<bytes>");

  m.def("write_file", [](const std::string& path, const std::string& format, const py::iterable& items,
                         const std::string& metadata_json, bool sync, bool compress, std::uint32_t alignment,
                         py::object on_overlap) {
    std::vector<Entry> entries = ParseEntries(items);
    Check(RefuseSparse(entries, format));
    // Before anything is written: `on_overlap()` (which may raise) when the
    // bytes of two dense entries overlap in memory (shared tensors).
    if (!on_overlap.is_none() && AnyOverlap(entries)) on_overlap();
    WriteParams p{sync, compress, alignment};
    Status s;
    if (format == "tsafe") {
      py::gil_scoped_release nogil;
      s = WriteTsafeEntries(path, entries, metadata_json, p);
    } else {
      TensorSet set = ToTensorSet(entries, metadata_json);
      py::gil_scoped_release nogil;
      s = WriteAny(path, format, set, p);
    }
    Check(s);
  }, py::arg("path"), py::arg("format"), py::arg("entries"), py::arg("metadata_json") = "",
     py::arg("sync") = true, py::arg("compress") = false, py::arg("alignment") = 64,
     py::arg("on_overlap") = py::none());

  m.def("encode", [](const std::string& format, const py::iterable& items, const std::string& metadata_json,
                     bool compress) {
    std::vector<Entry> entries = ParseEntries(items);
    Check(RefuseSparse(entries, format));
    TensorSet set = ToTensorSet(entries, metadata_json);
    Result<std::string> r = [&] {
      py::gil_scoped_release nogil;
      return EncodeAny(format, set, WriteParams{true, compress, 64});
    }();
    return py::bytes(Unwrap(std::move(r)));
  }, py::arg("format"), py::arg("entries"), py::arg("metadata_json") = "", py::arg("compress") = false);

  // tensorsafe.convert: the C++ Convert() (convert.h), as `tensorsafe convert`
  // runs it, so both write the same bytes and refuse the same things.
  m.def("convert", [](const std::string& src, const std::string& dst, const std::string& dst_format,
                      const std::string& src_format, std::vector<std::string> tensors, bool stringify_metadata,
                      bool drop_metadata, bool drop_tensor_metadata, bool drop_names, std::uint32_t alignment,
                      bool compress, bool verify, bool sync, py::object progress, std::uint64_t max_shard_size) {
    ConvertOptions o;
    o.max_shard_size = max_shard_size;  // sharded output (docs/SHARDED.md)
    auto format = [](const std::string& name, const char* which) {
      if (name.empty() || name == "auto") return Format::kUnknown;
      std::optional<Format> f = ParseFormat(name);
      if (!f) Throw(InvalidArgument(std::string(which) + " format \"" + name + "\" is not one of tsafe, "
                                    "safetensors, npy, npz, gguf, tenbin, btf, zio"));
      return *f;
    };
    o.from = format(src_format, "source");
    o.to = format(dst_format, "destination");
    o.tensors = std::move(tensors);
    o.stringify_metadata = stringify_metadata;
    o.drop_metadata = drop_metadata;
    o.drop_tensor_metadata = drop_tensor_metadata;
    o.drop_names = drop_names;
    o.alignment = alignment;
    o.compress = compress;
    o.verify = verify;
    o.sync = sync;
    // The callback runs on this thread, without the GIL: it takes it back.
    // An exception from it is kept and raised once Convert has returned.
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
    return d;
  }, py::arg("src"), py::arg("dst"), py::arg("dst_format") = "auto", py::arg("src_format") = "auto",
     py::arg("tensors") = std::vector<std::string>{}, py::arg("stringify_metadata") = false,
     py::arg("drop_metadata") = false, py::arg("drop_tensor_metadata") = false, py::arg("drop_names") = false,
     py::arg("alignment") = 0, py::arg("compress") = false, py::arg("verify") = true, py::arg("sync") = true,
     py::arg("progress") = py::none(), py::arg("max_shard_size") = 0);
}

}  // namespace tensorsafe::python
