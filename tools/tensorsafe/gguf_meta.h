// `tensorsafe meta FILE.gguf`: GGUF key/values with their types, changed
// with --set KEY=TYPE:VALUE and --del KEY (docs/formats/gguf.md §11).
#pragma once

#include <string>
#include <vector>

namespace tensorsafe::cli {

struct GgufMetaArgs {
  std::string file;
  std::vector<std::string> sets;  // KEY=TYPE:VALUE
  std::vector<std::string> dels;  // KEY
  std::string tensor;             // refused: GGUF has no per-tensor metadata
  bool json = false;
  bool full = false;
};

// Applies the changes (one rewrite through a temporary file renamed over
// FILE) and prints the key/values; returns the exit code.
int RunGgufMeta(const GgufMetaArgs& a);

}  // namespace tensorsafe::cli
