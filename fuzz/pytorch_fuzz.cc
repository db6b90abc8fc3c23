// libFuzzer target: see fuzz/lib/fuzz_checks.h, CheckPytorch.
#include <cstddef>
#include <cstdint>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckPytorch({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
