// libFuzzer target: see fuzz/lib/fuzz_checks.h, CheckGgufQuants. Corpus:
// GGUF files of one tensor of every block type gguf-py writes, random
// blocks (some with NaN scales).
#include <cstddef>
#include <cstdint>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckGgufQuants({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
