// `tensorsafe meta FILE` for a format with typed key/values (GGUF: its row's
// edit_metadata in the format table): the key/values with their types,
// changed with --set KEY=TYPE:VALUE and --del KEY (docs/formats/gguf.md §11).
#pragma once

#include <string>
#include <vector>

#include "tensorsafe/formats/registry.h"

namespace tensorsafe::cli {

struct TypedMetaArgs {
  std::string file;
  Format format = Format::kUnknown;
  std::vector<std::string> sets;  // KEY=TYPE:VALUE
  std::vector<std::string> dels;  // KEY
  std::string tensor;             // refused: no per-tensor key/values
  bool json = false;
  bool full = false;
};

// Applies the changes (one rewrite through a temporary file renamed over
// FILE) and prints the key/values; returns the exit code.
int RunTypedMeta(const TypedMetaArgs& a);

}  // namespace tensorsafe::cli
