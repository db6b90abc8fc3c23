// The CLI's command registry. Each command lives in its own cmd_<name>.cc and
// registers itself with TS_REGISTER_COMMAND, so adding a command never edits
// run.cc. Commands use only the public API in include/ (STYLE.md).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace tensorsafe::cli {

// Declares the subcommand's arguments on `sub` and returns the action to run
// when it is chosen; the action returns the process exit code (exit_codes.h).
using Setup = std::function<std::function<int()>(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string description;
  Setup setup;
};

// Commands in registration order; Run sorts them by name.
std::vector<Command>& Registry();
bool RegisterCommand(std::string name, std::string description, Setup setup);

// The CLI on argv[1..argc) (argv[0] the program's name): parses, runs the
// chosen command, flushes stdout and returns the exit code (exit_codes.h).
int Run(int argc, char** argv);

}  // namespace tensorsafe::cli

#define TS_CLI_CONCAT_INNER_(a, b) a##b
#define TS_CLI_CONCAT_(a, b) TS_CLI_CONCAT_INNER_(a, b)
#define TS_REGISTER_COMMAND(name, description, setup)                  \
  static const bool TS_CLI_CONCAT_(ts_registered_command_, __LINE__) = \
      ::tensorsafe::cli::RegisterCommand(name, description, setup)
