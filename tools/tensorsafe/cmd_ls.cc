// `tensorsafe ls FILE`: one line per tensor in file order. For .tsafe it
// streams the index twice (widths, then lines) so memory does not grow with
// the tensor count.
#include <fmt/core.h>

#include <algorithm>

#include "command.h"
#include "exit_codes.h"
#include "source.h"

namespace tensorsafe::cli {
namespace {

struct Widths {
  std::size_t name = 4, dtype = 5, shape = 5;
  void Add(const TensorInfo& t) {
    name = std::max(name, t.name.size());
    dtype = std::max(dtype, DTypeName(t.dtype).size());
    shape = std::max(shape, ShapeToString(t.shape).size());
  }
};

void Line(const Widths& w, const TensorInfo& t) {
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>12}\n", t.name, w.name, DTypeName(t.dtype), w.dtype,
             ShapeToString(t.shape), w.shape, t.data_length);
}

void Header(const Widths& w) {
  fmt::print("{:<{}}  {:<{}}  {:<{}}  {:>12}\n", "NAME", w.name, "DTYPE", w.dtype, "SHAPE", w.shape, "NBYTES");
}

int Run(const std::string& path, Format from) {
  auto src = OpenSource(path, false, from);
  if (!src.ok()) return Fail("ls", src.status());
  Widths w;
  if (src->reader) {
    Status s = src->reader->ForEach([&](const TensorInfo& t) { w.Add(t); return true; });
    if (!s.ok()) return Fail("ls", s);
    Header(w);
    s = src->reader->ForEach([&](const TensorInfo& t) { Line(w, t); return true; });
    if (!s.ok()) return Fail("ls", s);
    return kExitOk;
  }
  for (const Tensor& t : src->set.tensors) w.Add(t.info);
  Header(w);
  for (const Tensor& t : src->set.tensors) Line(w, t.info);
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto from = std::make_shared<Format>(Format::kUnknown);
  sub.add_option("FILE", *path, "Tensor file in any supported format, or a sharded checkpoint's index or directory")
      ->required();
  AddFormatOption(sub, "--from", from.get(), "Read FILE as this format instead of detecting it");
  return [path, from] { return Run(*path, *from); };
}

}  // namespace

TS_REGISTER_COMMAND("ls", "List tensors: name, dtype, shape, bytes", SetupCommand);

}  // namespace tensorsafe::cli
