// torch.distributed.checkpoint's own checkpoints, for tensorsafe.dcp's
// tools (python/tensorsafe/dcp/_default.py): the pickled `.metadata` read by
// the restricted unpickler, and each item, a torch.save archive inside a
// `.distcp` file, decoded from a mapping of that file. Nothing is unpickled
// by Python.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "buffer.h"
#include "common.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/pytorch.h"

namespace tensorsafe::python {

void RegisterDcp(py::module_& m) {
  m.def(
      "dcp_metadata_json",
      [](py::bytes data, const std::string& name) {
        std::string_view view = data;
        Result<std::string> r = [&] {
          py::gil_scoped_release nogil;
          return pytorch::DcpMetadataJson({reinterpret_cast<const std::byte*>(view.data()), view.size()}, name);
        }();
        return Unwrap(std::move(r));
      },
      py::arg("data"), py::arg("name"));

  // The torch.save archive at [offset, offset + length) of `path`: (list of
  // TensorBuffer, metadata JSON), as decode() returns; tensors view the
  // mapping. `name` names the item (a top-level tensor or value takes it).
  m.def(
      "read_torch_save",
      [](const std::string& path, std::uint64_t offset, std::uint64_t length, const std::string& name,
         bool verify_crc) {
        Result<TensorSet> r = [&]() -> Result<TensorSet> {
          py::gil_scoped_release nogil;
          TS_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> region, Env::Default()->Map(path));
          const std::span<const std::byte> all = region->bytes();
          const std::string item = path + ": item \"" + name + "\" at bytes [" + std::to_string(offset) + ", " +
                                   std::to_string(offset + length) + ")";
          if (offset > all.size() || length > all.size() - offset) {
            return Corruption(item + ": the file has " + std::to_string(all.size()) + " bytes (truncated?)");
          }
          pytorch::ReadOptions o;
          o.verify_crc = verify_crc;
          return pytorch::Decode(all.subspan(offset, length), region, item, o);
        }();
        TensorSet set = Unwrap(std::move(r));
        py::list tensors(set.tensors.size());
        for (std::size_t i = 0; i < set.tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(set.tensors[i]));
        return py::make_tuple(tensors, py::str(set.metadata_json));
      },
      py::arg("path"), py::arg("offset"), py::arg("length"), py::arg("name"), py::arg("verify_crc") = true);
}

}  // namespace tensorsafe::python
