#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tensorsafe/stream/net.h"

namespace tensorsafe {
namespace {

Status Errno(const std::string& what) { return IOError(what + ": " + std::strerror(errno), errno); }

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// getaddrinfo for host:port; `passive` for listening.
Result<UniqueFd> TcpSocket(const std::string& host, std::uint16_t port, bool listen, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = listen ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("cannot resolve " + host + ":" + p + ": " + ::gai_strerror(rc));
  Status last = IOError("no address for " + host, EADDRNOTAVAIL);
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      last = Errno("socket");
      continue;
    }
    if (listen) {
      int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
        last = Errno("listen on " + host + ":" + p);
        continue;
      }
    } else {
      int r;
      do r = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      while (r != 0 && errno == EINTR);
      if (r != 0) {
        last = Errno("connect to " + host + ":" + p);
        continue;
      }
      NoDelay(fd.get());
    }
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) {
    return InvalidArgument("unix socket path \"" + path + "\" is empty or longer than " +
                           std::to_string(sizeof a.sun_path - 1) + " bytes");
  }
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> ListenTcp(const std::string& host, std::uint16_t port, int backlog) {
  return TcpSocket(host, port, true, backlog);
}

Result<std::uint16_t> ListenPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return Errno("getsockname");
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return InvalidArgument("not a TCP socket");
}

Result<UniqueFd> ConnectTcp(const std::string& host, std::uint16_t port) { return TcpSocket(host, port, false, 0); }

Result<UniqueFd> ListenUnix(const std::string& path, int backlog) {
  TS_ASSIGN_OR_RETURN(sockaddr_un a, UnixAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Errno("socket");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd.get(), backlog) != 0) {
    return Errno("listen on " + path);
  }
  return fd;
}

Result<UniqueFd> ConnectUnix(const std::string& path) {
  TS_ASSIGN_OR_RETURN(sockaddr_un a, UnixAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Errno("socket");
  int r;
  do r = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  while (r != 0 && errno == EINTR);
  if (r != 0) return Errno("connect to " + path);
  return fd;
}

Result<UniqueFd> Accept(int listen_fd) {
  int fd;
  do fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return Errno("accept");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family != AF_UNIX) NoDelay(fd);
  return UniqueFd(fd);
}

}  // namespace tensorsafe
