// `tensorsafe cat FILE NAME [--out PATH.npy] [--all]`: print a tensor's
// values, or extract it as an .npy file.
#include <fmt/core.h>

#include <memory>
#include <vector>

#include "command.h"
#include "exit_codes.h"
#include "source.h"
#include "tensorsafe/formats/npy.h"
#include "values.h"

namespace tensorsafe::cli {
namespace {

struct Args {
  std::string path, name, out;
  bool all = false;
  Format from = Format::kUnknown;
};

int Run(const Args& a) {
  // Checked against its checksum where the format has one (.tsafe), so cat
  // never prints damaged values.
  auto t = ReadTensor(a.path, a.from, a.name);
  if (!t.ok()) return Fail("cat", t.status());
  if (!a.out.empty()) {
    TensorSet set;
    set.tensors.push_back(*t);
    Status s = npy::WriteFile(a.out, set);
    if (!s.ok()) return Fail("cat", s.WithContext(a.out));
    fmt::print("wrote {} ({} {}, {} bytes of data)\n", a.out, DTypeName(t->info.dtype), ShapeToString(t->info.shape),
               t->info.data_length);
    return kExitOk;
  }
  fmt::print("dtype: {}\nshape: {}\n", DTypeName(t->info.dtype), ShapeToString(t->info.shape));
  const DType dt = t->info.dtype;
  if (t->info.layout == Layout::kCoo) {  // its region holds indices, then values (FORMAT.md §6.2)
    auto parts = SplitCoo(t->info, t->data);
    if (!parts.ok()) return Fail("cat", parts.status());
    fmt::print("layout: coo, nnz {}{}\nindices:\n{}\nvalues:\n{}\n", t->info.nnz,
               t->info.coalesced ? ", coalesced" : "",
               FormatTensor(DType::kI64, {t->info.nnz, t->info.shape.size()}, parts->indices, a.all),
               FormatTensor(dt, {t->info.nnz}, parts->values, a.all));
    return kExitOk;
  }
  fmt::print("{}\n", FormatTensor(dt, t->info.shape, t->data, a.all));
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  AddFileOptions(sub, &a->path, &a->from);
  sub.add_option("NAME", a->name, "Tensor name")->required();
  sub.add_option("--out", a->out, "Write the tensor to this .npy file instead of printing it");
  sub.add_flag("--all", a->all, "Print every value (default: summarise tensors over 1000 elements)");
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("cat", "Print a tensor's values, or extract it with --out x.npy", SetupCommand);

}  // namespace tensorsafe::cli
