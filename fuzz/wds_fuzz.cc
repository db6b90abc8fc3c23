// libFuzzer target: see fuzz/lib/dataset_compat_checks.h, CheckWdsShard.
#include <cstddef>
#include <cstdint>

#include "dataset_compat_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckWdsShard({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
