// libFuzzer target: see fuzz/lib/dataset_ds_checks.h, CheckDatasetShard.
#include <cstddef>
#include <cstdint>

#include "dataset_ds_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tensorsafe::fuzz::CheckDatasetShard({reinterpret_cast<const std::byte*>(data), size});
  return 0;
}
