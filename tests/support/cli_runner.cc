#include "support/cli_runner.h"

#include <sys/wait.h>

#include <cstdio>

#include "support/temp_dir.h"

namespace tensorsafe::testing {

CliOutput RunShell(const std::string& command) {
  TempDir dir;
  const std::string err_path = dir.File("stderr.txt");
  CliOutput o;
  FILE* p = ::popen((command + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  const int status = ::pclose(p);
  o.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.err = ReadFileBytes(err_path);
  return o;
}

CliOutput RunCli(const std::string& cli, const std::string& args) { return RunShell(cli + " " + args); }

}  // namespace tensorsafe::testing
