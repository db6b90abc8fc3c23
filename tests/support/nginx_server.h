// A real nginx (Debian's /usr/sbin/nginx, or $TS_NGINX) for the remote-shard
// tests: a foreground, single-process server with everything (config, pid,
// logs, temp paths) in its own temp directory, on a free 127.0.0.1 port. It
// dies with the test process (PR_SET_PDEATHSIG) and is stopped by the
// destructor, so a failing test never leaves it running.
//
// URLs it serves, all from `root`:
//   /data/<f>      at full speed
//   /slow/<f>      at `limit_rate` bytes/s after the first `limit_rate_after`
//   /error500/<f>  always HTTP 500
//   /redirect/<f>  HTTP 302 to another port
#pragma once

#include <sys/types.h>

#include <string>

namespace tensorsafe::testing {

struct NginxOptions {
  std::string limit_rate = "256k";
  std::string limit_rate_after = "0";
  // Also serve /data/ over https on tls_port(), with a self-signed
  // certificate for 127.0.0.1 made by the openssl CLI (cert_path()).
  bool tls = false;
};

class NginxServer {
 public:
  // Throws std::runtime_error (with nginx's error log) when it cannot start.
  NginxServer(std::string root, NginxOptions options = {});
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  // "http://127.0.0.1:<port>/<location>/".
  std::string Url(const std::string& location) const;
  int port() const { return port_; }
  std::string HttpsUrl(const std::string& location) const;
  int tls_port() const { return tls_port_; }
  std::string cert_path() const { return dir_ + "/cert.pem"; }
  bool running() const { return pid_ > 0; }

  void Stop();  // SIGTERM, wait
  void Kill();  // SIGKILL, wait: connections are cut mid-transfer
  // Starts again on the same port (after Stop or Kill), possibly with other
  // options.
  void Restart(NginxOptions options);

  // Requests nginx logged whose request line contains `path_part`.
  int CountRequests(const std::string& path_part) const;
  // nginx logs a request after the client has its response: polls (up to 5 s)
  // until at least `expected` are logged, waits 50 ms more, returns the count.
  int WaitForRequests(const std::string& path_part, int expected) const;

 private:
  void WriteConfig();
  bool Launch();  // false when the port was taken
  std::string dir_;
  std::string root_;
  NginxOptions options_;
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tensorsafe::testing
