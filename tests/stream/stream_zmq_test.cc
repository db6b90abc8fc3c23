// ZmqSender/ZmqReceiver with real ZeroMQ sockets on 127.0.0.1 (ephemeral
// ports) and inproc: round trips in every encoding, byte-exact frames
// against the ZIO and tenbin fixtures, zero copy both ways, corrupted frames,
// and bounded sender memory with a slow or stopped reader.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "stream/stream_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe {
namespace {

using testing::AllDTypesBatch;
using testing::ExpectBatchEq;

constexpr int kTimeoutMs = 20000;  // a failing test fails instead of hanging

std::string Shared(const std::string& rel) { return std::string(TS_SHARED_DIR) + "/" + rel; }

// The subset of AllDTypesBatch an encoding can carry.
TensorSet BatchFor(ZmqEncoding e, std::uint32_t seed = 1) {
  TensorSet all = AllDTypesBatch(seed);
  switch (e) {
    case ZmqEncoding::kNative: return all;
    case ZmqEncoding::kTensorcom:
    case ZmqEncoding::kTensorcomSingle: {
      TensorSet s = testing::Filter(all, [](const Tensor& t) {
        return tenbin::EncodeHeaderPayload(tenbin::ArrayHeader{t.info.dtype, "", t.info.shape}).ok();
      });
      s.metadata_json.clear();
      for (Tensor& t : s.tensors) t.info.metadata_json.clear();
      return s;
    }
    case ZmqEncoding::kZio:
      return testing::Filter(all, [](const Tensor& t) {
        TensorSet one;
        one.tensors.push_back(t);
        return zio::FromTensorSet(one).ok();
      });
  }
  return all;
}

struct Pair {
  std::unique_ptr<ZmqSender> tx;
  std::unique_ptr<ZmqReceiver> rx;
};

Pair Connect(ZmqSenderOptions so, ZmqReceiverOptions ro, const std::string& bind = "tcp://127.0.0.1:*") {
  Pair p;
  so.bind = true;
  if (so.send_timeout_ms < 0) so.send_timeout_ms = kTimeoutMs;
  auto tx = ZmqSender::Create(bind, so);
  EXPECT_TRUE(tx.ok()) << tx.status().ToString();
  if (!tx.ok()) return p;
  p.tx = std::move(*tx);
  ro.bind = false;
  if (ro.recv_timeout_ms < 0) ro.recv_timeout_ms = kTimeoutMs;
  auto rx = ZmqReceiver::Create(p.tx->endpoint(), ro);
  EXPECT_TRUE(rx.ok()) << rx.status().ToString();
  if (rx.ok()) p.rx = std::move(*rx);
  return p;
}

TensorSet Receive(ZmqReceiver& rx) {
  auto r = rx.Receive();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok() || !*r) return TensorSet{};
  return std::move(**r);
}

class ZmqEncodings : public ::testing::TestWithParam<std::tuple<ZmqEncoding, ZmqPattern>> {};

TEST_P(ZmqEncodings, RoundTripEverySupportedDType) {
  const auto [enc, pattern] = GetParam();
  ZmqSenderOptions so;
  so.encoding = enc;
  so.pattern = pattern;
  so.zio_form = "TENS";
  ZmqReceiverOptions ro;
  ro.encoding = enc;
  ro.pattern = pattern;
  Pair p = Connect(so, ro);
  ASSERT_TRUE(p.tx && p.rx);
  if (pattern == ZmqPattern::kPubSub) ASSERT_TRUE(p.tx->WaitForSubscriber(kTimeoutMs).ok());
  const TensorSet a = BatchFor(enc, 1), b = BatchFor(enc, 2);
  ASSERT_GE(a.tensors.size(), 10u);
  ASSERT_TRUE(p.tx->Send(a).ok());
  ASSERT_TRUE(p.tx->Send(b).ok());
  const bool native = enc == ZmqEncoding::kNative;
  ExpectBatchEq(a, Receive(*p.rx), native);
  ExpectBatchEq(b, Receive(*p.rx), native);
  if (native) {
    ASSERT_TRUE(p.tx->SendEnd().ok());
    auto end = p.rx->Receive();
    ASSERT_TRUE(end.ok());
    EXPECT_FALSE(end->has_value());
  } else {
    EXPECT_EQ(p.tx->SendEnd().code(), StatusCode::kUnsupported);
  }
}

INSTANTIATE_TEST_SUITE_P(All, ZmqEncodings,
                         ::testing::Combine(::testing::Values(ZmqEncoding::kNative, ZmqEncoding::kTensorcom,
                                                              ZmqEncoding::kTensorcomSingle, ZmqEncoding::kZio),
                                            ::testing::Values(ZmqPattern::kPushPull, ZmqPattern::kPubSub)),
                         [](const auto& info) {
                           std::string n(ZmqEncodingName(std::get<0>(info.param)));
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n + (std::get<1>(info.param) == ZmqPattern::kPushPull ? "_push" : "_pub");
                         });

// ---- byte exactness ----

// A raw PULL socket bound on an ephemeral port, to see the frames.
struct RawPull {
  zmq::context_t ctx{1};
  zmq::socket_t s{ctx, zmq::socket_type::pull};
  std::string endpoint;
  RawPull() {
    s.set(zmq::sockopt::rcvtimeo, kTimeoutMs);
    s.set(zmq::sockopt::linger, 0);
    s.bind("tcp://127.0.0.1:*");
    endpoint = s.get(zmq::sockopt::last_endpoint);
  }
  std::vector<std::string> Frames() {
    std::vector<std::string> out;
    do {
      zmq::message_t m;
      EXPECT_TRUE(s.recv(m));
      out.push_back(m.to_string());
      if (!m.more()) break;
    } while (true);
    return out;
  }
};

std::unique_ptr<ZmqSender> ConnectedSender(const std::string& ep, ZmqSenderOptions o) {
  o.bind = false;
  auto tx = ZmqSender::Create(ep, o);
  EXPECT_TRUE(tx.ok()) << tx.status().ToString();
  return tx.ok() ? std::move(*tx) : nullptr;
}

TensorSet X2x3(std::string name) {
  const float v[6] = {1, 2, 3, 4, 5, 6};
  auto buf = std::make_shared<std::vector<float>>(v, v + 6);
  Tensor t;
  t.info.name = std::move(name);
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = std::as_bytes(std::span(*buf));
  t.owner = buf;
  TensorSet s;
  s.tensors.push_back(t);
  return s;
}

// The first message of FRAMES.txt (made by ZIO's C++ code).
std::vector<std::string> ZioFixtureFrames() {
  std::ifstream in(Shared("fixtures/zio/FRAMES.txt"));
  std::vector<std::string> frames;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("frame ", 0) == 0) {
      if (frames.size() == 3) break;
      frames.emplace_back();
    } else if (line.rfind("single-part", 0) == 0) {
      break;
    } else if (!frames.empty() && line.size() > 8 && line[6] == ':') {
      std::istringstream hex(line.substr(7));
      unsigned v;
      while (hex >> std::hex >> v) frames.back().push_back(static_cast<char>(v));
    }
  }
  return frames;
}

TEST(ZmqFrames, ZioTensIsByteExactWithTheFixture) {
  const auto want = ZioFixtureFrames();
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(want[0].size(), 76u);
  RawPull pull;
  ZmqSenderOptions o;
  o.encoding = ZmqEncoding::kZio;
  o.zio_granule = 0x0123456789abcdefull;
  o.zio_first_seqno = 1;
  auto tx = ConnectedSender(pull.endpoint, o);
  ASSERT_TRUE(tx);
  ASSERT_TRUE(tx->Send(X2x3("0")).ok());  // positional name: no "name" metadata
  EXPECT_EQ(pull.Frames(), want);
}

TEST(ZmqFrames, TensorcomMultipartAndSingleAreByteExact) {
  const std::string ten = testing::ReadFileBytes(Shared("fixtures/tenbin/vec_tcom_2x3f4_x.ten"));
  ASSERT_EQ(ten.size(), 160u);
  RawPull pull;
  ZmqSenderOptions o;
  o.encoding = ZmqEncoding::kTensorcom;
  auto tx = ConnectedSender(pull.endpoint, o);
  ASSERT_TRUE(tx->Send(X2x3("x")).ok());
  auto frames = pull.Frames();
  ASSERT_EQ(frames.size(), 2u);
  // formats.md §3.3: the chunk payloads of the fixture, without magic/length/padding.
  EXPECT_EQ(frames[0], ten.substr(16, 40));
  EXPECT_EQ(frames[1], ten.substr(96, 24));
  o.encoding = ZmqEncoding::kTensorcomSingle;
  auto tx2 = ConnectedSender(pull.endpoint, o);
  ASSERT_TRUE(tx2->Send(X2x3("x")).ok());
  EXPECT_EQ(pull.Frames(), std::vector<std::string>{ten});
}

// ---- zero copy ----

TEST(ZmqZeroCopy, InprocSharesTheSendersMemory) {
  // inproc hands the very zmq_msg to the receiver: a tensor received is the
  // sender's memory, and the owner is released once the batch is dropped.
  ZmqSenderOptions so;
  ZmqReceiverOptions ro;
  Pair p = Connect(so, ro, "inproc://zero-copy");
  ASSERT_TRUE(p.tx && p.rx);
  TensorSet b;
  b.tensors.push_back(testing::RandomTensor("w", DType::kF64, {4096}, 3));
  const std::byte* sent = b.tensors[0].data.data();
  std::weak_ptr<const void> owner = b.tensors[0].owner;
  ASSERT_TRUE(p.tx->Send(b).ok());
  b = TensorSet{};
  EXPECT_FALSE(owner.expired()) << "libzmq holds the owner while the frame is in flight";
  TensorSet got = Receive(*p.rx);
  ASSERT_EQ(got.tensors.size(), 1u);
  EXPECT_EQ(got.tensors[0].data.data(), sent);
  EXPECT_EQ(p.rx->bytes_copied(), 0u);
  got = TensorSet{};
  ASSERT_TRUE(p.tx->Drain(kTimeoutMs).ok());
  EXPECT_TRUE(owner.expired());
  EXPECT_EQ(p.tx->queued_bytes(), 0u);
}

// What Python's send() gives as the owner of a large array: a release token
// that owns no object (its stored pointer is null). It was once read as "no
// owner", and every large tensor was copied.
TEST(ZmqZeroCopy, TcpSendCopiesOnlyTensorsWithoutAnOwner) {
  Pair p = Connect({}, {});
  ASSERT_TRUE(p.tx && p.rx);
  TensorSet b;
  b.tensors.push_back(testing::RandomTensor("owned", DType::kF32, {1 << 16}, 1));
  b.tensors.push_back(testing::RandomTensor("token", DType::kF32, {1 << 16}, 2));
  b.tensors.push_back(testing::RandomTensor("none", DType::kF32, {1000}, 3));
  const TensorSet want = b;  // shares the bytes, which outlive the test's batches
  auto released = std::make_shared<std::atomic<bool>>(false);
  b.tensors[1].owner =
      std::shared_ptr<const void>(static_cast<const void*>(nullptr), [released](const void*) { *released = true; });
  std::vector<std::byte> none(b.tensors[2].data.begin(), b.tensors[2].data.end());
  b.tensors[2].data = none;
  b.tensors[2].owner.reset();
  ASSERT_TRUE(p.tx->Send(b).ok());
  EXPECT_EQ(p.tx->bytes_copied(), 4000u) << "only the tensor without an owner";
  TensorSet got = Receive(*p.rx);
  ExpectBatchEq(want, got);
  b = TensorSet{};
  ASSERT_TRUE(p.tx->Drain(kTimeoutMs).ok());
  EXPECT_TRUE(*released) << "libzmq released the token once the frame was sent";
}

TEST(ZmqZeroCopy, TcpReceiveViewsFramesUnlessAskedForMoreAlignment) {
  TensorSet b;
  b.tensors.push_back(testing::RandomTensor("a", DType::kF64, {1 << 17}, 1));
  b.tensors.push_back(testing::RandomTensor("b", DType::kC128, {1 << 16}, 2));
  for (std::size_t align : {std::size_t{0}, std::size_t{64}}) {
    ZmqReceiverOptions ro;
    ro.min_alignment = align;
    Pair p = Connect({}, ro);
    ASSERT_TRUE(p.tx->Send(b).ok());
    TensorSet got = Receive(*p.rx);
    ExpectBatchEq(b, got);
    for (const Tensor& t : got.tensors) {
      EXPECT_TRUE(testing::Aligned(t.data.data(), std::max<std::size_t>(align, 8))) << t.info.name;
    }
    if (align == 0) {
      EXPECT_EQ(p.rx->bytes_copied(), 0u) << "large frames are viewed in place";
    } else if (p.rx->bytes_copied() == 0) {
      GTEST_LOG_(INFO) << "frames happened to be 64-byte aligned";
    }
  }
}

// ---- corrupted frames ----

TEST(ZmqCorruption, BadFramesAreRejectedAndTheReceiverGoesOn) {
  ZmqReceiverOptions ro;
  ro.bind = true;
  ro.recv_timeout_ms = kTimeoutMs;
  auto rx = ZmqReceiver::Create("tcp://127.0.0.1:*", ro);
  ASSERT_TRUE(rx.ok());
  zmq::context_t ctx{1};
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 0);
  push.connect((*rx)->endpoint());
  const TensorSet b = X2x3("x");
  const std::string msg = *EncodeMessage(b);
  const std::string head = msg.substr(0, 64 + 128), data = msg.substr(192, 24);
  auto send = [&](std::vector<std::string> frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      push.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  std::string bad_data = data;
  bad_data[5] ^= 1;
  std::string bad_head = head;
  bad_head[100] ^= 1;
  send({head, bad_data});
  send({bad_head, data});
  send({head});
  send({head, data, data});
  send({head, data.substr(0, 20)});
  send({head, data});
  const char* want[] = {"data checksum", "descriptor block checksum", "frames", "frames", "data bytes"};
  for (const char* w : want) {
    auto r = (*rx)->Receive();
    ASSERT_FALSE(r.ok()) << w;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(w), std::string::npos) << r.status().ToString();
  }
  auto ok = (*rx)->Receive();
  ASSERT_TRUE(ok.ok() && *ok) << ok.status().ToString();
  ExpectBatchEq(b, **ok);
}

// ---- flow control ----

TensorSet MiB(std::uint32_t seed) {
  TensorSet b;
  b.tensors.push_back(testing::RandomTensor("m", DType::kU8, {1 << 20}, seed));
  return b;
}

constexpr std::uint64_t kBound = 4 << 20;

// A reader that stopped: the sender's Send times out instead of queueing;
// what it holds stays under the byte bound.
TEST(ZmqFlowControl, StoppedReaderBoundsSenderMemory) {
  ZmqSenderOptions so;
  so.send_hwm = 1;
  so.max_queued_bytes = kBound;
  so.send_timeout_ms = 300;
  so.linger_ms = 0;
  ZmqReceiverOptions ro;
  ro.recv_hwm = 1;
  Pair p = Connect(so, ro);
  const TensorSet b = MiB(1);
  int sent = 0;
  Status s;
  for (; sent < 1000; ++sent) {
    s = p.tx->Send(b);
    if (!s.ok()) break;
  }
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_EQ(s.error_number(), EAGAIN);
  EXPECT_LT(sent, 1000);
  EXPECT_LE(p.tx->peak_queued_bytes(), kBound);
  // The reader resumes: what was sent arrives intact.
  for (int i = 0; i < sent; ++i) ExpectBatchEq(b, Receive(*p.rx));
}

// The control: without the bounds the same stopped reader lets the sender's
// queue grow with every batch (so the measure above can fail).
TEST(ZmqFlowControl, WithoutBoundsTheQueueGrows) {
  ZmqSenderOptions so;
  so.send_hwm = 0;  // ZeroMQ: no limit
  so.max_queued_bytes = 0;
  so.linger_ms = 0;
  ZmqReceiverOptions ro;
  ro.recv_hwm = 1;
  Pair p = Connect(so, ro);
  const TensorSet b = MiB(2);
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(p.tx->Send(b).ok());
  EXPECT_GT(p.tx->peak_queued_bytes(), 4 * kBound);
}

// A slow but live reader: the sender thread keeps pace with it and never
// holds more than the bound.
TEST(ZmqFlowControl, SlowReaderSlowsTheSender) {
  ZmqSenderOptions so;
  so.send_hwm = 1;
  so.max_queued_bytes = kBound;
  ZmqReceiverOptions ro;
  ro.recv_hwm = 1;
  Pair p = Connect(so, ro);
  constexpr int kBatches = 24;
  std::thread t([&] {
    for (int i = 0; i < kBatches; ++i) ASSERT_TRUE(p.tx->Send(MiB(i)).ok());
    ASSERT_TRUE(p.tx->SendEnd().ok());
  });
  for (int i = 0; i < kBatches; ++i) {
    ExpectBatchEq(MiB(i), Receive(*p.rx));
    EXPECT_LE(p.tx->queued_bytes(), kBound);
  }
  auto end = p.rx->Receive();
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
  t.join();
  EXPECT_LE(p.tx->peak_queued_bytes(), kBound);
}

}  // namespace
}  // namespace tensorsafe
