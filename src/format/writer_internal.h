// Internal entry points of the writer, for tests (fault injection through an
// Env) and for the updater.
#pragma once

#include <memory>
#include <string>

#include "io/env.h"
#include "tensorsafe/options.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::internal {

Result<std::unique_ptr<Writer>> CreateWriterWithEnv(const std::string& path,
                                                    const WriterOptions& options, Env* env);


}  // namespace tensorsafe::internal
