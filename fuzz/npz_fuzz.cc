// libFuzzer target: see fuzz/lib/fuzz_checks.h, CheckNpz.
#include <cstddef>
#include <cstdint>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckNpz({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
