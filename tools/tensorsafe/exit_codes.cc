#include "exit_codes.h"

#include <fmt/core.h>

#include <cstdio>

namespace tensorsafe::cli {

int ExitCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kCorruption: return kExitCorruption;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kIOError: return kExitIO;
    case StatusCode::kUnsupported: return kExitUnsupported;
    case StatusCode::kLimitExceeded: return kExitLimit;
    case StatusCode::kInvalidArgument: return kExitInvalidArgument;
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal: return kExitOther;
  }
  return kExitOther;
}

int Fail(std::string_view command, const Status& status) {
  std::fflush(stdout);
  fmt::print(stderr, "tensorsafe {}: {}\n", command, status.ToString());
  return ExitCodeFor(status.code());
}

}  // namespace tensorsafe::cli
