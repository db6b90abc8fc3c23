#include "source.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <limits>

#include "tensorsafe/convert.h"

namespace tensorsafe::cli {

Result<Source> OpenSource(const std::string& path, bool eager, Format format) {
  Source src;
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
