// Convert with a sharded checkpoint on either side (docs/SHARDED.md §6):
// called by Convert (write.cc) before anything else.
#pragma once

#include <string>

#include "tensorsafe/convert.h"

namespace tensorsafe::internal {

// True when `in` names a sharded checkpoint (an index or a directory), a
// shard size is given, or `out` names a sharded output (a "*.index.json", a
// directory, or a name ending in "/").
bool IsShardedConversion(const std::string& in, const std::string& out, const ConvertOptions& options);

Result<ConvertStats> ConvertSharded(const std::string& in, const std::string& out, const ConvertOptions& options);

}  // namespace tensorsafe::internal
