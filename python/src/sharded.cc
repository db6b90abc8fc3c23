// tensorsafe._native.TensorSetView: any file other than .tsafe, or a sharded
// checkpoint (include/tensorsafe/formats/sharded.h), open as one lazy set:
// nothing per tensor is made in Python until asked for, so a 100,000-tensor
// checkpoint opens without 100,000 objects. Also write_sharded, the header
// parser for file objects (_safe_open_handle) and parse_size.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/detect.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe::python {
namespace {

// Sorts `v`, in O(n log r) comparisons for r ascending runs: a sharded
// checkpoint's names come as one sorted run per shard, or fewer (each
// shard's header is sorted and the shards often follow one another), and
// std::sort's n log n comparisons of names sharing long prefixes took 30 ms
// of 100,000 names' keys(). Many short runs fall back to std::sort.
void SortRuns(std::vector<std::string_view>& v) {
  std::vector<std::size_t> bounds{0};
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) {
      bounds.push_back(i);
      if (bounds.size() > 256) return std::sort(v.begin(), v.end());
    }
  }
  bounds.push_back(v.size());
  while (bounds.size() > 2) {  // merge neighbouring runs pairwise
    std::vector<std::size_t> next{0};
    for (std::size_t k = 2; k < bounds.size(); k += 2) {
      std::inplace_merge(v.begin() + static_cast<std::ptrdiff_t>(bounds[k - 2]),
                         v.begin() + static_cast<std::ptrdiff_t>(bounds[k - 1]),
                         v.begin() + static_cast<std::ptrdiff_t>(bounds[k]));
      next.push_back(bounds[k]);
    }
    if (bounds.size() % 2 == 0) next.push_back(bounds.back());  // an odd run out
    bounds = std::move(next);
  }
}

class TensorSetView {
 public:
  static std::shared_ptr<TensorSetView> Open(const std::string& path, const std::string& format) {
    auto v = std::make_shared<TensorSetView>();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = v->Load(path, format);
    }
    Check(s);
    return v;
  }

  Status Load(const std::string& path_arg, const std::string& format) {
    std::string path = path_arg;
    if (sharded::IsShardedPath(path)) {
      TS_ASSIGN_OR_RETURN(path, sharded::ResolveCheckpoint(path));
      if (sharded::IsIndexName(path)) {
        TS_ASSIGN_OR_RETURN(ck_, sharded::Open(path));
        sharded_ = true;
        path_ = path;
        return Status::OK();
      }
    }
    // One file: a checkpoint of one shard.
    path_ = path;
    Format f = Format::kUnknown;
    if (format.empty() || format == "auto") {
      TS_ASSIGN_OR_RETURN(f, DetectFormat(path));
    } else {
      std::optional<Format> parsed = ParseFormat(format);
      if (!parsed) return InvalidArgument("unknown format \"" + format + "\"");
      f = *parsed;
    }
    if (f == Format::kUnknown) return Unsupported(path + ": unrecognised file format");
    TS_ASSIGN_OR_RETURN(ck_, sharded::OpenFile(path, f));
    return Status::OK();
  }

  // Whether tensor i holds no bytes yet (a shard at a URL, opened from its
  // header: sharded::FetchData reads them).
  bool Unread(std::size_t i) const {
    const Tensor& t = ck_.set.tensors[i];
    return ck_.shards[ck_.shard_of[i]].file != nullptr && t.data.size() != t.info.data_length;
  }

  // Copies of tensors `order` with their bytes, those of shards at URLs
  // fetched; nullopt when every one has them.
  std::optional<std::vector<Tensor>> Fetched(const std::vector<std::size_t>& order) const {
    if (std::none_of(order.begin(), order.end(), [&](std::size_t i) { return Unread(i); })) return std::nullopt;
    std::vector<Tensor> out;
    std::vector<std::uint32_t> shards;
    out.reserve(order.size());
    shards.reserve(order.size());
    for (std::size_t i : order) {
      out.push_back(ck_.set.tensors[i]);
      shards.push_back(ck_.shard_of[i]);
    }
    Fetch(out, shards);
    return out;
  }

  // sharded::FetchData (runs of neighbours) with the GIL released.
  void Fetch(std::span<Tensor> tensors, std::span<const std::uint32_t> shards) const {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = sharded::FetchData(ck_.shards, shards, tensors);
    }
    Check(s);
  }

  std::size_t size() const { return ck_.set.tensors.size(); }

  // Position of `name`, or throws NotFoundError.
  std::size_t Position(const std::string& name) {
    const std::int64_t pos = Lookup(name);
    if (pos < 0) Throw(NotFound(path_ + ": no tensor named \"" + name + "\""));
    return static_cast<std::size_t>(pos);
  }

  std::int64_t Lookup(std::string_view name) {
    if (by_name_.empty() && !ck_.set.tensors.empty()) {
      by_name_.reserve(ck_.set.tensors.size() * 2);
      for (std::size_t i = 0; i < ck_.set.tensors.size(); ++i) by_name_.emplace(ck_.set.tensors[i].info.name, i);
    }
    auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : static_cast<std::int64_t>(it->second);
  }

  py::dict Info(std::size_t i) const {
    py::dict d = InfoToDict(ck_.set.tensors[i].info);
    d["shard"] = ck_.shard_of[i];
    return d;
  }

  py::object Get(std::size_t i) const {
    if (auto fetched = Fetched({i})) return MakeBuffer((*fetched)[0]);
    return MakeBuffer(ck_.set.tensors[i]);
  }

  // Rows [first, first + count) of dense tensor i (dimension 0) as a tensor
  // of its own: a slice of a tensor at a URL fetches those rows alone.
  py::object GetRows(std::size_t i, std::uint64_t first, std::uint64_t count) const {
    Tensor t = ck_.set.tensors[i];
    const std::uint64_t rows = t.info.shape.empty() ? 0 : t.info.shape[0];
    if (t.info.layout != Layout::kDense || rows == 0 || t.info.data_length % rows != 0 || first > rows ||
        count > rows - first) {
      Throw(InvalidArgument("tensor " + t.info.name + ": no rows [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") of " + std::to_string(rows) + " to read"));
    }
    const std::uint64_t row_bytes = t.info.data_length / rows;
    t.info.shape[0] = count;
    t.info.data_offset += first * row_bytes;
    t.info.data_length = count * row_bytes;
    if (Unread(i)) {
      t.data = {};
      const std::uint32_t shard[1] = {ck_.shard_of[i]};
      Fetch({&t, 1}, shard);
      return MakeBuffer(t);
    }
    t.data = t.data.subspan(static_cast<std::size_t>(first * row_bytes), static_cast<std::size_t>(count * row_bytes));
    return MakeBuffer(t);
  }
  std::uint32_t ShardOf(std::size_t i) const { return ck_.shard_of[i]; }

  // name -> ndarray / TensorBuffer for `names` (all by default, set order).
  // `cows`: per shard, a writable buffer holding the whole shard file (a
  // private copy-on-write mapping) or None; dense tensors NumPy holds then
  // become writable arrays viewing it.
  py::dict GetMany(std::optional<std::vector<std::string>> names, bool as_numpy, bool packed, py::object cows) {
    std::vector<std::size_t> order;
    if (names) {
      order.reserve(names->size());
      for (const std::string& n : *names) order.push_back(Position(n));
    } else {
      order.resize(ck_.set.tensors.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    }
    std::vector<std::optional<py::buffer_info>> cow_info(ck_.shards.size());
    std::vector<py::object> cow_obj(ck_.shards.size());
    if (!cows.is_none()) {
      py::list l = cows;
      if (l.size() != ck_.shards.size()) Throw(InvalidArgument("cows: one entry per shard"));
      for (std::size_t s = 0; s < ck_.shards.size(); ++s) {
        if (l[s].is_none()) continue;
        cow_obj[s] = l[s];
        cow_info[s].emplace(py::reinterpret_borrow<py::buffer>(l[s]).request(/*writable=*/true));
      }
    }
    const std::optional<std::vector<Tensor>> fetched = Fetched(order);
    GcPause pause;
    py::dict out;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      const Tensor& t = fetched ? (*fetched)[k] : ck_.set.tensors[i];
      py::str key(t.info.name);
      Check(CheckPythonShape(t.info.name, t.info.dtype, t.info.shape, t.info.layout));
      const auto& ci = cow_info[ck_.shard_of[i]];
      if (ci && t.info.layout == Layout::kDense && t.info.data_length != 0) {
        py::object dt = NumpyDtypeFor(t.info.dtype);
        const auto size = static_cast<std::uint64_t>(ci->size * ci->itemsize);
        if (!dt.is_none() && t.info.data_offset <= size && t.info.data_length <= size - t.info.data_offset) {
          std::vector<py::ssize_t> shape(t.info.shape.begin(), t.info.shape.end());
          out[key] = py::array(py::reinterpret_borrow<py::dtype>(dt), std::move(shape),
                               static_cast<std::byte*>(ci->ptr) + t.info.data_offset, cow_obj[ck_.shard_of[i]]);
          continue;
        }
      }
      py::object buf = MakeBuffer(t);
      out[key] = as_numpy && !ci ? ToNdarray(buf, packed) : buf;
    }
    return out;
  }

  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    out.reserve(ck_.set.tensors.size());
    for (const Tensor& t : ck_.set.tensors) out.push_back(t.info.name);
    return out;
  }

  // Names sorted (byte order, as Python sorts str of UTF-8), made into a
  // list here: sorting 100,000 str in Python cost more than the open.
  py::list SortedNames() const {
    std::vector<std::string_view> names;
    names.reserve(ck_.set.tensors.size());
    // Open proved that a weight map names exactly these tensors, and
    // transformers writes it sorted: then no merge is needed.
    if (sharded_ && ck_.index.names_sorted) {
      for (const auto& [name, shard] : ck_.index.weight_map) names.push_back(name);
      return NamesList(names);
    }
    for (const Tensor& t : ck_.set.tensors) names.emplace_back(t.info.name);
    {
      py::gil_scoped_release nogil;
      SortRuns(names);
    }
    return NamesList(names);
  }

  // CPython's decoder already makes ASCII names (most are) as compact
  // strings without decoding them: copying them ourselves showed no gain on
  // 100,000 names.
  static PyObject* NameStr(std::string_view name) {
    return PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "surrogateescape");
  }

  static py::list NamesList(const std::vector<std::string_view>& names) {
    py::list out(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      PyObject* o = NameStr(names[i]);
      if (o == nullptr) throw py::error_already_set();
      PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), o);
    }
    return out;
  }

  // Names by (shard, data offset), ties in set order.
  std::vector<std::string> OffsetNames() const {
    std::vector<std::size_t> order(ck_.set.tensors.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (ck_.shard_of[a] != ck_.shard_of[b]) return ck_.shard_of[a] < ck_.shard_of[b];
      return ck_.set.tensors[a].info.data_offset < ck_.set.tensors[b].info.data_offset;
    });
    std::vector<std::string> out;
    out.reserve(order.size());
    for (std::size_t i : order) out.push_back(ck_.set.tensors[i].info.name);
    return out;
  }

  py::list Shards() const {
    py::list out;
    for (const sharded::ShardInfo& s : ck_.shards) {
      py::dict d;
      d["name"] = s.name;
      d["path"] = s.path;
      d["file_size"] = s.file_size;
      d["tensor_count"] = s.tensor_count;
      d["metadata"] = s.metadata_json;
      out.append(d);
    }
    return out;
  }

  void Verify() const {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = sharded::Verify(ck_);
    }
    Check(s);
  }

  const TensorSet& set() const { return ck_.set; }
  const sharded::Checkpoint& checkpoint() const { return ck_; }
  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }
  Format format() const { return ck_.index.format; }
  const std::string& index_metadata() const { return ck_.index.metadata_json; }
  const std::vector<std::string>& conflicts() const { return ck_.metadata_conflicts; }

 private:
  std::string path_;
  bool sharded_ = false;
  sharded::Checkpoint ck_;
  std::unordered_map<std::string_view, std::size_t> by_name_;
};

using ViewPtr = std::shared_ptr<TensorSetView>;

}  // namespace

void RegisterSharded(py::module_& m) {
  py::class_<TensorSetView, ViewPtr>(m, "TensorSetView",
                                     "A file of any format but .tsafe, or a sharded checkpoint, open lazily.")
      .def_static("open", &TensorSetView::Open, py::arg("path"), py::arg("format") = "auto")
      .def_property_readonly("path", &TensorSetView::path)
      .def_property_readonly("sharded", &TensorSetView::sharded)
      .def_property_readonly("format", [](const TensorSetView& v) { return std::string(FormatName(v.format())); })
      .def("__len__", &TensorSetView::size)
      .def("names", &TensorSetView::Names)
      .def("sorted_names", &TensorSetView::SortedNames)
      .def("offset_names", &TensorSetView::OffsetNames)
      .def("metadata", [](const TensorSetView& v) { return v.set().metadata_json; })
      .def("index_metadata", &TensorSetView::index_metadata)
      .def("metadata_conflicts", &TensorSetView::conflicts)
      .def("shards", &TensorSetView::Shards)
      .def("contains", [](TensorSetView& v, const std::string& name) { return v.Lookup(name) >= 0; })
      .def("shard_of", [](TensorSetView& v, const std::string& name) { return v.ShardOf(v.Position(name)); })
      .def("find", [](TensorSetView& v, const std::string& name) { return v.Info(v.Position(name)); })
      .def("get", [](TensorSetView& v, const std::string& name) { return v.Get(v.Position(name)); })
      .def(
          "get_rows",
          [](TensorSetView& v, const std::string& name, std::uint64_t first, std::uint64_t count) {
            return v.GetRows(v.Position(name), first, count);
          },
          py::arg("name"), py::arg("first"), py::arg("count"))
      .def("get_many", &TensorSetView::GetMany, py::arg("names") = py::none(), py::arg("numpy") = true,
           py::arg("packed") = false, py::arg("cows") = py::none())
      .def("infos",
           [](const TensorSetView& v) {
             GcPause pause;
             py::list out;
             for (std::size_t i = 0; i < v.size(); ++i) out.append(v.Info(i));
             return out;
           })
      .def("verify", &TensorSetView::Verify)
      .def(
          "read_into",
          [](TensorSetView& v, const std::vector<std::string>& names, const std::vector<std::uintptr_t>& addresses,
             unsigned threads) {
            // Fills memory the caller allocated (exactly each tensor's bytes),
            // e.g. fresh torch tensors: positional reads, the GIL released.
            if (names.size() != addresses.size()) Throw(InvalidArgument("read_into: one address per name"));
            std::vector<std::size_t> positions;
            std::vector<std::span<std::byte>> outs;
            for (std::size_t i = 0; i < names.size(); ++i) {
              const std::size_t pos = v.Position(names[i]);
              positions.push_back(pos);
              const std::uint64_t n = v.set().tensors[pos].info.data_length;
              if (n != 0 && addresses[i] == 0)
                Throw(InvalidArgument("read_into: null address for \"" + names[i] + "\""));
              outs.emplace_back(reinterpret_cast<std::byte*>(addresses[i]), static_cast<std::size_t>(n));
            }
            Status s;
            {
              py::gil_scoped_release nogil;
              s = sharded::ReadTensors(v.checkpoint(), positions, outs, threads);
            }
            Check(s);
          },
          py::arg("names"), py::arg("addresses"), py::arg("threads") = 0);

  m.def(
      "parse_safetensors_header",
      [](py::bytes prefix, std::uint64_t file_size, const std::string& name) {
        std::string_view view = prefix;
        Result<safetensors::Header> h = [&] {
          py::gil_scoped_release nogil;
          return safetensors::ParseHeader(std::as_bytes(std::span<const char>(view.data(), view.size())), file_size);
        }();
        if (!h.ok()) Throw(name.empty() ? h.status() : h.status().WithContext(name));
        GcPause pause;
        py::list infos;
        for (const TensorInfo& i : h->tensors) infos.append(InfoToDict(i));
        return py::make_tuple(infos, py::str(h->metadata_json), h->data_start);
      },
      py::arg("prefix"), py::arg("file_size"), py::arg("name") = "",
      "Parses a safetensors header: (infos in data order, metadata JSON or \"\", data start).");

  m.def(
      "is_sharded_path", [](const std::string& path) { return sharded::IsShardedPath(path); }, py::arg("path"),
      "Whether `path` names a sharded checkpoint: a directory or a \"*.index.json\" (a URL: also one that may be "
      "a folder).");
  m.def(
      "resolve_checkpoint",
      [](const std::string& path) {
        Result<std::string> r = [&] {
          py::gil_scoped_release nogil;  // a URL costs requests
          return sharded::ResolveCheckpoint(path);
        }();
        return Unwrap(std::move(r));
      },
      py::arg("path"), "The index or tensor file a checkpoint directory, or a URL of one, stands for.");

  m.def(
      "parse_size", [](const std::string& text) { return Unwrap(sharded::ParseSize(text)); }, py::arg("text"));

  m.def(
      "write_sharded",
      [](const std::string& dir, const py::iterable& items, py::object storages, const std::string& format,
         const std::string& pattern, std::uint64_t max_shard_size, const std::string& shard_metadata,
         const std::string& single_metadata, const std::string& index_metadata, bool always_index, bool sync,
         std::uint32_t alignment) {
        std::vector<Entry> entries = ParseEntries(items);
        sharded::WriteOptions o;
        std::optional<Format> f = ParseFormat(format);
        if (!f) Throw(InvalidArgument("unknown format \"" + format + "\""));
        o.format = *f;
        o.filename_pattern = pattern;
        o.max_shard_size = max_shard_size;
        o.shard_metadata_json = shard_metadata;
        o.single_metadata_json = single_metadata;
        o.index_metadata_json = index_metadata;
        o.always_index = always_index;
        o.sync = sync;
        o.alignment = alignment;
        std::vector<sharded::Storage> st;
        if (!storages.is_none()) {
          for (py::handle h : storages) {
            py::tuple t = py::reinterpret_borrow<py::tuple>(h);
            sharded::Storage s;
            if (!t[0].is_none()) {
              s.has_id = true;
              s.id = t[0].cast<std::uint64_t>();
            }
            s.size = t[1].cast<std::uint64_t>();
            st.push_back(s);
          }
        }
        // Each shard goes through the format table's checks (a sparse tensor
        // into safetensors shards is refused there, naming it).
        TensorSet set = ToTensorSet(entries, "");
        Result<sharded::WriteStats> r = [&] {
          py::gil_scoped_release nogil;
          return sharded::WriteSharded(dir, set, o, st);
        }();
        sharded::WriteStats stats = Unwrap(std::move(r));
        py::dict d;
        d["files"] = stats.files;
        d["index"] = stats.index_path;
        d["total_size"] = stats.total_size;
        return d;
      },
      py::arg("dir"), py::arg("entries"), py::arg("storages") = py::none(), py::arg("format") = "safetensors",
      py::arg("pattern") = "", py::arg("max_shard_size") = sharded::kDefaultMaxShardSize,
      py::arg("shard_metadata") = "", py::arg("single_metadata") = "", py::arg("index_metadata") = "",
      py::arg("always_index") = false, py::arg("sync") = true, py::arg("alignment") = 0);
}

}  // namespace tensorsafe::python
