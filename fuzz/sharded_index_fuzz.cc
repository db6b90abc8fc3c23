// libFuzzer target: see fuzz/lib/sharded_checks.h, CheckShardedIndex.
#include <cstddef>
#include <cstdint>

#include "sharded_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckShardedIndex({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
