// `tensorsafe verify FILE`: every check the format has. For .tsafe: the
// whole index at open and every data checksum; for every other format: a
// full decode with every check its reader has (npz member CRCs included).
#include <fmt/core.h>

#include "command.h"
#include "exit_codes.h"
#include "source.h"

namespace tensorsafe::cli {
namespace {

int Run(const std::string& path, Format from) {
  auto src = OpenSource(path, /*eager=*/true, from);
  if (!src.ok()) return Fail("verify", src.status());
  std::uint64_t count = 0, bytes = 0;
  if (src->reader) {
    std::vector<std::string> damaged;
    Status s = src->reader->Verify(&damaged);
    if (!s.ok()) {
      const int rc = Fail("verify", s);
      if (!damaged.empty()) {
        fmt::print(stderr, "damaged tensors ({}):\n", damaged.size());
        for (const auto& n : damaged) fmt::print(stderr, "  {}\n", n);
      }
      return rc;
    }
    const FileSummary sum = src->reader->summary();
    count = sum.tensor_count;
    bytes = sum.data_bytes;
  } else {
    count = src->set.tensors.size();
    for (const Tensor& t : src->set.tensors) bytes += t.info.data_length;
  }
  if (src->checkpoint) {
    fmt::print("ok: {} tensors, {} bytes verified in {} shards\n", count, bytes, src->checkpoint->shards.size());
    return kExitOk;
  }
  fmt::print("ok: {} tensors, {} bytes verified\n", count, bytes);
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

TS_REGISTER_COMMAND("verify", "Check a file completely; exit 1 on damage (docs/ERRORS.md)", SetupCommand);

}  // namespace tensorsafe::cli
