// libFuzzer target: see fuzz/lib/dataset_checks.h, CheckSamplerState.
#include <cstddef>
#include <cstdint>

#include "dataset_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckSamplerState({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
