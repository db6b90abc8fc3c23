#include "remote/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

namespace tensorsafe::internal::s3 {
namespace {

std::string Trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

using Ini = std::map<std::string, std::map<std::string, std::string>>;

// The AWS shared files: "[section]" lines, "key = value" lines, '#' and ';'
// comments. Nested (indented) sub-settings such as "s3 =\n  addressing_style"
// are kept as plain keys; we read only top-level ones.
std::optional<Ini> ReadIni(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  Ini ini;
  std::string section, line;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(std::string_view(t).substr(1, t.size() - 2));
      ini[section];
      continue;
    }
    const std::size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    ini[section][Trim(std::string_view(t).substr(0, eq))] = Trim(std::string_view(t).substr(eq + 1));
  }
  return ini;
}

std::string NonEmpty(const GetEnv& env, const char* name) {
  const char* v = env(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

bool IsS3Url(std::string_view url) {
  if (url.size() < 5) return false;
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  return lower(url[0]) == 's' && url[1] == '3' && url.substr(2, 3) == "://";
}

Result<S3Location> ParseS3Url(std::string_view url) {
  auto bad = [&](const std::string& why) { return InvalidArgument("S3 URL \"" + std::string(url) + "\": " + why); };
  if (!IsS3Url(url)) return bad("does not start with s3://");
  std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  if (loc.bucket.size() < 3 || loc.bucket.size() > 63) {
    return bad("bucket name must be 3 to 63 bytes, not " + std::to_string(loc.bucket.size()));
  }
  for (char c : loc.bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_')) {
      return bad("invalid character in bucket name \"" + loc.bucket + "\"");
    }
  }
  for (char c : loc.key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("control character in key");
  }
  if (loc.key.size() > 1024) return bad("key longer than 1024 bytes");
  return loc;
}

Result<S3Config> ResolveS3Config(const GetEnv& env) {
  S3Config cfg;
  const std::string home = NonEmpty(env, "HOME");
  const std::string profile_env = NonEmpty(env, "AWS_PROFILE");
  const std::string profile = profile_env.empty() ? "default" : profile_env;
  std::string cred_path = NonEmpty(env, "AWS_SHARED_CREDENTIALS_FILE");
  if (cred_path.empty() && !home.empty()) cred_path = home + "/.aws/credentials";
  std::string conf_path = NonEmpty(env, "AWS_CONFIG_FILE");
  if (conf_path.empty() && !home.empty()) conf_path = home + "/.aws/config";

  const std::optional<Ini> cred_ini = cred_path.empty() ? std::nullopt : ReadIni(cred_path);
  const std::optional<Ini> conf_ini = conf_path.empty() ? std::nullopt : ReadIni(conf_path);
  const std::map<std::string, std::string>* cred_section = nullptr;
  const std::map<std::string, std::string>* conf_section = nullptr;
  if (cred_ini) {
    auto it = cred_ini->find(profile);
    if (it != cred_ini->end()) cred_section = &it->second;
  }
  if (conf_ini) {
    auto it = conf_ini->find(profile == "default" ? "default" : "profile " + profile);
    if (it != conf_ini->end()) conf_section = &it->second;
  }
  auto from = [](const std::map<std::string, std::string>* s, const char* k) {
    if (s == nullptr) return std::string();
    auto it = s->find(k);
    return it == s->end() ? std::string() : it->second;
  };

  // Credentials: environment first, then the profile (AWS CLI order).
  cfg.credentials.access_key_id = NonEmpty(env, "AWS_ACCESS_KEY_ID");
  cfg.credentials.secret_access_key = NonEmpty(env, "AWS_SECRET_ACCESS_KEY");
  if (!cfg.credentials.access_key_id.empty() && !cfg.credentials.secret_access_key.empty()) {
    cfg.credentials.session_token = NonEmpty(env, "AWS_SESSION_TOKEN");
    cfg.credentials_source = "environment";
  } else {
    for (auto [section, path] : {std::pair{cred_section, cred_path}, std::pair{conf_section, conf_path}}) {
      const std::string id = from(section, "aws_access_key_id");
      const std::string secret = from(section, "aws_secret_access_key");
      if (!id.empty() && !secret.empty()) {
        cfg.credentials = {id, secret, from(section, "aws_session_token")};
        cfg.credentials_source = "profile " + profile + " in " + path;
        break;
      }
    }
  }
  if (cfg.credentials_source.empty()) {
    if (!profile_env.empty() && cred_section == nullptr && conf_section == nullptr) {
      return InvalidArgument("AWS_PROFILE=" + profile + ": no such profile in " +
                             (cred_path.empty() ? std::string("(no credentials file)") : cred_path) + " or " +
                             (conf_path.empty() ? std::string("(no config file)") : conf_path));
    }
    return NotFound("no AWS credentials: looked in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and profile \"" + profile +
                    "\" of " + (cred_path.empty() ? std::string("(no HOME)") : cred_path) + " and " +
                    (conf_path.empty() ? std::string("(no HOME)") : conf_path));
  }

  for (const std::string& r : {NonEmpty(env, "AWS_REGION"), NonEmpty(env, "AWS_DEFAULT_REGION"),
                               from(conf_section, "region"), from(cred_section, "region")}) {
    if (!r.empty()) {
      cfg.region = r;
      break;
    }
  }
  for (const std::string& e : {NonEmpty(env, "AWS_ENDPOINT_URL_S3"), NonEmpty(env, "AWS_ENDPOINT_URL"),
                               from(conf_section, "endpoint_url"), NonEmpty(env, "S3_ENDPOINT_URL")}) {
    if (!e.empty()) {
      cfg.endpoint = e;
      break;
    }
  }
  if (!cfg.endpoint.empty()) {
    while (!cfg.endpoint.empty() && cfg.endpoint.back() == '/') cfg.endpoint.pop_back();
    const std::size_t sep = cfg.endpoint.find("://");
    const std::string scheme = sep == std::string::npos ? "" : cfg.endpoint.substr(0, sep);
    if ((scheme != "http" && scheme != "https") || cfg.endpoint.size() == sep + 3 ||
        cfg.endpoint.find('/', sep + 3) != std::string::npos) {
      return InvalidArgument("S3 endpoint \"" + cfg.endpoint + "\": expected http(s)://host[:port] with no path");
    }
    cfg.path_style = true;
  }
  return cfg;
}

Result<S3Config> S3ConfigFromEnvironment() {
  return ResolveS3Config([](const char* name) { return std::getenv(name); });
}

}  // namespace tensorsafe::internal::s3
