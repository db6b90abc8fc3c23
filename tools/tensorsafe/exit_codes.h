// Exit codes of the tensorsafe CLI (docs/ERRORS.md): one mapping from
// StatusCode, used by every command.
#pragma once

#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCorruption = 1;  // also: verify found damage
inline constexpr int kExitUsage = 2;       // bad command line (CLI11 parse error)
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitIO = 4;
inline constexpr int kExitUnsupported = 5;
inline constexpr int kExitLimit = 6;
inline constexpr int kExitInvalidArgument = 7;
inline constexpr int kExitOther = 8;  // out of range, failed precondition, internal

int ExitCodeFor(StatusCode code);

// Prints "tensorsafe <command>: <code name>: <message>" on stderr and returns
// ExitCodeFor(status.code()).
int Fail(std::string_view command, const Status& status);

}  // namespace tensorsafe::cli
