#include "support/nginx_server.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/child_server.h"
#include "support/temp_dir.h"

namespace tensorsafe::testing {
namespace {

std::string NginxBinary() {
  const char* env = std::getenv("TS_NGINX");
  return env != nullptr && *env != '\0' ? env : "/usr/sbin/nginx";
}

}  // namespace

NginxServer::NginxServer(std::string root, NginxOptions options)
    : root_(std::filesystem::absolute(root).string()), options_(std::move(options)) {
  if (::access(NginxBinary().c_str(), X_OK) != 0) {
    throw std::runtime_error(NginxBinary() + " not found: run scripts/install-deps.sh (Debian package nginx-light)");
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "tensorsafe-nginx-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  if (options_.tls) {
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2"
        " -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
        dir_ + "/key.pem -out " + dir_ + "/cert.pem >" + dir_ + "/openssl.log 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      const std::string log = ReadFileBytes(dir_ + "/openssl.log");
      std::filesystem::remove_all(dir_);
      throw std::runtime_error("openssl could not make a test certificate: " + log);
    }
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreeLoopbackPort();
    tls_port_ = options_.tls ? FreeLoopbackPort() : 0;
    WriteConfig();
    if (Launch()) return;
  }
  const std::string log = ReadFileBytes(dir_ + "/error.log") + ReadFileBytes(dir_ + "/stderr.log");
  std::filesystem::remove_all(dir_);
  throw std::runtime_error("nginx did not start: " + log);
}

NginxServer::~NginxServer() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string NginxServer::Url(const std::string& location) const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/" + location + "/";
}

std::string NginxServer::HttpsUrl(const std::string& location) const {
  return "https://127.0.0.1:" + std::to_string(tls_port_) + "/" + location + "/";
}

void NginxServer::WriteConfig() {
  std::ofstream c(dir_ + "/nginx.conf", std::ios::trunc);
  // master_process off: one process, no privilege drop; `user root` only
  // when we are root, where nginx would otherwise look up "nobody".
  if (::geteuid() == 0) c << "user root;\n";
  c << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
    << "pid " << dir_ << "/nginx.pid;\n"
    << "error_log " << dir_ << "/error.log warn;\n"
    << "events { worker_connections 256; }\n"
    << "http {\n"
    << "  access_log " << dir_ << "/access.log;\n"
    << "  client_body_temp_path " << dir_ << "/client_body;\n"
    << "  proxy_temp_path " << dir_ << "/proxy;\n"
    << "  fastcgi_temp_path " << dir_ << "/fastcgi;\n"
    << "  uwsgi_temp_path " << dir_ << "/uwsgi;\n"
    << "  scgi_temp_path " << dir_ << "/scgi;\n"
    << "  types { }\n  default_type application/octet-stream;\n"
    << "  keepalive_timeout 10s;\n"
    << "  server {\n"
    << "    listen 127.0.0.1:" << port_ << ";\n"
    << "    server_name localhost;\n"
    << "    location /data/ { alias " << root_ << "/; }\n"
    << "    location /slow/ { alias " << root_ << "/; limit_rate " << options_.limit_rate << "; limit_rate_after "
    << options_.limit_rate_after << "; }\n"
    << "    location /error500/ { return 500; }\n"
    << "    location /redirect/ { return 302 http://127.0.0.1:1/elsewhere; }\n"
    << "  }\n";
  if (options_.tls) {
    c << "  server {\n"
      << "    listen 127.0.0.1:" << tls_port_ << " ssl;\n"
      << "    ssl_certificate " << dir_ << "/cert.pem;\n"
      << "    ssl_certificate_key " << dir_ << "/key.pem;\n"
      << "    location /data/ { alias " << root_ << "/; }\n"
      << "  }\n";
  }
  c << "}\n";
}

bool NginxServer::Launch() {
  const std::string bin = NginxBinary();
  const std::string conf = dir_ + "/nginx.conf";
  const std::string elog = dir_ + "/error.log";
  const std::string out = dir_ + "/stderr.log";
  pid_ = SpawnServer({bin, "-p", dir_ + "/", "-c", conf, "-e", elog}, out);
  std::vector<int> ports{port_};
  if (tls_port_ != 0) ports.push_back(tls_port_);
  if (WaitListening(&pid_, ports, std::chrono::seconds(10), std::chrono::milliseconds(5))) return true;
  Kill();  // exited (most likely the port was taken meanwhile) or never listened
  return false;
}

void NginxServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  // Bounded: a server that ignores SIGTERM must not hang the test until
  // ctest's timeout; say so, so that such a run can be told apart.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int st = 0;
  while (::waitpid(pid_, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "nginx (pid %d) still running 10 s after SIGTERM: SIGKILL\n", static_cast<int>(pid_));
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

void NginxServer::Kill() { KillServer(&pid_); }

void NginxServer::Restart(NginxOptions options) {
  Stop();
  options_ = std::move(options);
  WriteConfig();
  // The port was ours a moment ago; retry briefly if the kernel still holds it.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (Launch()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("nginx did not restart on port " + std::to_string(port_) + ": " +
                           ReadFileBytes(dir_ + "/error.log"));
}

int NginxServer::WaitForRequests(const std::string& path_part, int expected) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int n = CountRequests(path_part);
  while (n < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = CountRequests(path_part);
  }
  // A grace period so that an unexpected extra request shows up too.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return CountRequests(path_part);
}

int NginxServer::CountRequests(const std::string& path_part) const {
  std::istringstream in(ReadFileBytes(dir_ + "/access.log"));
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(" " + path_part) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace tensorsafe::testing
