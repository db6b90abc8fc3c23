// The FILE + --from options of the commands that read any tensor file
// through the format table (tensorsafe/formats/registry.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "tensorsafe/formats/registry.h"

namespace tensorsafe::cli {

// Adds an option `flag` FMT to `sub` that sets *format; FMT is a name or
// alias of the format table, checked when parsed.
void AddFormatOption(CLI::App& sub, const std::string& flag, Format* format, const std::string& help);

// Adds the required positional FILE (any tensor file, or a sharded
// checkpoint's index or directory) and `--from` FMT, which reads it as that
// format instead of detecting it.
void AddFileOptions(CLI::App& sub, std::string* path, Format* from);

}  // namespace tensorsafe::cli
