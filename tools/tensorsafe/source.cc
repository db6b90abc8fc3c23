#include "source.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <limits>

#include "tensorsafe/convert.h"

namespace tensorsafe::cli {

Result<Source> OpenSource(const std::string& path_arg, bool eager, Format format) {
  Source src;
  std::string path = path_arg;
  if (sharded::IsShardedPath(path)) {
    TS_ASSIGN_OR_RETURN(path, sharded::ResolveCheckpoint(path));
    if (sharded::IsIndexName(path)) {
      TS_ASSIGN_OR_RETURN(sharded::Checkpoint ck, sharded::Open(path));
      if (eager) TS_RETURN_IF_ERROR(sharded::Verify(ck));
      src.path = path;
      src.format = ck.index.format;
      std::error_code ec;
      src.file_size = std::filesystem::file_size(path, ec);
      for (const sharded::ShardInfo& s : ck.shards) src.file_size += s.file_size;
      src.set = std::move(ck.set);
      src.checkpoint = std::make_shared<sharded::Checkpoint>(std::move(ck));
      return src;
    }
  }
  src.path = path;
  src.format = format;
  if (src.format == Format::kUnknown) {
    TS_ASSIGN_OR_RETURN(src.format, DetectFormat(path));
  }
  std::error_code ec;
  src.file_size = std::filesystem::file_size(path, ec);
  if (src.format == Format::kTsafe) {
    ReaderOptions opt;
    if (eager) opt.eager_index_bytes = std::numeric_limits<std::uint64_t>::max();
    TS_ASSIGN_OR_RETURN(src.reader, Reader::Open(path, opt));
    return src;
  }
  TS_ASSIGN_OR_RETURN(src.set, ReadTensorSet(path, src.format));
  return src;
}

void AddFormatOption(CLI::App& sub, const std::string& flag, Format* format, const std::string& help) {
  sub.add_option_function<std::string>(
         flag,
         [format](const std::string& name) {
           auto f = ParseFormat(name);
           if (!f) {
             throw CLI::ValidationError("unknown format \"" + name +
                                        "\" (tsafe, safetensors, npy, npz, gguf, tenbin, btf, zio)");
           }
           *format = *f;
         },
         help)
      ->type_name("FMT");
}

}  // namespace tensorsafe::cli
