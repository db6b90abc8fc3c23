// fsspec URLs (python/tensorsafe/_fsspec.py): a UrlHandler whose Stat and
// Read call Python functions, so that every reader behind the Env seam takes
// gs://, hf://, az://, memory:// ... paths when fsspec serves them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstring>

#include "common.h"
#include "tensorsafe/objects.h"
#include "tensorsafe/url_handler.h"

namespace tensorsafe::python {
namespace {

Status FromPython(const std::string& url, py::error_already_set& e) {
  const std::string message = py::str(e.value());
  const std::string what = url + ": " + message;
  if (e.matches(PyExc_FileNotFoundError)) return NotFound(url + ": no such object (fsspec: " + message + ")");
  if (e.matches(PyExc_IsADirectoryError)) return IOError(what, EISDIR);  // a folder: sharded.h's ResolveCheckpoint
  if (e.matches(PyExc_ImportError)) return Unsupported(what);
  const std::string type = py::str(py::type::handle_of(e.value()).attr("__name__"));
  if (type == "UnsupportedError") return Unsupported(what);
  return IOError(what + " (" + type + " from fsspec)", 0);
}

class PyUrlHandler final : public UrlHandler {
 public:
  PyUrlHandler(py::object stat, py::object read, py::object list, py::object put, py::object remove)
      : stat_(std::move(stat)),
        read_(std::move(read)),
        list_(std::move(list)),
        put_(std::move(put)),
        remove_(std::move(remove)) {}
  ~PyUrlHandler() override {
    py::gil_scoped_acquire gil;
    stat_ = read_ = list_ = put_ = remove_ = py::object();
  }

  Result<Stat> StatUrl(const std::string& url) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple t = stat_(url);
      return Stat{t[0].cast<std::uint64_t>(), t[1].cast<std::string>()};
    } catch (py::error_already_set& e) {
      return FromPython(url, e);
    }
  }

  Status ReadUrl(const std::string& url, std::uint64_t offset, std::span<std::byte> out) override {
    py::gil_scoped_acquire gil;
    try {
      py::object got = read_(url, offset, out.size());
      char* data = nullptr;
      Py_ssize_t n = 0;
      if (!PyBytes_Check(got.ptr()) || PyBytes_AsStringAndSize(got.ptr(), &data, &n) != 0) {
        return Internal(url + ": the URL handler returned no bytes");
      }
      if (static_cast<std::uint64_t>(n) != out.size()) {
        return Corruption(url + ": " + std::to_string(n) + " bytes at offset " + std::to_string(offset) + ", " +
                          std::to_string(out.size()) + " asked for (the object is shorter than it said?)");
      }
      std::memcpy(out.data(), data, out.size());
      return Status::OK();
    } catch (py::error_already_set& e) {
      return FromPython(url, e);
    }
  }

  Result<std::vector<Entry>> ListUrl(const std::string& prefix) override {
    py::gil_scoped_acquire gil;
    if (list_.is_none()) return UrlHandler::ListUrl(prefix);
    try {
      std::vector<Entry> out;
      for (py::handle item : list_(prefix)) {
        if (!py::isinstance<py::tuple>(item) || py::len(item) != 3) {
          return Internal(prefix + ": the URL handler's listing is not (url, size, version) tuples");
        }
        py::tuple t = py::reinterpret_borrow<py::tuple>(item);
        out.push_back(Entry{t[0].cast<std::string>(), t[1].cast<std::uint64_t>(), t[2].cast<std::string>()});
      }
      return out;
    } catch (py::error_already_set& e) {
      return FromPython(prefix, e);
    } catch (py::cast_error& e) {
      return Internal(prefix + ": the URL handler's listing is not (url, size, version) tuples: " + e.what());
    }
  }

  Status PutUrl(const std::string& url, const std::string& path) override {
    py::gil_scoped_acquire gil;
    if (put_.is_none()) return UrlHandler::PutUrl(url, path);
    try {
      put_(url, path);
      return Status::OK();
    } catch (py::error_already_set& e) {
      return FromPython(url, e);
    }
  }

  Status RemoveUrl(const std::string& url) override {
    py::gil_scoped_acquire gil;
    if (remove_.is_none()) return UrlHandler::RemoveUrl(url);
    try {
      remove_(url);
      return Status::OK();
    } catch (py::error_already_set& e) {
      return FromPython(url, e);
    }
  }

 private:
  py::object stat_, read_, list_, put_, remove_;
};

// The value of `fn` (a Result), run without the GIL, which the fsspec
// handler takes back; raises its error.
template <typename F>
auto WithoutGil(F&& fn) {
  decltype(fn()) r = Internal("not run");
  {
    py::gil_scoped_release nogil;
    r = fn();
  }
  return Unwrap(std::move(r));
}

}  // namespace

void RegisterUrlHandler(py::module_& m) {
  m.def(
      "set_url_handler",
      [](py::object stat, py::object read, py::object list, py::object put, py::object remove) {
        if (stat.is_none()) {
          SetUrlHandler(nullptr);
        } else {
          SetUrlHandler(std::make_shared<PyUrlHandler>(std::move(stat), std::move(read), std::move(list),
                                                       std::move(put), std::move(remove)));
        }
      },
      py::arg("stat"), py::arg("read"), py::arg("list") = py::none(), py::arg("put") = py::none(),
      py::arg("remove") = py::none(),
      "Routes other URL schemes to stat(url) -> (size, version), read(url, offset, n) -> bytes and, for "
      "datasets, list(prefix) -> [(url, size, version)], put(url, local_path), remove(url); stat=None removes.");
  // Documents beside tensor files at paths or URLs (tensorsafe/objects.h):
  // tensorsafe.dcp's metadata.
  m.def(
      "publish_bytes",
      [](const std::string& path, py::bytes data, bool sync) {
        std::string_view view = data;
        py::gil_scoped_release nogil;  // `data` stays referenced by the caller's frame
        Check(PublishBytes(path, std::as_bytes(std::span<const char>(view.data(), view.size())), sync));
      },
      py::arg("path"), py::arg("data"), py::arg("sync") = true,
      "Writes `data` as `path` whole or not at all: temp + rename locally, one upload at a URL.");
  m.def(
      "read_whole",
      [](const std::string& path, std::uint64_t max_bytes) {
        return py::bytes(WithoutGil([&] { return ReadWhole(path, max_bytes); }));
      },
      py::arg("path"), py::arg("max_bytes"), "The bytes of the file or object at `path`, at most `max_bytes`.");
  m.def(
      "list_urls", [](const std::string& prefix) { return WithoutGil([&] { return ListUrls(prefix); }); },
      py::arg("prefix"), "The URLs of the objects whose URL starts with `prefix`.");
  m.def(
      "url_object_size", [](const std::string& url) { return WithoutGil([&] { return UrlObjectSize(url); }); },
      py::arg("url"), "The size of the object at `url`.");
  m.def(
      "copy_path",
      [](const std::string& from, const std::string& to, bool sync) {
        py::gil_scoped_release nogil;
        Check(CopyFile(from, to, sync));
      },
      py::arg("src"), py::arg("dst"), py::arg("sync") = true,
      "Copies a file or object whole: on the server between s3:// objects, else through a local file.");
  m.def(
      "remove_path",
      [](const std::string& path) {
        py::gil_scoped_release nogil;
        Check(Env::Default()->Remove(path));
      },
      py::arg("path"), "Removes a file or the object at a URL; nothing when there is none.");
  m.def(
      "remote_requests", [] { return RemoteRequestCount(); },
      "Requests sent for remote tensor files by this process (every retry counts).");
  m.def(
      "remote_bytes", [] { return RemoteBytesFetched(); },
      "Bytes of remote tensor files fetched by this process (a retried range counts once).");
}

}  // namespace tensorsafe::python
