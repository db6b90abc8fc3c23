// ParseStreamUrl (include/tensorsafe/stream/url.h).
#include "tensorsafe/stream/url.h"

#include <charconv>
#include <string>

namespace tensorsafe {
namespace {

struct ZmqScheme {
  std::string_view name;
  ZmqPattern pattern;
  bool sends, binds;
};
// tensorcom's zcom.py schemes.
constexpr ZmqScheme kZmqSchemes[] = {
    {"zpush", ZmqPattern::kPushPull, true, false}, {"zpull", ZmqPattern::kPushPull, false, true},
    {"zpub", ZmqPattern::kPubSub, true, true},     {"zsub", ZmqPattern::kPubSub, false, false},
    {"zrpush", ZmqPattern::kPushPull, true, true}, {"zrpull", ZmqPattern::kPushPull, false, false},
    {"zrpub", ZmqPattern::kPubSub, true, false},   {"zrsub", ZmqPattern::kPubSub, false, true},
};

Status Bad(std::string_view url, const std::string& why) {
  return InvalidArgument("stream address \"" + std::string(url) + "\": " + why);
}

// HOST:PORT; [v6]:PORT. `star` allows "*" (ZeroMQ's ephemeral port).
Status HostPort(std::string_view url, std::string_view rest, bool star, std::string* host, std::string* port) {
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return Bad(url, "needs HOST:PORT");
  std::string_view h = rest.substr(0, colon), p = rest.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return Bad(url, "needs HOST:PORT");
  if (!(star && p == "*")) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v > 65535) {
      return Bad(url, "bad port \"" + std::string(p) + "\" (0..65535" + (star ? " or *" : "") + ")");
    }
  }
  *host = std::string(h);
  *port = std::string(p);
  return Status::OK();
}

std::string_view RoleName(StreamRole r) { return r == StreamRole::kSend ? "send" : "recv"; }

}  // namespace

Result<StreamUrl> ParseStreamUrl(std::string_view url, const StreamUrlOptions& o) {
  StreamUrl u;
  const auto need_role = [&](std::string_view what) -> Status {
    if (!o.role) return Bad(url, std::string(what) + " needs a role: send or recv (mode=)");
    u.role = *o.role;
    return Status::OK();
  };
  const auto no_pubsub = [&]() -> Status {
    if (o.pubsub) return Bad(url, "PUB/SUB is ZeroMQ only");
    return Status::OK();
  };
  const auto sep = url.find("://");
  if (url == "-") {
    TS_RETURN_IF_ERROR(need_role("-"));
    TS_RETURN_IF_ERROR(no_pubsub());
    u.transport = StreamUrl::Transport::kStdio;
    u.fd = u.role == StreamRole::kSend ? 1 : 0;
    u.canonical = "-";
    return u;
  }
  if (sep == std::string_view::npos) {
    return Bad(url,
               "expected -, fd://N, tcp-raw://HOST:PORT, unix://PATH or a ZeroMQ scheme (zpush://, zpull://, "
               "zpub://, zsub://, zr...)");
  }
  const std::string_view scheme = url.substr(0, sep), rest = url.substr(sep + 3);
  if (scheme == "fd") {
    TS_RETURN_IF_ERROR(need_role("fd://"));
    TS_RETURN_IF_ERROR(no_pubsub());
    int v = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (rest.empty() || ec != std::errc() || end != rest.data() + rest.size() || v < 0) {
      return Bad(url, "fd://N needs a descriptor number");
    }
    u.transport = StreamUrl::Transport::kFd;
    u.fd = v;
    u.canonical = std::string(url);
    return u;
  }
  if (scheme == "tcp-raw") {
    TS_RETURN_IF_ERROR(need_role("tcp-raw://"));
    TS_RETURN_IF_ERROR(no_pubsub());
    std::string port;
    TS_RETURN_IF_ERROR(HostPort(url, rest, false, &u.host, &port));
    u.port = static_cast<std::uint16_t>(std::stoul(port));
    u.transport = StreamUrl::Transport::kTcpRaw;
    u.binds = u.role == StreamRole::kRecv;
    u.canonical = std::string(url);
    return u;
  }
  if (scheme == "unix" || scheme == "unix-raw") {
    TS_RETURN_IF_ERROR(need_role(std::string(scheme) + "://"));
    TS_RETURN_IF_ERROR(no_pubsub());
    if (rest.empty()) return Bad(url, "unix://PATH needs a path");
    u.transport = StreamUrl::Transport::kUnix;
    u.path = std::string(rest);
    u.binds = u.role == StreamRole::kRecv;
    u.canonical = "unix://" + u.path;
    if (scheme == "unix-raw") u.deprecation = std::string(url) + ": unix-raw:// is deprecated: use " + u.canonical;
    return u;
  }
  // ZeroMQ: a tensorcom scheme with an optional +transport, or a bare endpoint.
  std::string_view base = scheme, transport = "tcp";
  bool bare = false;
  if (const auto plus = scheme.find('+'); plus != std::string_view::npos) {
    base = scheme.substr(0, plus);
    transport = scheme.substr(plus + 1);
  }
  const ZmqScheme* z = nullptr;
  for (const ZmqScheme& s : kZmqSchemes) {
    if (s.name == base) z = &s;
  }
  if (!z && (scheme == "tcp" || scheme == "ipc" || scheme == "inproc")) {
    bare = true;
    transport = scheme;
  } else if (!z) {
    return Bad(url, "unknown scheme \"" + std::string(scheme) +
                        "\" (-, fd, tcp-raw, unix, zpush, zpull, zpub, zsub, "
                        "zrpush, zrpull, zrpub, zrsub)");
  }
  if (transport != "tcp" && transport != "ipc" && transport != "inproc") {
    return Bad(url, "unknown ZeroMQ transport \"+" + std::string(transport) + "\" (tcp, ipc, inproc)");
  }
  u.transport = StreamUrl::Transport::kZmq;
  std::string_view addr = rest;
  if (const auto hash = addr.find('#'); hash != std::string_view::npos) {
    u.topic = std::string(addr.substr(hash + 1));
    addr = addr.substr(0, hash);
  }
  if (bare) {
    TS_RETURN_IF_ERROR(need_role("a bare ZeroMQ endpoint"));
    u.pattern = o.pubsub ? ZmqPattern::kPubSub : ZmqPattern::kPushPull;
    u.binds = u.role == StreamRole::kRecv;  // the CLI's old defaults
  } else {
    const StreamRole role = z->sends ? StreamRole::kSend : StreamRole::kRecv;
    if (o.role && *o.role != role) {
      return Bad(url, std::string(z->name) + ":// " + (z->sends ? "sends" : "receives") + "; it cannot " +
                          std::string(RoleName(*o.role)));
    }
    if (o.pubsub && z->pattern != ZmqPattern::kPubSub) {
      return Bad(url, std::string(z->name) + ":// is PUSH/PULL, not PUB/SUB (use zpub:// or zsub://)");
    }
    u.role = role;
    u.pattern = z->pattern;
    u.binds = z->binds;
  }
  if (!u.topic.empty() && !(u.pattern == ZmqPattern::kPubSub && u.role == StreamRole::kRecv)) {
    return Bad(url, "a #topic is for SUB receivers only");
  }
  if (transport == "tcp") {
    std::string host, port;
    TS_RETURN_IF_ERROR(HostPort(url, addr, true, &host, &port));
    const bool v6 = host.find(':') != std::string::npos;
    u.endpoint = "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + port;
  } else {
    if (addr.empty()) return Bad(url, std::string(transport) + " needs a " + (transport == "ipc" ? "path" : "name"));
    u.endpoint = std::string(transport) + "://" + std::string(addr);
  }
  // The current spelling: the scheme for this role, pattern and default.
  const bool sub = u.pattern == ZmqPattern::kPubSub;
  const bool sends = u.role == StreamRole::kSend;
  std::string name = sends ? (sub ? "zpub" : "zpush") : (sub ? "zsub" : "zpull");
  for (const ZmqScheme& s : kZmqSchemes) {
    if (s.sends == sends && s.pattern == u.pattern && s.binds == u.binds) name = std::string(s.name);
  }
  u.canonical = name + (transport == "tcp" ? "" : "+" + std::string(transport)) + "://" + std::string(addr) +
                (u.topic.empty() ? "" : "#" + u.topic);
  if (bare) {
    u.deprecation = std::string(url) + ": a bare ZeroMQ endpoint is deprecated: use " + u.canonical;
  }
  return u;
}

}  // namespace tensorsafe
