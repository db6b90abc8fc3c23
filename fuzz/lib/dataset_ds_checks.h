// Fuzz properties of the sharded dataset's parsers (docs/DATASET.md):
// index.json and the columnar .tsafe shards. Contract as fuzz_checks.h.
//
// Thread safety: CheckDatasetShard writes a per-process temp file; call the
// functions from one thread.
#pragma once

#include <cstddef>
#include <span>

namespace tensorsafe::fuzz {

// ParseIndex over the input as index.json text (small limits): no crash; the
// parsed index satisfies I1..I10 as an independent check sees them (sample
// total, unique names, hex hashes); EncodeIndex of it parses to the same
// index and is a fixed point (encode(parse(encode(x))) == encode(x)).
void CheckDatasetIndex(std::span<const std::byte> data);

// The input as a native .tsafe dataset shard, opened from memory
// (OpenBuffer, mapped) and from a file read with pread: both agree on
// success, schema, sample count and every sample's views and errors. Every
// view of every sample is in bounds (each byte is read), has the size its
// field's kind, dtype and shape imply, and Read(num_samples) is kOutOfRange.
// When VerifyData succeeds, str fields are UTF-8 and json fields parse.
// Then the same with the input's .tsafe checksums recomputed (Reseal).
void CheckDatasetShard(std::span<const std::byte> data);

}  // namespace tensorsafe::fuzz
