// Internal entry point of the reader, for tests (short reads through an Env).
#pragma once

#include <memory>
#include <string>

#include "io/env.h"
#include "tensorsafe/reader.h"

namespace tensorsafe::internal {

Result<std::shared_ptr<Reader>> OpenReaderWithEnv(const std::string& path,
                                                  const ReaderOptions& options, Env* env);

}  // namespace tensorsafe::internal
