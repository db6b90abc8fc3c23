// The data checksum of the .tsafe index (FORMAT.md §2: XXH3-64, seed 0),
// for callers that must tell whether bytes equal a stored tensor's without
// writing them (incremental checkpoints, tensorsafe.dcp).
//
// Thread safety: a pure function; call it from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tensorsafe {

// Returns the XXH3-64 of `bytes`, equal to TensorInfo::data_checksum of a
// dense tensor whose data bytes are `bytes`. Never fails.
std::uint64_t DataChecksum(std::span<const std::byte> bytes);

}  // namespace tensorsafe
