// ParseStreamUrl: the one address grammar of the CLI and Python
// (include/tensorsafe/stream/url.h): every scheme, who binds, the current
// spelling of old ones, and a clear message for each mistake.
#include "tensorsafe/stream/url.h"

#include <gtest/gtest.h>

namespace tensorsafe {
namespace {

using T = StreamUrl::Transport;

StreamUrl Parse(const std::string& url, std::optional<StreamRole> role = std::nullopt, bool pubsub = false) {
  StreamUrlOptions o;
  o.role = role;
  o.pubsub = pubsub;
  auto r = ParseStreamUrl(url, o);
  EXPECT_TRUE(r.ok()) << url << ": " << r.status().ToString();
  return r.ok() ? *r : StreamUrl{};
}

TEST(StreamUrl, ByteStreams) {
  StreamUrl u = Parse("-", StreamRole::kSend);
  EXPECT_EQ(u.transport, T::kStdio);
  EXPECT_EQ(u.fd, 1);
  EXPECT_EQ(Parse("-", StreamRole::kRecv).fd, 0);
  u = Parse("fd://7", StreamRole::kRecv);
  EXPECT_EQ(u.transport, T::kFd);
  EXPECT_EQ(u.fd, 7);
  u = Parse("tcp-raw://127.0.0.1:7000", StreamRole::kRecv);
  EXPECT_EQ(u.transport, T::kTcpRaw);
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 7000);
  EXPECT_TRUE(u.binds);  // the receiver listens
  EXPECT_FALSE(Parse("tcp-raw://[::1]:0", StreamRole::kSend).binds);
  EXPECT_EQ(Parse("tcp-raw://[::1]:0", StreamRole::kSend).host, "::1");
  u = Parse("unix:///tmp/s.sock", StreamRole::kSend);
  EXPECT_EQ(u.transport, T::kUnix);
  EXPECT_EQ(u.path, "/tmp/s.sock");
  EXPECT_TRUE(u.deprecation.empty());
}

TEST(StreamUrl, ZeroMQSchemesSayRoleAndBinding) {
  struct Case {
    std::string url;
    StreamRole role;
    ZmqPattern pattern;
    bool binds;
    std::string endpoint;
  };
  const Case cases[] = {
      {"zpush://h:1", StreamRole::kSend, ZmqPattern::kPushPull, false, "tcp://h:1"},
      {"zpull://h:1", StreamRole::kRecv, ZmqPattern::kPushPull, true, "tcp://h:1"},
      {"zpub://h:*", StreamRole::kSend, ZmqPattern::kPubSub, true, "tcp://h:*"},
      {"zsub://h:1", StreamRole::kRecv, ZmqPattern::kPubSub, false, "tcp://h:1"},
      {"zrpush://h:1", StreamRole::kSend, ZmqPattern::kPushPull, true, "tcp://h:1"},
      {"zrpull://h:1", StreamRole::kRecv, ZmqPattern::kPushPull, false, "tcp://h:1"},
      {"zrpub://h:1", StreamRole::kSend, ZmqPattern::kPubSub, false, "tcp://h:1"},
      {"zrsub://h:1", StreamRole::kRecv, ZmqPattern::kPubSub, true, "tcp://h:1"},
      {"zpush://[::1]:5", StreamRole::kSend, ZmqPattern::kPushPull, false, "tcp://[::1]:5"},
      {"zpull+ipc:///tmp/q", StreamRole::kRecv, ZmqPattern::kPushPull, true, "ipc:///tmp/q"},
      {"zpush+inproc://name", StreamRole::kSend, ZmqPattern::kPushPull, false, "inproc://name"},
  };
  for (const Case& c : cases) {
    StreamUrl u = Parse(c.url);
    EXPECT_EQ(u.transport, T::kZmq) << c.url;
    EXPECT_EQ(u.role, c.role) << c.url;
    EXPECT_EQ(u.pattern, c.pattern) << c.url;
    EXPECT_EQ(u.binds, c.binds) << c.url;
    EXPECT_EQ(u.endpoint, c.endpoint) << c.url;
    EXPECT_EQ(u.canonical, c.url) << "a current spelling is its own canonical form";
    EXPECT_TRUE(u.deprecation.empty()) << c.url;
  }
  EXPECT_EQ(Parse("zpush+tcp://h:1").canonical, "zpush://h:1");  // +tcp is the default
  EXPECT_EQ(Parse("zsub://h:1#train").topic, "train");
  EXPECT_EQ(Parse("zsub://h:1#train").endpoint, "tcp://h:1");
}

TEST(StreamUrl, OldSpellingsMapToTheSameThingWithANote) {
  StreamUrl u = Parse("unix-raw:///tmp/s", StreamRole::kRecv);
  EXPECT_EQ(u.transport, T::kUnix);
  EXPECT_EQ(u.path, "/tmp/s");
  EXPECT_EQ(u.deprecation, "unix-raw:///tmp/s: unix-raw:// is deprecated: use unix:///tmp/s");
  // The CLI's bare ZeroMQ endpoints: receivers bind, senders connect.
  u = Parse("tcp://127.0.0.1:7", StreamRole::kRecv);
  EXPECT_EQ(u.transport, T::kZmq);
  EXPECT_TRUE(u.binds);
  EXPECT_EQ(u.endpoint, "tcp://127.0.0.1:7");
  EXPECT_EQ(u.canonical, "zpull://127.0.0.1:7");
  EXPECT_EQ(u.deprecation, "tcp://127.0.0.1:7: a bare ZeroMQ endpoint is deprecated: use zpull://127.0.0.1:7");
  EXPECT_EQ(Parse("tcp://h:7", StreamRole::kSend).canonical, "zpush://h:7");
  EXPECT_EQ(Parse("tcp://h:7", StreamRole::kSend, true).canonical, "zrpub://h:7");  // send --pub connected
  EXPECT_EQ(Parse("tcp://h:7", StreamRole::kRecv, true).canonical, "zrsub://h:7");  // recv --sub bound
  EXPECT_EQ(Parse("ipc:///tmp/x", StreamRole::kSend).canonical, "zpush+ipc:///tmp/x");
  EXPECT_EQ(Parse("inproc://q", StreamRole::kRecv).endpoint, "inproc://q");
}

TEST(StreamUrl, MistakesAreNamed) {
  struct Case {
    std::string url;
    std::optional<StreamRole> role;
    bool pubsub;
    std::string message;
  };
  const Case cases[] = {
      {"zpush://h:1", StreamRole::kRecv, false, "zpush:// sends; it cannot recv"},
      {"zsub://h:1", StreamRole::kSend, false, "zsub:// receives; it cannot send"},
      {"zpush://h:1", std::nullopt, true, "zpush:// is PUSH/PULL, not PUB/SUB"},
      {"zpush://h", std::nullopt, false, "needs HOST:PORT"},
      {"zpush://:5", std::nullopt, false, "needs HOST:PORT"},
      {"zpush://h:x", std::nullopt, false, "bad port \"x\" (0..65535 or *)"},
      {"tcp-raw://h:*", StreamRole::kSend, false, "bad port \"*\" (0..65535)"},
      {"tcp-raw://h:65536", StreamRole::kSend, false, "bad port \"65536\""},
      {"tcp-raw://h:1", std::nullopt, false, "tcp-raw:// needs a role"},
      {"unix://", StreamRole::kRecv, false, "unix://PATH needs a path"},
      {"fd://x", StreamRole::kRecv, false, "fd://N needs a descriptor number"},
      {"fd://-1", StreamRole::kRecv, false, "fd://N needs a descriptor number"},
      {"zpush+udp://h:1", std::nullopt, false, "unknown ZeroMQ transport \"+udp\""},
      {"zpull+ipc://", std::nullopt, false, "ipc needs a path"},
      {"zpush://h:1#t", std::nullopt, false, "a #topic is for SUB receivers only"},
      {"tcp-raw://h:1", StreamRole::kSend, true, "PUB/SUB is ZeroMQ only"},
      {"http://h:1", StreamRole::kRecv, false, "unknown scheme \"http\""},
      {"somewhere", StreamRole::kRecv, false, "expected -, fd://N, tcp-raw://HOST:PORT"},
  };
  for (const Case& c : cases) {
    StreamUrlOptions o;
    o.role = c.role;
    o.pubsub = c.pubsub;
    auto r = ParseStreamUrl(c.url, o);
    ASSERT_FALSE(r.ok()) << c.url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.url;
    EXPECT_NE(r.status().message().find("stream address \"" + c.url + "\": "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << c.url << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace tensorsafe
