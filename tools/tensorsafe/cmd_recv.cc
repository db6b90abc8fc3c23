// `tensorsafe recv ADDRESS [OUT]`: receives a stream of batches (the
// counterpart of `send`) and writes every tensor to OUT (.tsafe), or lists
// the batches when OUT is absent. Byte-stream sockets listen by default;
// ZeroMQ schemes say whether they bind (include/tensorsafe/stream/url.h).
#include <fmt/core.h>

#include <memory>
#include <optional>

#include "command.h"
#include "exit_codes.h"
#include "stream_cli.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/stream/net.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe::cli {
namespace {

struct Args {
  std::string address, out, encoding = "native";
  std::uint64_t count = 0;
  std::uint32_t tenbin_arrays = 0;
  bool bind = false, connect = false, sub = false;
};

// The address's default, or what --bind / --connect ask.
bool Binds(const StreamUrl& u, const Args& a) { return a.bind ? true : a.connect ? false : u.binds; }

// Consumes batches from `next` until the end or --count.
template <typename Next>
Status Drain(Next next, const Args& a) {
  std::unique_ptr<TsafeSink> sink;
  if (!a.out.empty()) {
    TS_ASSIGN_OR_RETURN(sink, TsafeSink::Create(a.out));
  }
  std::uint64_t n = 0, tensors = 0, bytes = 0;
  while (a.count == 0 || n < a.count) {
    TS_ASSIGN_OR_RETURN(std::optional<TensorSet> b, next());
    if (!b) break;
    std::uint64_t bb = 0;
    for (const Tensor& t : b->tensors) bb += t.data.size();
    if (sink) {
      TS_RETURN_IF_ERROR(sink->Add(*b));
    } else {
      fmt::print("batch {}: {} tensors, {} bytes{}\n", n, b->tensors.size(), bb,
                 b->metadata_json.empty() ? "" : ", metadata " + b->metadata_json);
      for (const Tensor& t : b->tensors) {
        fmt::print("  {}  {}  {}\n", t.info.name, DTypeName(t.info.dtype), ShapeToString(t.info.shape));
      }
    }
    ++n;
    tensors += b->tensors.size();
    bytes += bb;
  }
  if (sink) {
    TS_RETURN_IF_ERROR(sink->Finish());
    fmt::print(stderr, "tensorsafe recv: wrote {} ({} batches, {} tensors, {} bytes of data)\n", a.out, n, tensors,
               bytes);
  }
  return Status::OK();
}

Status RecvFd(int fd, const Args& a) {
  StreamReaderOptions o;
  o.tenbin_arrays_per_batch = a.tenbin_arrays;
  TS_ASSIGN_OR_RETURN(auto r, StreamReader::FromFd(fd, o));
  return Drain([&] { return r->Next(); }, a);
}

Status RecvSocket(const StreamUrl& addr, const Args& a) {
  UniqueFd fd;
  const bool unix_socket = addr.transport == StreamUrl::Transport::kUnix;
  if (!Binds(addr, a)) {
    TS_ASSIGN_OR_RETURN(fd, unix_socket ? ConnectUnix(addr.path) : ConnectTcp(addr.host, addr.port));
  } else {
    TS_ASSIGN_OR_RETURN(UniqueFd l, unix_socket ? ListenUnix(addr.path) : ListenTcp(addr.host, addr.port));
    if (!unix_socket) {
      TS_ASSIGN_OR_RETURN(std::uint16_t port, ListenPort(l.get()));
      fmt::print(stderr, "tensorsafe recv: listening on tcp-raw://{}:{}\n", addr.host, port);
    }
    TS_ASSIGN_OR_RETURN(fd, Accept(l.get()));
  }
  return RecvFd(fd.get(), a);
}

Status RecvZmq(const StreamUrl& addr, const Args& a) {
  ZmqReceiverOptions o;
  auto enc = ParseZmqEncoding(a.encoding);
  if (!enc) return InvalidArgument("--encoding " + a.encoding + ": native, tensorcom, tensorcom-single or zio");
  if (*enc != ZmqEncoding::kNative && a.count == 0) {
    return InvalidArgument("--encoding " + a.encoding + " has no end marker: give --count");
  }
  o.encoding = *enc;
  o.pattern = addr.pattern;
  o.bind = Binds(addr, a);
  o.subscribe = addr.topic;
  TS_ASSIGN_OR_RETURN(auto rx, ZmqReceiver::Create(addr.endpoint, o));
  if (o.bind) fmt::print(stderr, "tensorsafe recv: bound to {}\n", rx->endpoint());
  return Drain([&] { return rx->Receive(); }, a);
}

int Run(const Args& a) {
  if (a.bind && a.connect) return Fail("recv", InvalidArgument("--bind and --connect contradict each other"));
  auto addr = ParseAddress(a.address, StreamRole::kRecv, a.sub, "recv");
  if (!addr.ok()) return Fail("recv", addr.status());
  Status s;
  switch (addr->transport) {
    case StreamUrl::Transport::kStdio:
    case StreamUrl::Transport::kFd: s = RecvFd(addr->fd, a); break;
    case StreamUrl::Transport::kTcpRaw:
    case StreamUrl::Transport::kUnix: s = RecvSocket(*addr, a); break;
    case StreamUrl::Transport::kZmq: s = RecvZmq(*addr, a); break;
  }
  if (!s.ok()) return Fail("recv", s.WithContext(a.address));
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("ADDRESS", a->address,
                 "- (stdin), fd://N, tcp-raw://HOST:PORT, unix://PATH, or ZeroMQ zpull://HOST:PORT, "
                 "zsub://HOST:PORT[#TOPIC] (+ipc: zpull+ipc:///PATH)")
      ->required();
  sub.add_option("OUT", a->out, "Write every received tensor to this .tsafe file (default: list batches)");
  sub.add_option("--count", a->count, "Stop after this many batches (needed for ZeroMQ tensorcom/zio)");
  sub.add_option("--encoding", a->encoding, "ZeroMQ: native | tensorcom | tensorcom-single | zio");
  sub.add_option("--tenbin-arrays", a->tenbin_arrays, "Tenbin fd input: arrays per batch (0 = all in one)");
  sub.add_flag("--bind", a->bind, "Listen/bind instead of the address's default");
  sub.add_flag("--connect", a->connect, "Connect instead of the address's default");
  sub.add_flag("--sub", a->sub, "Deprecated: a bare ZeroMQ endpoint is SUB (use zsub://)");
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("recv", "Receive a stream of batches into a .tsafe file (or list them)", SetupCommand);

}  // namespace tensorsafe::cli
