// The tar walk and WebDataset's member naming rules behind OpenShard
// (tensorsafe/dataset/wds.h), for its tests and fuzz targets.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/wds.h"

namespace tensorsafe::wds::internal {

// One regular file of a tar, as found by ScanTar.
struct Member {
  std::string path;
  std::uint64_t offset = 0;  // of its data in the tar
  std::uint64_t size = 0;
};

// Walks the tar's headers (docs/formats/wds.md, "Tar reader checks"):
// regular files in order; directories, links and devices skipped; pax 'x'
// paths and GNU 'L' long names applied to the next member. Errors:
// kCorruption (checksum, octal fields, sizes past the end, unsafe paths:
// absolute or with a ".." component; a file cut inside a header, data or
// padding, or after an extended header with no member), kUnsupported
// (sparse files, base-256 negative sizes), kLimitExceeded.
Result<std::vector<Member>> ScanTar(std::span<const std::byte> tar, const std::string& display_name,
                                    const ReadOptions& options = {});

// WebDataset's split of a member path into key and suffix (its
// `base_plus_ext`): false when the path has no such split (the member is
// skipped). The suffix is returned as stored; callers lower-case it.
bool SplitKey(std::string_view path, std::string_view* key, std::string_view* suffix);
// True for the metadata members WebDataset skips ("__*__" and "__*__/...").
bool IsMetaMember(std::string_view path);

}  // namespace tensorsafe::wds::internal
