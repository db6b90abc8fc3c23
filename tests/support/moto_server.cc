#include "support/moto_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/nginx_server.h"

namespace tensorsafe::testing {
namespace {

bool Connects(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

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
  for (int tries = 0; tries < 3; ++tries) {
    port_ = FreeLoopbackPort();
    const std::string log = dir_ + "/server.log";
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      // Fake credentials and region: nothing reaches AWS.
      ::setenv("AWS_ACCESS_KEY_ID", "testing", 1);
      ::setenv("AWS_SECRET_ACCESS_KEY", "testing", 1);
      ::setenv("PYTHONUNBUFFERED", "1", 1);
      const std::string port = std::to_string(port_);
      ::execl(bin.c_str(), bin.c_str(), "-H", "127.0.0.1", "-p", port.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pid_ = pid;
    // Importing moto takes a few seconds on a loaded machine.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (Connects(port_)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Kill();
  }
  throw std::runtime_error("moto_server did not start: " + ReadLog(dir_ + "/server.log"));
}

MotoServer::~MotoServer() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string MotoServer::Endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

void MotoServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
}

int MotoServer::LogLines() const {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string log = ReadLog(dir_ + "/server.log");
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
