// A real S3 server for tests: moto's `moto_server` (PyPI moto[server],
// pinned in requirements-dev.txt) on a free 127.0.0.1 port, in the
// foreground, its log in a temp directory. Found at $TS_MOTO_SERVER, else
// <source>/.venv/bin/moto_server, else on PATH; tests skip without it.
// It dies with the test process (PR_SET_PDEATHSIG) and is killed by the
// destructor.
//
// moto keeps no request log of its own, but its HTTP server (werkzeug)
// writes one line per request to stderr after answering: CountRequests()
// reads those, so tests count requests where they arrive.
#pragma once

#include <sys/types.h>

#include <string>

namespace tensorsafe::testing {

class MotoServer {
 public:
  // The binary to run, or "" when there is none.
  static std::string Binary();
  // Throws std::runtime_error (with the server's log) when it cannot start.
  MotoServer();
  ~MotoServer();
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  // "http://127.0.0.1:<port>"
  std::string Endpoint() const;
  int port() const { return port_; }
  void Kill();  // SIGKILL, wait
  // Requests logged so far whose request line contains `part` (e.g.
  // "GET /bucket/key"); waits 100 ms first so the last line is written.
  int CountRequests(const std::string& part) const;
  // Lines logged so far (a mark for counting requests made after it).
  int LogLines() const;
  int CountRequestsSince(int mark, const std::string& part) const;

 private:
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tensorsafe::testing
