// StreamWriter/StreamReader over real pipes, TCP on 127.0.0.1 and Unix
// sockets: round trips of every dtype, alignment, the tenbin wire, a sender
// killed mid-message, missing end markers, backpressure.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "stream/native_codec.h"
#include "stream/stream_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/stream/net.h"

namespace tensorsafe {
namespace {

using testing::AllDTypesBatch;
using testing::ExpectBatchEq;

struct Pipe {
  UniqueFd r, w;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    r.reset(fds[0]);
    w.reset(fds[1]);
  }
};

// Writes `batches` then the end marker to `fd` and closes it (own thread).
std::thread Send(UniqueFd fd, std::vector<TensorSet> batches, StreamWriterOptions opt = {}) {
  return std::thread([fd = std::move(fd), batches = std::move(batches), opt]() mutable {
    auto w = StreamWriter::ToFd(fd.get(), opt);
    ASSERT_TRUE(w.ok());
    for (const TensorSet& b : batches) ASSERT_TRUE((*w)->Write(b).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  });
}

// Reads every batch until the end marker, checking 64-byte alignment.
std::vector<TensorSet> ReceiveAll(int fd, StreamReaderOptions opt = {}) {
  auto r = StreamReader::FromFd(fd, opt);
  EXPECT_TRUE(r.ok());
  std::vector<TensorSet> out;
  while (true) {
    auto b = (*r)->Next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok() || !*b) break;
    if ((*r)->wire_format() == WireFormat::kNative) {
      for (const Tensor& t : (*b)->tensors) EXPECT_TRUE(testing::Aligned(t.data.data(), 64)) << t.info.name;
    }
    out.push_back(std::move(**b));
  }
  return out;
}

std::vector<TensorSet> ThreeBatches() { return {AllDTypesBatch(1), AllDTypesBatch(2), TensorSet{}}; }

void ExpectSame(const std::vector<TensorSet>& want, const std::vector<TensorSet>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) ExpectBatchEq(want[i], got[i]);
}

TEST(StreamFd, PipeRoundTripEveryDType) {
  Pipe p;
  std::thread t = Send(std::move(p.w), ThreeBatches());
  auto got = ReceiveAll(p.r.get());
  t.join();
  ExpectSame(ThreeBatches(), got);
}

TEST(StreamFd, TcpRoundTripEveryDType) {
  auto l = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto port = ListenPort(l->get());
  ASSERT_TRUE(port.ok());
  auto c = ConnectTcp("127.0.0.1", *port);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto a = Accept(l->get());
  ASSERT_TRUE(a.ok());
  std::thread t = Send(std::move(*c), ThreeBatches());
  auto got = ReceiveAll(a->get());
  t.join();
  ExpectSame(ThreeBatches(), got);
}

TEST(StreamFd, UnixSocketRoundTripEveryDType) {
  testing::TempDir dir;
  const std::string path = dir.File("s.sock");
  auto l = ListenUnix(path);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto c = ConnectUnix(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto a = Accept(l->get());
  ASSERT_TRUE(a.ok());
  std::thread t = Send(std::move(*c), ThreeBatches());
  auto got = ReceiveAll(a->get());
  t.join();
  ExpectSame(ThreeBatches(), got);
}

TEST(StreamFd, LargeTensorsFromCallerMemory) {
  // Owner-less views of one caller buffer: the writer must not need owners.
  std::vector<std::uint8_t> big(8 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  TensorSet b;
  for (int k = 0; k < 8; ++k) {
    Tensor t;
    t.info.name = "t" + std::to_string(k);
    t.info.dtype = DType::kU8;
    t.info.shape = {1 << 20};
    t.data = std::as_bytes(std::span(big)).subspan(static_cast<std::size_t>(k) << 20, 1 << 20);
    b.tensors.push_back(t);
  }
  Pipe p;
  std::thread t = Send(std::move(p.w), {b, b});
  auto got = ReceiveAll(p.r.get());
  t.join();
  ExpectSame({b, b}, got);
}

TEST(StreamFd, HeldBatchesAreNeverOverwritten) {
  Pipe p;
  std::vector<TensorSet> in = {AllDTypesBatch(1), AllDTypesBatch(2), AllDTypesBatch(3)};
  std::thread t = Send(std::move(p.w), in);
  auto r = StreamReader::FromFd(p.r.get());
  ASSERT_TRUE(r.ok());
  auto a = (*r)->Next();
  ASSERT_TRUE(a.ok() && *a);
  auto b = (*r)->Next();  // must not reuse a's buffer: a is alive
  ASSERT_TRUE(b.ok() && *b);
  ExpectBatchEq(in[0], **a);
  ExpectBatchEq(in[1], **b);
  EXPECT_NE((*a)->tensors[0].owner, (*b)->tensors[0].owner);
  const void* b_buffer = (*b)->tensors[0].owner.get();
  b->reset();  // drop every view of b's buffer: it may be reused
  auto c = (*r)->Next();
  ASSERT_TRUE(c.ok() && *c);
  ExpectBatchEq(in[2], **c);
  EXPECT_EQ((*c)->tensors[0].owner.get(), b_buffer);
  ExpectBatchEq(in[0], **a);
  t.join();
}

TEST(StreamFd, MissingEndMarkerIsTruncation) {
  Pipe p;
  {
    auto w = StreamWriter::ToFd(p.w.get());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(AllDTypesBatch()).ok());
  }
  p.w.reset();
  auto r = StreamReader::FromFd(p.r.get());
  ASSERT_TRUE(r.ok());
  auto a = (*r)->Next();
  ASSERT_TRUE(a.ok() && *a);
  auto b = (*r)->Next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kCorruption);
  EXPECT_NE(b.status().message().find("without the end-of-stream marker"), std::string::npos) << b.status().ToString();
  EXPECT_EQ((*r)->Next().status().code(), StatusCode::kFailedPrecondition);
}

TEST(StreamFd, OutOfSequenceMessageIsRejected) {
  Pipe p;
  std::string bytes =
      internal::EncodePreamble() + *EncodeMessage(AllDTypesBatch(), 0) + *EncodeMessage(AllDTypesBatch(), 2);
  std::thread t([&] {
    ASSERT_EQ(::write(p.w.get(), bytes.data(), bytes.size()), (ssize_t)bytes.size());
    p.w.reset();
  });
  auto r = StreamReader::FromFd(p.r.get());
  ASSERT_TRUE((*r)->Next().ok());
  auto b = (*r)->Next();
  t.join();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("sequence 2, expected 1"), std::string::npos) << b.status().ToString();
}

TEST(StreamFd, CorruptByteInStreamDeliversNoBatch) {
  const std::string good = internal::EncodePreamble() + *EncodeMessage(AllDTypesBatch(), 0);
  for (std::size_t at : {std::size_t{3}, std::size_t{20}, std::size_t{100}, good.size() - 100}) {
    std::string bytes = good;
    bytes[at] ^= 0x40;
    Pipe p;
    std::thread t([&] {
      (void)!::write(p.w.get(), bytes.data(), bytes.size());
      p.w.reset();
    });
    auto r = StreamReader::FromFd(p.r.get());
    auto b = (*r)->Next();
    t.join();
    ASSERT_FALSE(b.ok()) << at;
    EXPECT_EQ(b.status().code(), StatusCode::kCorruption) << b.status().ToString();
  }
}

// The reader checks data piece by piece as it arrives (256 KiB pieces): a
// damaged byte deep in a large tensor, past the first pieces, is still found
// and names the tensor.
TEST(StreamFd, CorruptByteInALaterPieceIsFound) {
  std::vector<std::uint8_t> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  TensorSet b;
  Tensor t;
  t.info.name = "big";
  t.info.dtype = DType::kU8;
  t.info.shape = {big.size()};
  t.data = std::as_bytes(std::span(big));
  b.tensors.push_back(t);
  std::string bytes = internal::EncodePreamble() + *EncodeMessage(b, 0);
  bytes[bytes.size() - 1000] ^= 0x01;  // in the 4th 256 KiB piece of the data
  Pipe p;
  std::thread w([&] {
    (void)!::write(p.w.get(), bytes.data(), bytes.size());
    p.w.reset();
  });
  auto r = StreamReader::FromFd(p.r.get());
  auto got = (*r)->Next();
  w.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_NE(got.status().message().find("tensor \"big\": data checksum mismatch"), std::string::npos)
      << got.status().ToString();
}

TEST(StreamFd, EmptyInputAndForeignBytes) {
  for (const std::string bytes : {std::string(), std::string("hello, world, this is not a stream")}) {
    Pipe p;
    (void)!::write(p.w.get(), bytes.data(), bytes.size());
    p.w.reset();
    auto r = StreamReader::FromFd(p.r.get());
    auto b = (*r)->Next();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kCorruption) << b.status().ToString();
  }
}

// The sender is SIGKILLed while its writev of a 4 MiB message is blocked on
// a full pipe: the reader gets the complete first batch, then a truncation
// error, and never a partial batch.
TEST(StreamFd, SenderKilledMidMessage) {
  Pipe p;
  const TensorSet first = AllDTypesBatch(5);
  const std::size_t first_bytes = internal::kPreambleSize + EncodeMessage(first)->size();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    p.r.reset();
    auto w = StreamWriter::ToFd(p.w.get());
    if (!w.ok() || !(*w)->Write(first).ok()) ::_exit(1);
    TensorSet big;
    big.tensors.push_back(testing::RandomTensor("big", DType::kF32, {1 << 20}, 9));
    (void)(*w)->Write(big);  // blocks: the parent does not read yet
    ::_exit(2);
  }
  p.w.reset();
  // Handshake: wait until bytes of the second message are in the pipe, so
  // the child is inside the 4 MiB message (it cannot finish it: nobody reads).
  int avail = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (static_cast<std::size_t>(avail) <= first_bytes + 64 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_EQ(::ioctl(p.r.get(), FIONREAD, &avail), 0);
    std::this_thread::yield();
  }
  ASSERT_GT(static_cast<std::size_t>(avail), first_bytes + 64);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto r = StreamReader::FromFd(p.r.get());
  auto a = (*r)->Next();
  ASSERT_TRUE(a.ok() && *a) << a.status().ToString();
  ExpectBatchEq(first, **a);
  auto b = (*r)->Next();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kCorruption);
  EXPECT_NE(b.status().message().find("truncated: the stream ended after"), std::string::npos) << b.status().ToString();
  EXPECT_EQ((*r)->batches_read(), 1u);
}

TEST(StreamFd, WriterToVanishedReaderGetsEpipe) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  b.reset();
  auto w = StreamWriter::ToFd(a.get());
  Status s = (*w)->Write(AllDTypesBatch());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.error_number(), EPIPE);
  EXPECT_EQ((*w)->Write(AllDTypesBatch()).code(), StatusCode::kFailedPrecondition);
}

// Backpressure: with small socket buffers the writer is never more than one
// batch ahead of a slow reader, and it queues nothing of its own.
TEST(StreamFd, SlowReaderHoldsBackTheWriter) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int small = 64 << 10;
  ::setsockopt(a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::setsockopt(b.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  TensorSet batch;
  batch.tensors.push_back(testing::RandomTensor("m", DType::kU8, {1 << 20}, 4));
  constexpr int kBatches = 16;
  std::atomic<int> written{0};
  std::thread t([&] {
    auto w = StreamWriter::ToFd(a.get());
    for (int i = 0; i < kBatches; ++i) {
      ASSERT_TRUE((*w)->Write(batch).ok());
      written.fetch_add(1);
    }
    ASSERT_TRUE((*w)->Finish().ok());
  });
  auto r = StreamReader::FromFd(b.get());
  int max_ahead = 0;
  for (int i = 0; i < kBatches; ++i) {
    auto x = (*r)->Next();
    ASSERT_TRUE(x.ok() && *x);
    max_ahead = std::max(max_ahead, written.load() - i);
  }
  EXPECT_TRUE((*r)->Next().ok());
  t.join();
  // The writer finishes batch i+1 only once the reader has taken most of
  // batch i: a 1 MiB batch cannot sit in 2 x 64 KiB of socket buffer.
  EXPECT_LE(max_ahead, 2);
}

// ---- tenbin wire ----

TensorSet TenbinBatch() {
  return testing::Filter(AllDTypesBatch(), [](const Tensor& t) {
    return t.info.metadata_json.empty() &&
           tenbin::EncodeHeaderPayload(tenbin::ArrayHeader{t.info.dtype, "", t.info.shape}).ok();
  });
}

TEST(StreamFd, TenbinWireIsTheTenbinCodecsBytes) {
  TensorSet b = TenbinBatch();
  b.metadata_json.clear();
  ASSERT_GE(b.tensors.size(), 10u);
  Pipe p;
  StreamWriterOptions o;
  o.wire = WireFormat::kTenbin;
  std::thread t([&] {
    auto w = StreamWriter::ToFd(p.w.get(), o);
    ASSERT_TRUE((*w)->Write(b).ok());
    ASSERT_TRUE((*w)->Finish().ok());
    p.w.reset();
  });
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(p.r.get(), buf, sizeof buf)) > 0) got.append(buf, n);
  t.join();
  EXPECT_EQ(got, *tenbin::Encode(b));
}

TEST(StreamFd, TenbinFixtureThroughAPipe) {
  const std::string fixture =
      testing::ReadFileBytes(std::string(TS_SHARED_DIR) + "/fixtures/tenbin/vec_wds_2x3f4_x.ten");
  ASSERT_EQ(fixture.size(), 160u);
  Pipe p;
  ASSERT_EQ(::write(p.w.get(), fixture.data(), fixture.size()), 160);
  p.w.reset();
  auto got = ReceiveAll(p.r.get());
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].tensors.size(), 1u);
  const Tensor& x = got[0].tensors[0];
  EXPECT_EQ(x.info.name, "x");
  EXPECT_EQ(x.info.shape, (Shape{2, 3}));
  const float want[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(std::memcmp(x.data.data(), want, 24), 0);
  // And back: our tenbin wire writes the fixture's bytes.
  Pipe q;
  StreamWriterOptions o;
  o.wire = WireFormat::kTenbin;
  auto w = StreamWriter::ToFd(q.w.get(), o);
  ASSERT_TRUE((*w)->Write(got[0]).ok());
  q.w.reset();
  std::string out(200, '\0');
  EXPECT_EQ(::read(q.r.get(), out.data(), out.size()), 160);
  EXPECT_EQ(out.substr(0, 160), fixture);
}

TEST(StreamFd, TenbinArraysPerBatchAndTruncation) {
  const std::string ten = testing::ReadFileBytes(std::string(TS_SHARED_DIR) + "/fixtures/tenbin/000000.ten");
  for (std::uint32_t per : {0u, 1u, 2u}) {
    Pipe p;
    std::thread t([&] {
      (void)!::write(p.w.get(), ten.data(), ten.size());
      p.w.reset();
    });
    StreamReaderOptions o;
    o.tenbin_arrays_per_batch = per;
    auto got = ReceiveAll(p.r.get(), o);
    t.join();
    ASSERT_EQ(got.size(), per == 1 ? 2u : 1u) << per;
  }
  // Cut inside the second array's data chunk.
  Pipe p;
  const std::string cut = ten.substr(0, ten.size() - 100);
  std::thread t([&] {
    (void)!::write(p.w.get(), cut.data(), cut.size());
    p.w.reset();
  });
  auto r = StreamReader::FromFd(p.r.get());
  auto b = (*r)->Next();
  t.join();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("truncated"), std::string::npos) << b.status().ToString();
}

TEST(StreamFd, TenbinRefusesMetadataUnlessDropped) {
  TensorSet b = TenbinBatch();  // has batch metadata
  Pipe p;
  StreamWriterOptions o;
  o.wire = WireFormat::kTenbin;
  auto w = StreamWriter::ToFd(p.w.get(), o);
  EXPECT_EQ((*w)->Write(b).code(), StatusCode::kUnsupported);
  o.drop_metadata = true;
  auto w2 = StreamWriter::ToFd(p.w.get(), o);
  EXPECT_TRUE((*w2)->Write(b).ok());
  TensorSet bf;
  bf.tensors.push_back(testing::RandomTensor("h", DType::kBF16, {2}, 1));
  EXPECT_EQ((*w2)->Write(bf).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace tensorsafe
