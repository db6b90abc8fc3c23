// Fuzz properties of the MDS and WebDataset readers (docs/formats/mds.md,
// docs/formats/wds.md): any input opens or fails with a Status, and every
// sample of a shard that opens reads or fails alone, without crashing.
#pragma once

#include <cstddef>
#include <span>

namespace tensorsafe::fuzz {

// mds::ParseIndex over the bytes.
void CheckMdsIndex(std::span<const std::byte> data);
// wds::OpenShardBytes, then Read of every sample (views checked in bounds).
void CheckWdsShard(std::span<const std::byte> data);

}  // namespace tensorsafe::fuzz
