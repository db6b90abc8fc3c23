// The command registry and Run(): the CLI's whole program, which main.cc
// calls and the Python package runs in its own process for URLs that only
// fsspec serves (python/src/cli.cc).
#include <algorithm>
#include <cstdio>
#include <map>

#include "command.h"
#include "exit_codes.h"

#ifndef TS_VERSION
#define TS_VERSION "unknown"
#endif

namespace tensorsafe::cli {

std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}

bool RegisterCommand(std::string name, std::string description, Setup setup) {
  Registry().push_back({std::move(name), std::move(description), std::move(setup)});
  return true;
}

int Run(int argc, char** argv) {
  CLI::App app{"tensorsafe: inspect, verify, extract and convert tensor files", "tensorsafe"};
  app.set_version_flag("--version", "tensorsafe " TS_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 corruption, 2 usage, 3 not found, 4 I/O, 5 unsupported,\n"
      "6 limit exceeded, 7 invalid argument, 8 other (docs/ERRORS.md).");
  auto commands = Registry();
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> actions;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    actions[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, version or the error
    std::fflush(stdout);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  for (auto& [sub, run] : actions) {
    if (sub->parsed()) {
      const int rc = run();
      std::fflush(stdout);
      return rc;
    }
  }
  return kExitUsage;
}

}  // namespace tensorsafe::cli
