// `tensorsafe verify FILE`: every check the format has (VerifyFile). For
// .tsafe: the whole index at open and every data checksum; for every other
// format: a full decode with every check its reader has (npz member CRCs
// included).
#include <fmt/core.h>

#include "command.h"
#include "exit_codes.h"
#include "source.h"

namespace tensorsafe::cli {
namespace {

int Run(const std::string& path, Format from) {
  std::vector<std::string> damaged;
  if (Status s = VerifyFile(path, from, &damaged); !s.ok()) {
    const int rc = Fail("verify", s);
    if (!damaged.empty()) {
      fmt::print(stderr, "damaged tensors ({}):\n", damaged.size());
      for (const auto& n : damaged) fmt::print(stderr, "  {}\n", n);
    }
    return rc;
  }
  auto d = DescribeFile(path, from);
  if (!d.ok()) return Fail("verify", d.status());
  if (!d->shards.empty()) {
    fmt::print("ok: {} tensors, {} bytes verified in {} shards\n", d->tensor_count, d->data_bytes, d->shards.size());
    return kExitOk;
  }
  fmt::print("ok: {} tensors, {} bytes verified\n", d->tensor_count, d->data_bytes);
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto path = std::make_shared<std::string>();
  auto from = std::make_shared<Format>(Format::kUnknown);
  AddFileOptions(sub, path.get(), from.get());
  return [path, from] { return Run(*path, *from); };
}

}  // namespace

TS_REGISTER_COMMAND("verify", "Check a file completely; exit 1 on damage (docs/ERRORS.md)", SetupCommand);

}  // namespace tensorsafe::cli
