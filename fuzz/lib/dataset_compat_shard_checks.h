// Fuzz properties of the MosaicML MDS shard reader (docs/formats/mds.md),
// beside mds_index_fuzz and wds_fuzz (dataset_compat_checks.h). Contract as
// fuzz_checks.h.
//
// Thread safety: writes a per-process temp file; call from one thread.
#pragma once

#include <cstddef>
#include <span>

namespace tensorsafe::fuzz {

// Input: [u16 LE n][n bytes of index.json][bytes of shard 0]. When the index
// parses, shard 0 is opened from the bytes twice: with the index's entry as
// is, and with its size and sample count taken from the bytes. Whatever
// opens has the index's sample count and one field per column, and every
// sample reads (or fails with kCorruption) with views that satisfy
// CheckSourceSamples, the same on a second pass. When the index says shard
// 0 is compressed, the bytes are also read as its compressed file: DecodeShard
// (src/dataset/sources/mds/codecs.cc) succeeds with exactly the index's raw size or
// fails with kCorruption naming the file, never writes past that size, does
// the same twice, and what it decodes is opened and read as above.
void CheckMdsShard(std::span<const std::byte> data);

}  // namespace tensorsafe::fuzz
