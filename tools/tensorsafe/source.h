// Opens any file the CLI can read: a .tsafe through Reader (for its layout,
// lazy index and checksums), every other format through ReadTensorSet
// (convert.h) as a TensorSet of views.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "tensorsafe/formats/detect.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::cli {

struct Source {
  std::string path;
  Format format = Format::kUnknown;
  std::shared_ptr<Reader> reader;  // kTsafe
  TensorSet set;                   // every other format
  std::uint64_t file_size = 0;
};

// `eager`: check the whole .tsafe index at open (verify). `format`:
// kUnknown detects it (DetectFormat).
Result<Source> OpenSource(const std::string& path, bool eager = false, Format format = Format::kUnknown);

// Adds a "--from FMT" option to `sub` that sets *format; FMT is checked
// against ParseFormat when parsed.
void AddFormatOption(CLI::App& sub, const std::string& flag, Format* format, const std::string& help);

}  // namespace tensorsafe::cli
