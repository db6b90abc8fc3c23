// stream_bench: throughput of StreamWriter/StreamReader over a pipe and
// loopback TCP against plain write/read of the same bytes through the same
// kind of fd (the baseline, in the same run), and messages per second of
// small batches over ZeroMQ PUSH/PULL against raw cppzmq multipart sends.
//
//   stream_bench [--quick] [--reps N] [--mib N] [--no-verify] [--only pipe|tcp|zmq]
//                [--only-raw | --only-stream]
//
// Each figure is the best of --reps runs (the machine is shared). --only-raw
// and --only-stream run one side of the fd cases, so that `perf stat` can
// compare the CPU time (task-clock) of the two, which a loaded machine
// disturbs less than the wall-clock ratio.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "tensorsafe/stream/fd.h"
#include "tensorsafe/stream/net.h"
#include "tensorsafe/stream/zmq.h"

using namespace tensorsafe;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kTensor = 1 << 20;  // 1 MiB tensors
constexpr std::size_t kPerBatch = 16;     // 16 tensors per message
constexpr std::size_t kPool = 64 << 20;   // distinct source bytes, cycled
bool g_verify = true;
bool g_raw = true, g_stream = true;

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

struct FdPair {
  UniqueFd w, r;
};

FdPair MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) std::exit(1);
  // 1 MiB pipes for both the stream and the baseline (the default 64 KiB
  // costs a context switch per 64 KiB either way).
  ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  return {UniqueFd(fds[1]), UniqueFd(fds[0])};
}

FdPair MakeTcp() {
  auto l = ListenTcp("127.0.0.1", 0);
  Die(l.status(), "listen");
  auto port = ListenPort(l->get());
  auto c = ConnectTcp("127.0.0.1", *port);
  Die(c.status(), "connect");
  auto a = Accept(l->get());
  Die(a.status(), "accept");
  return {std::move(*c), std::move(*a)};
}

// Seconds for the sender and receiver threads to move everything.
double Time(const std::function<void()>& send, const std::function<void()>& recv) {
  const auto t0 = Clock::now();
  std::thread t(send);
  recv();
  t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double RawRun(FdPair p, const std::vector<std::byte>& pool, std::size_t total) {
  return Time(
      [&] {
        for (std::size_t sent = 0; sent < total;) {
          const std::byte* src = pool.data() + sent % pool.size();
          std::size_t off = 0;
          while (off < kTensor) {
            const ssize_t w = ::write(p.w.get(), src + off, kTensor - off);
            if (w <= 0) std::exit(2);
            off += static_cast<std::size_t>(w);
          }
          sent += kTensor;
        }
        p.w.reset();
      },
      [&] {
        std::vector<std::byte> buf(kPerBatch * kTensor);
        std::size_t got = 0;
        ssize_t r;
        while ((r = ::read(p.r.get(), buf.data(), buf.size())) > 0) got += static_cast<std::size_t>(r);
        if (got != total) std::exit(3);
      });
}

double StreamRun(FdPair p, const std::vector<std::byte>& pool, std::size_t total) {
  return Time(
      [&] {
        auto w = StreamWriter::ToFd(p.w.get());
        std::size_t sent = 0;
        while (sent < total) {
          TensorSet b;
          for (std::size_t k = 0; k < kPerBatch && sent < total; ++k, sent += kTensor) {
            Tensor t;
            t.info.name = "t" + std::to_string(k);
            t.info.dtype = DType::kF32;
            t.info.shape = {kTensor / 4};
            t.data = {pool.data() + sent % pool.size(), kTensor};
            b.tensors.push_back(std::move(t));
          }
          Die((*w)->Write(b), "write");
        }
        Die((*w)->Finish(), "finish");
        p.w.reset();
      },
      [&] {
        StreamReaderOptions ro;
        ro.verify_data = g_verify;
        auto r = StreamReader::FromFd(p.r.get(), ro);
        std::size_t got = 0;
        while (true) {
          auto b = (*r)->Next();
          Die(b.status(), "next");
          if (!*b) break;
          for (const Tensor& t : (*b)->tensors) got += t.data.size();
        }
        if (got != total) std::exit(4);
      });
}

void Throughput(const char* name, FdPair (*make)(), std::size_t total, int reps) {
  std::vector<std::byte> pool(std::min(total, kPool));
  for (std::size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<std::byte>(i * 131 + (i >> 12));
  double raw = 1e9, ours = 1e9;
  for (int i = 0; i < reps; ++i) {
    if (g_raw) raw = std::min(raw, RawRun(make(), pool, total));
    if (g_stream) ours = std::min(ours, StreamRun(make(), pool, total));
  }
  const double gib = static_cast<double>(total) / (1 << 30);
  std::printf("%-5s %5.2f GiB of 1 MiB tensors: raw write/read %6.2f GiB/s   stream %6.2f GiB/s   ratio %.2fx\n", name,
              gib, gib / raw, gib / ours, raw / ours);
}

TensorSet SmallBatch(std::vector<std::vector<std::byte>>& keep) {
  TensorSet b;
  auto owner = std::make_shared<int>(0);  // owners make sends zero-copy
  for (int k = 0; k < 10; ++k) {
    keep.emplace_back(1024, static_cast<std::byte>(k));
    Tensor t;
    t.info.name = "s" + std::to_string(k);
    t.info.dtype = DType::kU8;
    t.info.shape = {1024};
    t.data = keep.back();
    t.owner = owner;
    b.tensors.push_back(std::move(t));
  }
  return b;
}

void ZmqMessages(std::size_t n, int reps) {
  std::vector<std::vector<std::byte>> keep;
  const TensorSet batch = SmallBatch(keep);
  for (ZmqEncoding enc : {ZmqEncoding::kNative, ZmqEncoding::kTensorcom, ZmqEncoding::kZio}) {
    double best = 1e9;
    for (int i = 0; i < reps; ++i) {
      ZmqSenderOptions so;
      so.encoding = enc;
      so.send_hwm = 1000;
      auto tx = ZmqSender::Create("tcp://127.0.0.1:*", so);
      Die(tx.status(), "zmq sender");
      ZmqReceiverOptions ro;
      ro.encoding = enc;
      ro.recv_hwm = 1000;
      auto rx = ZmqReceiver::Create((*tx)->endpoint(), ro);
      Die(rx.status(), "zmq receiver");
      best = std::min(best, Time(
                                [&] {
                                  for (std::size_t m = 0; m < n; ++m) Die((*tx)->Send(batch), "send");
                                },
                                [&] {
                                  for (std::size_t m = 0; m < n; ++m) Die((*rx)->Receive().status(), "recv");
                                }));
    }
    std::printf("zmq PUSH/PULL tcp, 10 x 1 KiB tensors, %-16s %9.0f msg/s\n", std::string(ZmqEncodingName(enc)).c_str(),
                n / best);
  }
  // Baseline: the same 10 payload frames (plus one 64-byte header frame) with
  // raw cppzmq, no encoding, no checks.
  double best = 1e9;
  for (int i = 0; i < reps; ++i) {
    zmq::context_t ctx(1);
    zmq::socket_t push(ctx, zmq::socket_type::push), pull(ctx, zmq::socket_type::pull);
    push.set(zmq::sockopt::sndhwm, 1000);
    pull.set(zmq::sockopt::rcvhwm, 1000);
    push.bind("tcp://127.0.0.1:*");
    pull.connect(push.get(zmq::sockopt::last_endpoint));
    const std::string head(64, 'h');
    best = std::min(best, Time(
                              [&] {
                                for (std::size_t m = 0; m < n; ++m) {
                                  push.send(zmq::buffer(head), zmq::send_flags::sndmore);
                                  for (int k = 0; k < 10; ++k) {
                                    push.send(zmq::buffer(keep[k]),
                                              k < 9 ? zmq::send_flags::sndmore : zmq::send_flags::none);
                                  }
                                }
                              },
                              [&] {
                                for (std::size_t m = 0; m < n; ++m) {
                                  zmq::message_t f;
                                  do {
                                    (void)pull.recv(f);
                                  } while (f.more());
                                }
                              }));
  }
  std::printf("zmq PUSH/PULL tcp, 10 x 1 KiB tensors, %-16s %9.0f msg/s\n", "raw cppzmq", n / best);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  int reps = 3;
  std::size_t mib = 1024;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--no-verify") == 0)
      g_verify = false;
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (std::strcmp(argv[i], "--only-raw") == 0)
      g_stream = false;
    else if (std::strcmp(argv[i], "--only-stream") == 0)
      g_raw = false;
    else if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
      mib = std::strtoul(argv[++i], nullptr, 10);
  }
  if (quick) {
    mib = 32;
    reps = 1;
  }
  const std::size_t total = mib << 20;
  if (only.empty() || only == "pipe") Throughput("pipe", MakePipe, total, reps);
  if (only.empty() || only == "tcp") Throughput("tcp", MakeTcp, total, reps);
  if (only.empty() || only == "zmq") ZmqMessages(quick ? 2000 : 50000, reps);
  return 0;
}
