// libFuzzer target: see fuzz/lib/dataset_compat_shard_checks.h, CheckMdsShard.
#include <cstddef>
#include <cstdint>

#include "dataset_compat_shard_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckMdsShard({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
