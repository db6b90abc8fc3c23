// ZeroMQ across fork(): a child of a process holding ZeroMQ sockets opens
// its own and they work; the sockets it inherited refuse to work there and
// are let go without touching the parent's, whose stream goes on.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "stream/stream_test_util.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe {
namespace {

constexpr int kForkTimeoutMs = 20000;

struct ForkPair {
  std::unique_ptr<ZmqSender> tx;
  std::unique_ptr<ZmqReceiver> rx;
};

Result<ForkPair> OpenForkPair() {
  ZmqReceiverOptions ro;
  ro.bind = true;
  ro.recv_timeout_ms = kForkTimeoutMs;
  ForkPair p;
  TS_ASSIGN_OR_RETURN(p.rx, ZmqReceiver::Create("tcp://127.0.0.1:*", ro));
  ZmqSenderOptions so;
  so.bind = false;
  so.send_timeout_ms = kForkTimeoutMs;
  TS_ASSIGN_OR_RETURN(p.tx, ZmqSender::Create(p.rx->endpoint(), so));
  return p;
}

// 0 when a batch goes through `p` intact, else a distinct code.
int RoundTrip(ForkPair& p, std::uint32_t seed) {
  const TensorSet b = testing::AllDTypesBatch(seed);
  if (!p.tx->Send(b).ok()) return 10;
  auto got = p.rx->Receive();
  if (!got.ok() || !*got) return 11;
  if ((*got)->tensors.size() != b.tensors.size()) return 12;
  for (std::size_t i = 0; i < b.tensors.size(); ++i) {
    const auto& x = (*got)->tensors[i].data;
    const auto& y = b.tensors[i].data;
    if (x.size() != y.size() || (!x.empty() && std::memcmp(x.data(), y.data(), x.size()) != 0)) return 13;
  }
  return 0;
}

TEST(ZmqFork, ChildOpensItsOwnSocketsAndLeavesTheParentsAlone) {
  auto parent = OpenForkPair();
  ASSERT_TRUE(parent.ok()) << parent.status().ToString();
  ASSERT_EQ(RoundTrip(*parent, 1), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    auto child = OpenForkPair();
    if (!child.ok()) code = 20;
    if (code == 0) code = RoundTrip(*child, 2);
    // The inherited sender and receiver refuse, naming the fork.
    Status s = parent->tx->Send(testing::AllDTypesBatch(3));
    if (code == 0 &&
        (s.code() != StatusCode::kFailedPrecondition || s.message().find("do not cross fork()") == std::string::npos)) {
      code = 30;
    }
    if (code == 0 && parent->rx->Receive().status().code() != StatusCode::kFailedPrecondition) code = 31;
    // Destroying them must not reach into the parent's context.
    parent->tx.reset();
    parent->rx.reset();
    if (child.ok()) {
      child->tx.reset();
      child->rx.reset();
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see RoundTrip and the child's codes";
  // The parent's pair still works, and no end marker arrived from the child.
  EXPECT_EQ(RoundTrip(*parent, 4), 0);
  ASSERT_TRUE(parent->tx->SendEnd().ok());
  auto end = parent->rx->Receive();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  EXPECT_EQ(parent->rx->last_sequence(), 2u);  // the end marker counts the batches sent
}

TEST(ZmqFork, EndMarkerWaitIsBounded) {
  ZmqSenderOptions so;
  so.bind = true;  // nobody connects
  auto tx = ZmqSender::Create("tcp://127.0.0.1:*", so);
  ASSERT_TRUE(tx.ok());
  Status s = (*tx)->SendEnd(200);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.error_number(), EAGAIN);
  EXPECT_NE(s.message().find("no room within 200 ms"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensorsafe
