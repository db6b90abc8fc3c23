// libFuzzer target: see fuzz/lib/fuzz_checks.h, CheckDcpMetadata.
#include <cstddef>
#include <cstdint>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckDcpMetadata({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
