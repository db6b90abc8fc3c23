// `tensorsafe ls FILE`: one line per tensor in file order. It walks a
// file's tensors twice (widths, then lines); for a format with an index
// (.tsafe) that streams the index, so memory does not grow with the tensor
// count. A URL is read once.
#include <fmt/core.h>

#include <algorithm>
#include <string>
#include <vector>

#include "command.h"
#include "exit_codes.h"
#include "source.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::cli {
namespace {

// The dtype and shape shown: for GGUF blocks carried as u8 (gguf.h), the
// ggml type and the logical shape.
std::pair<std::string, std::string> TypeAndShape(const TensorInfo& t) {
  if (auto q = gguf::FindQuantized(t)) return {std::string(q->type.name), ShapeToString(q->shape)};
  return {std::string(DTypeName(t.dtype)), ShapeToString(t.shape)};
}

struct Widths {
  std::size_t name = 4, dtype = 5, shape = 5;
  void Add(const TensorInfo& t) {
    const auto [type, shp] = TypeAndShape(t);
    name = std::max(name, t.name.size());
    dtype = std::max(dtype, type.size());
    shape = std::max(shape, shp.size());
  }
};

void Line(const Widths& w, const TensorInfo& t) {
  const auto [type, shp] = TypeAndShape(t);
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>12}\n", t.name, w.name, type, w.dtype, shp, w.shape, t.data_length);
}

void Header(const Widths& w) {
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>12}\n", "NAME", w.name, "DTYPE", w.dtype, "SHAPE", w.shape, "NBYTES");
}

int Run(const std::string& path, Format from) {
  Widths w;
  if (path.find("://") != std::string::npos) {
    // A URL in one pass, its infos kept: a second would fetch its headers
    // again. A file takes two, so that memory does not grow with its count.
    std::vector<TensorInfo> infos;
    Status s = ForEachTensorInfo(path, from, [&](const TensorInfo& t) {
      w.Add(t);
      infos.push_back(t);
      return true;
    });
    if (!s.ok()) return Fail("ls", s);
    Header(w);
    for (const TensorInfo& t : infos) Line(w, t);
    return kExitOk;
  }
  Status s = ForEachTensorInfo(path, from, [&](const TensorInfo& t) {
    w.Add(t);
    return true;
  });
  if (!s.ok()) return Fail("ls", s);
  Header(w);
  s = ForEachTensorInfo(path, from, [&](const TensorInfo& t) {
    Line(w, t);
    return true;
  });
  if (!s.ok()) return Fail("ls", s);
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto from = std::make_shared<Format>(Format::kUnknown);
  AddFileOptions(sub, path.get(), from.get());
  return [path, from] { return Run(*path, *from); };
}

}  // namespace

TS_REGISTER_COMMAND("ls", "List tensors: name, dtype, shape, bytes", SetupCommand);

}  // namespace tensorsafe::cli
