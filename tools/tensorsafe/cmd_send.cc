// `tensorsafe send SOURCE ADDRESS`: sends a tensor file as a stream of
// batches (docs/STREAM.md) to stdout ("-"), a descriptor (fd://N), a TCP or
// Unix socket with the fd framing (tcp-raw://HOST:PORT, unix://PATH), or
// ZeroMQ (zpush://HOST:PORT, zpub://..., +ipc; include/tensorsafe/stream/url.h).
#include <fmt/core.h>
#include <signal.h>

#include <memory>

#include "command.h"
#include "exit_codes.h"
#include "stream_cli.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/stream/net.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe::cli {
namespace {

struct Args {
  std::string source, address, encoding = "native";
  std::uint32_t batch = 0;
  bool bind = false, connect = false, pub = false, drop_metadata = false;
};

// The address's default, or what --bind / --connect ask.
bool Binds(const StreamUrl& u, const Args& a) { return a.bind ? true : a.connect ? false : u.binds; }

Status SendFd(int fd, const std::vector<TensorSet>& batches, const Args& a) {
  StreamWriterOptions o;
  if (a.encoding == "tenbin") {
    o.wire = WireFormat::kTenbin;
  } else if (a.encoding != "native") {
    return InvalidArgument("--encoding " + a.encoding + ": fd streams are native or tenbin");
  }
  o.drop_metadata = a.drop_metadata;
  TS_ASSIGN_OR_RETURN(auto w, StreamWriter::ToFd(fd, o));
  for (const TensorSet& b : batches) TS_RETURN_IF_ERROR(w->Write(b));
  return w->Finish();
}

Status SendSocket(const StreamUrl& addr, const std::vector<TensorSet>& batches, const Args& a) {
  UniqueFd fd;
  const bool unix_socket = addr.transport == StreamUrl::Transport::kUnix;
  if (Binds(addr, a)) {
    TS_ASSIGN_OR_RETURN(UniqueFd l, unix_socket ? ListenUnix(addr.path) : ListenTcp(addr.host, addr.port));
    TS_ASSIGN_OR_RETURN(fd, Accept(l.get()));
  } else {
    TS_ASSIGN_OR_RETURN(fd, unix_socket ? ConnectUnix(addr.path) : ConnectTcp(addr.host, addr.port));
  }
  return SendFd(fd.get(), batches, a);
}

Status SendZmq(const StreamUrl& addr, const std::vector<TensorSet>& batches, const Args& a) {
  ZmqSenderOptions o;
  auto enc = ParseZmqEncoding(a.encoding);
  if (!enc) return InvalidArgument("--encoding " + a.encoding + ": native, tensorcom, tensorcom-single or zio");
  o.encoding = *enc;
  o.pattern = addr.pattern;
  o.bind = Binds(addr, a);
  o.drop_metadata = a.drop_metadata;
  o.linger_ms = -1;  // exit only once everything is delivered
  TS_ASSIGN_OR_RETURN(auto tx, ZmqSender::Create(addr.endpoint, o));
  if (o.bind) fmt::print(stderr, "tensorsafe send: bound to {}\n", tx->endpoint());
  if (o.pattern == ZmqPattern::kPubSub) TS_RETURN_IF_ERROR(tx->WaitForSubscriber(60000));
  for (const TensorSet& b : batches) TS_RETURN_IF_ERROR(tx->Send(b));
  if (*enc == ZmqEncoding::kNative) TS_RETURN_IF_ERROR(tx->SendEnd());
  return Status::OK();
}

int Run(const Args& a) {
  ::signal(SIGPIPE, SIG_IGN);  // a vanished reader is an EPIPE error, not a kill
  if (a.bind && a.connect) return Fail("send", InvalidArgument("--bind and --connect contradict each other"));
  auto addr = ParseAddress(a.address, StreamRole::kSend, a.pub, "send");
  if (!addr.ok()) return Fail("send", addr.status());
  auto batches = SourceBatches(a.source, a.batch);
  if (!batches.ok()) return Fail("send", batches.status());
  Status s;
  switch (addr->transport) {
    case StreamUrl::Transport::kStdio:
    case StreamUrl::Transport::kFd: s = SendFd(addr->fd, *batches, a); break;
    case StreamUrl::Transport::kTcpRaw:
    case StreamUrl::Transport::kUnix: s = SendSocket(*addr, *batches, a); break;
    case StreamUrl::Transport::kZmq: s = SendZmq(*addr, *batches, a); break;
  }
  if (!s.ok()) return Fail("send", s.WithContext(a.address));
  return kExitOk;
}

std::function<int()> SetupCommand(CLI::App& sub) {
  auto a = std::make_shared<Args>();
  sub.add_option("SOURCE", a->source, "Tensor file (.tsafe, .npy, .npz)")->required();
  sub.add_option("ADDRESS", a->address,
                 "- (stdout), fd://N, tcp-raw://HOST:PORT, unix://PATH, or ZeroMQ zpush://HOST:PORT, zpub://HOST:PORT "
                 "(+ipc: zpush+ipc:///PATH)")
      ->required();
  sub.add_option("--batch", a->batch, "Tensors per batch (0 = the whole file in one batch)");
  sub.add_option("--encoding", a->encoding,
                 "native | tenbin (fd streams); native | tensorcom | tensorcom-single | zio (ZeroMQ)");
  sub.add_flag("--bind", a->bind, "Listen/bind instead of the address's default");
  sub.add_flag("--connect", a->connect, "Connect instead of the address's default");
  sub.add_flag("--pub", a->pub, "Deprecated: a bare ZeroMQ endpoint is PUB (use zpub://); PUB waits for a subscriber");
  sub.add_flag("--drop-metadata", a->drop_metadata, "Send metadata-less encodings (tenbin) without metadata");
  return [a] { return Run(*a); };
}

}  // namespace

TS_REGISTER_COMMAND("send", "Send a tensor file as a stream of batches (pipe, socket, ZeroMQ)", SetupCommand);

}  // namespace tensorsafe::cli
