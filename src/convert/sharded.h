// Convert with a sharded checkpoint on either side (docs/SHARDED.md §6):
// called by Convert (convert.cc) before anything else.
#pragma once

#include <string>

#include "tensorsafe/convert.h"

namespace tensorsafe::internal {

// True when `in` names a sharded checkpoint (an index or a directory), a
// shard size is given, or `out` names a sharded output (a "*.index.json", a
// directory, or a name ending in "/").
bool IsShardedConversion(const std::string& in, const std::string& out, const ConvertOptions& options);

// True when `in` is a file of `from` at a URL that opens from its header
// (safetensors, tsafe, GGUF): ConvertSharded converts it as a checkpoint of
// one shard, fetching the bytes into scratch beside the output rather than
// downloading the whole object into memory.
bool OpensFromHeaderAtUrl(const std::string& in, Format from);

Result<ConvertStats> ConvertSharded(const std::string& in, const std::string& out, const ConvertOptions& options);

}  // namespace tensorsafe::internal
