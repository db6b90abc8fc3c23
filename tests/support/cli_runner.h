// Runs a command line through /bin/sh and captures what the CLI tests check:
// stdout, stderr and the exit code (docs/ERRORS.md maps codes to exits).
#pragma once

#include <string>

namespace tensorsafe::testing {

struct CliOutput {
  std::string out, err;
  int rc = -1;  // the exit status; -1 when the shell could not run or was killed
};

// Runs `command` with `sh -c`, stdout read through a pipe and stderr sent to
// a temporary file (so a chatty stderr cannot block the child).
CliOutput RunShell(const std::string& command);

// Runs the binary at `cli` with `args` (shell words, already quoted).
CliOutput RunCli(const std::string& cli, const std::string& args);

}  // namespace tensorsafe::testing
