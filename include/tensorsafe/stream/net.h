// Small socket helpers for StreamWriter/StreamReader: listen, accept and
// connect on TCP (IPv4/IPv6 host names) and Unix stream sockets. Sockets are
// blocking, close-on-exec, TCP_NODELAY on TCP.
//
// Ownership: every returned fd belongs to the caller (close it, or wrap it in
// a UniqueFd).
//
// Thread safety: functions are independent.
#pragma once

#include <cstdint>
#include <string>

#include "tensorsafe/status.h"

namespace tensorsafe {

// Closes its fd on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 = an ephemeral port; ListenPort tells which).
// Errors: kInvalidArgument (unknown host), kIOError.
Result<UniqueFd> ListenTcp(const std::string& host, std::uint16_t port, int backlog = 16);
Result<std::uint16_t> ListenPort(int listen_fd);
Result<UniqueFd> ConnectTcp(const std::string& host, std::uint16_t port);
// Unix stream sockets at a filesystem path (ListenUnix removes a stale
// socket file first; the caller removes it when done).
Result<UniqueFd> ListenUnix(const std::string& path, int backlog = 16);
Result<UniqueFd> ConnectUnix(const std::string& path);
// Waits for one connection.
Result<UniqueFd> Accept(int listen_fd);

}  // namespace tensorsafe
