#include "source.h"

#include <filesystem>
#include <limits>

#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"

namespace tensorsafe::cli {

Result<Source> OpenSource(const std::string& path, bool eager) {
  Source src;
  src.path = path;
  TS_ASSIGN_OR_RETURN(src.format, DetectFormat(path));
  std::error_code ec;
  src.file_size = std::filesystem::file_size(path, ec);
  switch (src.format) {
    case Format::kTsafe: {
      ReaderOptions opt;
      if (eager) opt.eager_index_bytes = std::numeric_limits<std::uint64_t>::max();
      TS_ASSIGN_OR_RETURN(src.reader, Reader::Open(path, opt));
      return src;
    }
    case Format::kNpy: {
      TS_ASSIGN_OR_RETURN(src.set, npy::ReadFile(path));
      return src;
    }
    case Format::kNpz: {
      TS_ASSIGN_OR_RETURN(src.set, npz::ReadFile(path));
      return src;
    }
    case Format::kUnknown:
      return Unsupported(path + ": unsupported format: not a tensor file tensorsafe recognises");
    default:
      return Unsupported(path + ": unsupported format: " + std::string(FormatName(src.format)) +
                         " files cannot be read yet");
  }
}

}  // namespace tensorsafe::cli
