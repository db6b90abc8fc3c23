#include "support/moto_server.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/child_server.h"
#include "support/temp_dir.h"

namespace tensorsafe::testing {

std::string MotoServer::Binary() {
  if (const char* p = std::getenv("TS_MOTO_SERVER"); p != nullptr && *p != '\0') return p;
  const std::string venv = std::string(TS_SOURCE_DIR) + "/.venv/bin/moto_server";
  if (::access(venv.c_str(), X_OK) == 0) return venv;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      const std::string p = dir + "/moto_server";
      if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return "";
}

MotoServer::MotoServer() {
  const std::string bin = Binary();
  if (bin.empty()) throw std::runtime_error("no moto_server");
  char tmpl[] = "/tmp/ts-moto-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  const std::string log = dir_ + "/server.log";
  for (int tries = 0; tries < 3; ++tries) {
    port_ = FreeLoopbackPort();
    // Fake credentials and region: nothing reaches AWS.
    pid_ = SpawnServer(
        {bin, "-H", "127.0.0.1", "-p", std::to_string(port_)}, log,
        {{"AWS_ACCESS_KEY_ID", "testing"}, {"AWS_SECRET_ACCESS_KEY", "testing"}, {"PYTHONUNBUFFERED", "1"}});
    // Importing moto takes a few seconds on a loaded machine.
    if (WaitListening(&pid_, {port_}, std::chrono::seconds(60), std::chrono::milliseconds(20))) return;
    Kill();
  }
  throw std::runtime_error("moto_server did not start: " + ReadFileBytes(dir_ + "/server.log"));
}

MotoServer::~MotoServer() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string MotoServer::Endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

void MotoServer::Kill() { KillServer(&pid_); }

int MotoServer::LogLines() const {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string log = ReadFileBytes(dir_ + "/server.log");
  int n = 0;
  for (char c : log) n += c == '\n';
  return n;
}

int MotoServer::CountRequestsSince(int mark, const std::string& part) const {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::ifstream in(dir_ + "/server.log");
  std::string line;
  int n = 0, i = 0;
  while (std::getline(in, line)) {
    if (i++ < mark) continue;
    // werkzeug: 127.0.0.1 - - [date] "GET /b/k HTTP/1.1" 206 -
    if (line.find("\" ") != std::string::npos && line.find(part) != std::string::npos) ++n;
  }
  return n;
}

int MotoServer::CountRequests(const std::string& part) const { return CountRequestsSince(0, part); }

}  // namespace tensorsafe::testing
