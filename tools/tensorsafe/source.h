// Opens any file the CLI can read: a .tsafe through Reader (for its layout,
// lazy index and checksums), every other format through ReadTensorSet
// (convert.h) as a TensorSet of views.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "tensorsafe/formats/detect.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::cli {

struct Source {
  std::string path;
  Format format = Format::kUnknown;
  std::shared_ptr<Reader> reader;  // kTsafe
  TensorSet set;                   // every other format, and sharded checkpoints
  std::uint64_t file_size = 0;     // of a sharded checkpoint: its shards and index
  // A sharded checkpoint (docs/SHARDED.md): its index and shards; the
  // tensors are in `set` (checkpoint->set is left empty).
  std::shared_ptr<sharded::Checkpoint> checkpoint;
};

// `eager`: check the whole .tsafe index at open, and a sharded checkpoint's
// .tsafe shard checksums (verify). `format`: kUnknown detects it
// (DetectFormat). `path` may be a sharded checkpoint's index or directory.
Result<Source> OpenSource(const std::string& path, bool eager = false, Format format = Format::kUnknown);

// Adds a "--from FMT" option to `sub` that sets *format; FMT is checked
// against ParseFormat when parsed.
void AddFormatOption(CLI::App& sub, const std::string& flag, Format* format, const std::string& help);

}  // namespace tensorsafe::cli
