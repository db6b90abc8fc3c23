// `tensorsafe convert IN OUT`: rewrites a tensor file in another format
// through Convert (convert.h; docs/CONVERT.md), with a progress bar on a
// terminal.
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "exit_codes.h"
#include "progress.h"
#include "source.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe::cli {
namespace {

struct Args {
  std::string in, out;
  std::string dtype;
  ConvertOptions options;
  bool quiet = false;
  bool no_verify = false;
  bool no_sync = false;
};

int Run(Args& a) {
  ProgressBar bar("converting", a.quiet);
  a.options.verify = !a.no_verify;
  if (!a.dtype.empty()) {
    auto d = ParseDType(a.dtype);
    if (!d || (*d != DType::kF32 && *d != DType::kF16 && *d != DType::kBF16)) {
      return Fail("convert", InvalidArgument("--dtype " + a.dtype + ": expected f32, f16 or bf16"));
    }
    a.options.dtype = *d;
  }
  a.options.sync = !a.no_sync;
  if (bar.enabled()) {
    a.options.progress = [&bar](const ConvertProgress& p) { bar.Update(p.bytes_written, p.bytes_total, p.done); };
  }
  auto stats = Convert(a.in, a.out, a.options);
  if (!stats.ok()) {
    bar.Abandon();
    return Fail("convert", stats.status());
  }
  if (!a.quiet) {
    for (const std::string& w : stats->warnings) fmt::print(stderr, "warning: {}\n", w);
    fmt::print("converted {} ({}) to {} ({}): {} tensors, {} bytes of data, {} bytes written\n", a.in,
               FormatName(stats->from), a.out, FormatName(stats->to), stats->tensor_count, stats->data_bytes,
               stats->file_size);
  }
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  ConvertOptions& o = a->options;
  sub.add_option("IN", a->in, "Input file in any supported format, or a sharded checkpoint's index or directory")
      ->required();
  sub.add_option("OUT", a->out,
                 "Output file, its format from its extension unless --to names it; or a sharded checkpoint: "
                 "a directory or NAME.safetensors.index.json / NAME.tsafe.index.json")
      ->required();
  AddFormatOption(sub, "--from", &o.from, "Read IN as this format instead of detecting it");
  AddFormatOption(sub, "--to", &o.to, "Write this format whatever OUT's extension");
  // One name per --tensor, so `--tensor w IN OUT` leaves IN and OUT alone.
  sub.add_option("--tensor", o.tensors, "Convert only this tensor (repeat for more; keeps this order)")
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub.add_option("--discard-name", o.discard_names,
                 "PyTorch to safetensors: of tensors sharing a storage, do not keep this name (safetensors' "
                 "convert.py discard_names, e.g. lm_head.weight for tied embeddings; repeat for more)")
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub.add_option("--alignment", o.alignment, "Data alignment: tsafe (default 64), gguf (general.alignment)")
      ->type_name("N");
  sub.add_option("--dtype", a->dtype,
                 "Floating tensors as f32, f16 or bf16 (rounded as torch's .to(); GGUF blocks dequantised)")
      ->type_name("DTYPE");
  sub.add_option("--gguf-kv", o.gguf_kv,
                 "gguf: set a key/value, KEY=TYPE:VALUE (repeatable), e.g. general.architecture=str:llama")
      ->type_name("KEY=TYPE:VALUE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub.add_flag("--compress", o.compress, "npz: deflate members, as np.savez_compressed does");
  sub.add_flag("--stringify-metadata", o.stringify_metadata,
               "safetensors: store non-string metadata values as their JSON text");
  sub.add_flag("--drop-metadata", o.drop_metadata,
               "Drop file metadata when the target has none (npy, npz, tenbin, btf)");
  sub.add_flag("--drop-tensor-metadata", o.drop_tensor_metadata,
               "Drop per-tensor metadata the target cannot hold (all but tsafe and zio)");
  sub.add_flag("--drop-names", o.drop_names,
               "Write tensors under their position where the target cannot hold their names (btf, tenbin)");
  sub.add_flag("--densify", o.densify,
               "Write sparse COO tensors dense where the target has no sparse layout (all but tsafe, btf)");
  sub.add_option("--max-densify-bytes", o.max_densify_bytes, "Largest dense tensor --densify builds (default 1 GiB)")
      ->type_name("N");
  sub.add_option_function<std::string>(
         "--max-shard-size",
         [&o](const std::string& text) {
           auto n = sharded::ParseSize(text);
           if (!n.ok()) throw CLI::ValidationError(n.status().message());
           o.max_shard_size = *n;
         },
         "Sharded output (OUT a directory, *.index.json, or a name without extension: created as a "
         "directory): most bytes per shard, e.g. 5GB, 200KB (default: keep a sharded input's shards, else 5GB)")
      ->type_name("SIZE");
  sub.add_flag("--no-verify", a->no_verify, "Do not check a .tsafe input's data checksums first");
  sub.add_flag("--no-sync", a->no_sync, "Do not fsync the output");
  sub.add_flag("-q,--quiet", a->quiet, "No progress bar, no summary line, no warnings");
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("convert", "Rewrite a tensor file in another format (docs/CONVERT.md)", SetupCommand);

}  // namespace tensorsafe::cli
