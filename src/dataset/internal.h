// Helpers shared by the dataset sources (not public API).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/dataset/index.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset::internal {

// realpath(path), which must lie strictly inside `root_real` (itself a
// realpath): kCorruption naming `what` when a symlink leads outside,
// kIOError when it does not resolve.
Result<std::string> ContainedRealPath(const std::string& root_real, const std::string& path, std::string_view what);

// SchemaFromJson over an already parsed nlohmann::json (passed as void* to
// keep nlohmann out of this header).
Result<Schema> SchemaFromJsonNode(const void* node, std::string_view what, const IndexLimits& limits);

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};

// Size and XXH3-64 of a whole file (read with pread in large chunks).
Result<FileDigest> DigestFile(const std::string& path);

// Compresses `src` into `dst` (temp + rename) at `level`; returns the
// digest of what it wrote.
Result<FileDigest> ZstdCompressFile(const std::string& src, const std::string& dst, int level, bool sync);
// Decompresses `src` into `dst` (temp + rename), checking on the way that
// the input matches `src_expect` and the output `dst_expect` (size and
// XXH3); the output is never allowed to grow past dst_expect.bytes, so a
// hostile file cannot fill the disk. Nothing is left at `dst` on error.
Status ZstdDecompressFile(const std::string& src, const FileDigest& src_expect, const std::string& dst,
                          const FileDigest& dst_expect, std::string_view what);

}  // namespace tensorsafe::dataset::internal
