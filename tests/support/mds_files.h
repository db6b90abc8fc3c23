// Small zstd-compressed MDS datasets written in C++ (no mosaicml-streaming
// needed), for cache tests: one shard "shard.00000.mds(.zstd)", columns
// "s" (str) and "x" (int64), as MDSWriter lays them out (mds.md "Shard file").
#pragma once

#include <cstdint>
#include <string>

namespace tensorsafe::testing {

// Writes `dir`/index.json and `dir`/shard.00000.mds.zstd holding `samples`
// samples {x = first_x + i, s = text}. Datasets that differ only in first_x
// and in text of one length have shards of identical names and sizes.
// `with_hashes`: raw_data and zip_data carry xxh64 digests (MDSWriter's
// hashes=["xxh64"]), else none (its default). Fails the test on I/O errors.
void WriteZstdMds(const std::string& dir, std::int64_t first_x, const std::string& text, bool with_hashes,
                  std::uint32_t samples = 4);

}  // namespace tensorsafe::testing
