// Small helpers of the file layer shared across src/.
#pragma once

#include "tensorsafe/env.h"

namespace tensorsafe::internal {

// The Env an options struct names, or the default one (options' `env`
// fields are nullptr unless a caller injects one).
inline Env* EnvOr(Env* env) { return env != nullptr ? env : Env::Default(); }

}  // namespace tensorsafe::internal
