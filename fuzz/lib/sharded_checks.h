// Property checks of the sharded-checkpoint index parser (docs/SHARDED.md
// §2), behind fuzz/sharded_index_fuzz.cc. Contract as fuzz_checks.h.
#pragma once

#include <cstddef>
#include <span>

namespace tensorsafe::fuzz {

// ParseIndex of the input: an error, or an index whose shards are sorted
// and unique, whose weight map names each tensor once and only known
// shards, and whose metadata is a JSON object; its weight map written back
// as huggingface_hub writes an index (IndexText) parses to the same map.
void CheckShardedIndex(std::span<const std::byte> data);

}  // namespace tensorsafe::fuzz
