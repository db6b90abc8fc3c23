// Limits: the resources an untrusted file can make a reader claim, shared by
// every reader (the native one and the codecs that take a Limits; others have
// their own bounds in their ReadOptions). docs/SECURITY.md lists them.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>

namespace tensorsafe {

// Every resource a file can claim is bounded here. Defaults are generous for
// real models and small enough that a hostile file cannot exhaust memory.
struct Limits {
  std::uint64_t max_index_bytes = std::uint64_t{4} << 30;      // 4 GiB of index
  std::uint64_t max_tensor_count = std::uint64_t{100} << 20;   // ~100 M tensors
  std::uint32_t max_rank = 64;                                 // spec maximum is 255
  std::uint32_t max_name_bytes = 65535;                        // spec maximum is 65535
  std::uint64_t max_metadata_bytes = std::uint64_t{64} << 20;  // each JSON text
  std::uint32_t max_json_depth = 64;                           // nesting of metadata JSON
};

}  // namespace tensorsafe
