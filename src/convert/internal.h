// Convert's steps shared by its single-file and sharded paths.
#pragma once

#include <string>

#include "tensorsafe/convert.h"

namespace tensorsafe::internal {

// Writes `set` (read, selected and verified) to `out_path` as Convert does:
// typed key/value edits, the dtype cast, the target's checks and writer
// with progress, its warnings. options.from and options.to are known.
Result<ConvertStats> ConvertSet(TensorSet set, const std::string& out_path, const ConvertOptions& options);

}  // namespace tensorsafe::internal
