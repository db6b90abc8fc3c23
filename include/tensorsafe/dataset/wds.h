// WebDataset tar shards, read as tensorsafe dataset shards
// (docs/formats/wds.md: what is accepted and refused, the grouping rule and
// how each member suffix maps to a field).
//
// A shard is a POSIX tar (ustar, GNU long names, pax path records). Members
// of one sample are adjacent and share a key: the path up to the first dot of
// the basename; the rest, lower-cased, is the field name ("x.ten",
// "meta.json"). OpenShard scans the headers once, decodes what needs decoding
// (.ten/.tb/.tenbin and .npy headers, .cls/.index/.id/... integers, .txt UTF-8)
// and keeps each sample's field views, so Read(i) is O(fields) with no parsing.
//
// The schema is the first sample's: the field "__key__" (kStr) then its
// members in tar order. Later samples must have the same members, dtypes and
// ranks; dims that differ between samples become kAnyDim. A sample that does
// not fit, or whose member cannot be decoded, is reported by Read(i) for that
// sample (the others stay readable); damage to the tar structure itself fails
// OpenShard.
//
// Thread safety: a ShardSource from OpenShard is immutable; Read() may be
// called from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/status.h"

namespace tensorsafe::wds {

struct ReadOptions {
  std::uint64_t max_members = 1u << 24;                // regular members per shard
  std::uint32_t max_path_bytes = 65536;                // GNU long name / pax path
  std::uint64_t max_extended_header_bytes = 1u << 20;  // one pax record block
  std::uint32_t max_rank = 64;                         // .npy / .ten arrays
  std::uint32_t max_arrays_per_member = 256;           // arrays in one .ten member
  std::uint32_t max_fields = 4096;                     // fields per sample
  // Add the "__key__" field (kStr) first in the schema.
  bool key_field = true;
};

// Maps `path` and opens it as a shard. The source keeps the mapping alive.
// Errors: those of the tar walk (docs/formats/wds.md, "Tar reader checks"), kIOError, kCorruption for a duplicate
// suffix in a sample (as WebDataset raises).
Result<std::unique_ptr<dataset::ShardSource>> OpenShard(const std::string& path, const ReadOptions& options = {});
// The same over bytes the caller keeps alive as long as the source lives.
Result<std::unique_ptr<dataset::ShardSource>> OpenShardBytes(std::span<const std::byte> tar,
                                                             std::shared_ptr<const void> owner,
                                                             const std::string& display_name,
                                                             const ReadOptions& options = {});

// Expands WebDataset brace patterns: "ds-{000000..000003}.tar" (zero-padded
// numeric ranges, the width of the first bound) and "{a,b}" lists, several per
// pattern. kInvalidArgument for malformed braces, kLimitExceeded above
// `max_names` results.
Result<std::vector<std::string>> ExpandBraces(std::string_view pattern, std::size_t max_names = 1u << 20);

}  // namespace tensorsafe::wds
