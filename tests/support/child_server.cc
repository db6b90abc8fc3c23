#include "support/child_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tensorsafe::testing {

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind 127.0.0.1:0 failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool CanConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

pid_t SpawnServer(const std::vector<std::string>& argv, const std::string& log,
                  const std::vector<std::pair<std::string, std::string>>& env) {
  // Everything the child needs is built before fork: the test process may
  // have threads, so the child only makes async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> extra;
  for (const auto& [k, v] : env) extra.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const auto& [k, v] : env) {
      replaced |= std::strncmp(*e, k.c_str(), k.size()) == 0 && (*e)[k.size()] == '=';
    }
    if (!replaced) envp.push_back(*e);
  }
  for (std::string& e : extra) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

bool WaitListening(pid_t* pid, const std::vector<int>& ports, std::chrono::milliseconds timeout,
                   std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (::waitpid(*pid, &st, WNOHANG) == *pid) {
      *pid = -1;
      return false;
    }
    bool all = true;
    for (int port : ports) all = all && CanConnect(port);
    if (all) return true;
    std::this_thread::sleep_for(poll);
  }
  return false;
}

void KillServer(pid_t* pid) {
  if (*pid <= 0) return;
  ::kill(*pid, SIGKILL);
  int st = 0;
  ::waitpid(*pid, &st, 0);
  *pid = -1;
}

}  // namespace tensorsafe::testing
