// Server processes for tests (nginx, moto_server): spawned on free 127.0.0.1
// ports with their output in a log file, killed with the test process
// (PR_SET_PDEATHSIG) if it dies first, and stopped by the test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tensorsafe::testing {

// A free loopback TCP port (bound and released; servers set SO_REUSEADDR).
int FreeLoopbackPort();

// Whether something accepts connections on 127.0.0.1:port.
bool CanConnect(int port);

// Forks and execs argv[0] with `argv`, its stdout and stderr appended to
// `log`, `env` added to this process's environment. Throws
// std::runtime_error when fork fails; a failed exec exits 127.
pid_t SpawnServer(const std::vector<std::string>& argv, const std::string& log,
                  const std::vector<std::pair<std::string, std::string>>& env = {});

// Polls until every port accepts connections (true), the child exits
// (false, and *pid becomes -1: most likely a port was taken meanwhile) or
// `timeout` passes (false; the child still runs).
bool WaitListening(pid_t* pid, const std::vector<int>& ports, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds poll);

// SIGKILL and reap; *pid becomes -1. Nothing when *pid <= 0.
void KillServer(pid_t* pid);

}  // namespace tensorsafe::testing
