// libFuzzer target: see fuzz/lib/dataset_checks.h, CheckRemoteName.
#include <cstddef>
#include <cstdint>

#include "dataset_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckRemoteName({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
