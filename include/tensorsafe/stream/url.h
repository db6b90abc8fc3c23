// The address grammar of batch streams, one for the `send` / `recv` commands
// and tensorsafe.stream.Connection (docs/STREAM.md §12):
//
//   -                        stdin (receiving) or stdout (sending)
//   fd://N                   an open file descriptor
//   tcp-raw://HOST:PORT      native or tenbin byte stream over TCP ([::1]:PORT for IPv6)
//   unix://PATH              the same over a Unix stream socket
//   zpush://ADDR  zpull://ADDR  zpub://ADDR  zsub://ADDR[#TOPIC]
//   zrpush://  zrpull://  zrpub://  zrsub://   (bind and connect swapped)
//                            ZeroMQ, tensorcom's schemes; ADDR is HOST:PORT
//                            (PORT may be * for an ephemeral port), or with
//                            "+ipc" a PATH (zpull+ipc:///tmp/s), with
//                            "+inproc" a NAME; "+tcp" is the default.
//
// Who listens: a byte stream's receiver listens and its sender connects; a
// ZeroMQ scheme says it (zpull and zpub bind, zpush and zsub connect, zr*
// the other way round). The caller may override either.
//
// Old spellings, accepted until the next release with a note naming the
// new one: unix-raw://PATH (Python's) is unix://PATH; a bare ZeroMQ endpoint
// tcp://HOST:PORT, ipc://PATH or inproc://NAME (the CLI's) is zpush / zpull
// (or zpub / zsub when asked) by role, receivers binding, senders connecting.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe {

enum class StreamRole : std::uint8_t { kSend, kRecv };

struct StreamUrl {
  enum class Transport : std::uint8_t { kStdio, kFd, kTcpRaw, kUnix, kZmq };
  Transport transport = Transport::kStdio;
  StreamRole role = StreamRole::kRecv;
  // Listen (byte streams) or bind (ZeroMQ) by default.
  bool binds = false;
  int fd = -1;                                 // kStdio (0 or 1 by role), kFd
  std::string host;                            // kTcpRaw: without brackets
  std::uint16_t port = 0;                      // kTcpRaw
  std::string path;                            // kUnix
  ZmqPattern pattern = ZmqPattern::kPushPull;  // kZmq
  std::string endpoint;                        // kZmq: tcp://HOST:PORT, ipc://PATH or inproc://NAME
  std::string topic;                           // kZmq SUB: the #fragment ("" = everything)
  std::string canonical;                       // the address in the current spelling
  // Set for an old spelling: "unix-raw://... is deprecated: use unix://...".
  std::string deprecation;
};

struct StreamUrlOptions {
  // The caller's role; needed for "-", fd://, byte streams and bare ZeroMQ
  // endpoints, and checked against a ZeroMQ scheme's (zpush sends).
  std::optional<StreamRole> role;
  // A bare ZeroMQ endpoint is PUB/SUB instead of PUSH/PULL (the CLI's --pub
  // and --sub); refused with a scheme that says otherwise.
  bool pubsub = false;
};

// Errors: kInvalidArgument naming the address and what is wrong (unknown
// scheme, missing or bad port, empty path, a role the scheme contradicts, no
// role where one is needed).
Result<StreamUrl> ParseStreamUrl(std::string_view url, const StreamUrlOptions& options = {});

}  // namespace tensorsafe
