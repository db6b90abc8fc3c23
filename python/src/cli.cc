// run_cli: the tensorsafe CLI (tools/tensorsafe/, compiled into this module
// too) run in the Python process, so that its file seam reaches the fsspec
// handler: `tensorsafe ls hf://...` (python/tensorsafe/_cli.py decides when).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common.h"

namespace tensorsafe::cli {
// tools/tensorsafe/command.h: the CLI on argv, returning its exit code.
// Declared here, as the bindings include only the public API and their own
// headers (tests/layout/include_rule.sh).
int Run(int argc, char** argv);
}  // namespace tensorsafe::cli

namespace tensorsafe::python {

void RegisterCli(py::module_& m) {
  m.def(
      "run_cli",
      [](std::vector<std::string> args) {
        std::vector<char*> argv;
        argv.reserve(args.size() + 1);
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        py::gil_scoped_release nogil;  // the handler takes it back for each request
        return tensorsafe::cli::Run(static_cast<int>(args.size()), argv.data());
      },
      py::arg("argv"), "Runs the tensorsafe CLI on argv (argv[0] the program's name); returns its exit code.");
}

}  // namespace tensorsafe::python
