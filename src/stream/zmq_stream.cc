// ZmqSender / ZmqReceiver (include/tensorsafe/stream/zmq.h), on cppzmq.
// Frame layouts: docs/STREAM.md §9.
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <zmq.hpp>

#include "formats/codec_util.h"
#include "stream/internal.h"
#include "stream/native_codec.h"
#include "tensorsafe/formats/zio.h"
#include "tensorsafe/stream/zmq.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using tensorsafe::internal::Str;

Status ZmqError(const zmq::error_t& e, const std::string& what) { return IOError(what + ": " + e.what(), e.num()); }

// Binds or connects `socket`; `bound_to` gets the endpoint it is reachable
// at (a bound "tcp://127.0.0.1:*" names its port).
Status Attach(zmq::socket_t& socket, bool bind, const std::string& endpoint, std::string& bound_to) {
  try {
    if (bind) {
      socket.bind(endpoint);
      bound_to = socket.get(zmq::sockopt::last_endpoint);
    } else {
      socket.connect(endpoint);
      bound_to = endpoint;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError(e, (bind ? "bind " : "connect ") + endpoint);
  }
  return Status::OK();
}

// Bytes of frames handed to libzmq and not yet released by it. Shared with
// the free callbacks, which run on libzmq's I/O thread, possibly after the
// sender is gone.
struct QueueState {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t queued = 0;
  std::uint64_t peak = 0;
};

struct FrameHold {
  std::shared_ptr<const void> owner;
  std::shared_ptr<QueueState> queue;
  std::uint64_t bytes;
};

void ReleaseFrame(void* /*data*/, void* hint) {
  auto* h = static_cast<FrameHold*>(hint);
  std::shared_ptr<QueueState> queue = std::move(h->queue);
  const std::uint64_t bytes = h->bytes;
  delete h;  // the owner goes first: once Drain() sees nothing queued, every owner is released
  {
    std::lock_guard<std::mutex> lock(queue->mu);
    queue->queued -= bytes;
  }
  queue->cv.notify_all();
}

// Waits until `pred` holds, up to timeout_ms (-1 = forever); false on timeout.
template <typename Pred>
bool WaitFor(QueueState& q, std::unique_lock<std::mutex>& lock, int timeout_ms, Pred pred) {
  if (timeout_ms < 0) {
    q.cv.wait(lock, pred);
    return true;
  }
  return q.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), pred);
}

// ZeroMQ state belongs to the process that made it. A forked child inherits
// the parent's context without its I/O and reaper threads: sockets made on it
// never send or receive, and closing an inherited socket (or terminating the
// context) posts commands through the mailbox the child shares with the
// parent, into the parent's threads. So each process gets its own context,
// and objects inherited across fork() are left alone (leaked) in the child;
// pyzmq checks the pid for the same reason.
struct ProcessBound {
  pid_t pid = ::getpid();
  bool foreign() const { return ::getpid() != pid; }
  Status Check(const char* what) const {
    if (!foreign()) return Status::OK();
    return FailedPrecondition(std::string(what) + " was made by process " + std::to_string(pid) +
                              " and is used in process " + std::to_string(::getpid()) +
                              " (a fork): ZeroMQ sockets do not cross fork(); open a new one in this process");
  }
};

// Never closes `socket` nor releases `ctx`: the child's copies of the
// parent's objects (see ProcessBound).
void Abandon(zmq::socket_t& socket, std::shared_ptr<zmq::context_t>& ctx) {
  (void)new zmq::socket_t(std::move(socket));
  (void)new std::shared_ptr<zmq::context_t>(std::move(ctx));
}

// One context per process while any sender or receiver exists: inproc://
// endpoints only connect sockets of the same context. The last owner's
// release terminates it, waiting for each socket's linger. After a fork the
// child starts a context of its own (the parent's is never touched).
std::shared_ptr<zmq::context_t> SharedContext() {
  static std::mutex mu;
  static std::weak_ptr<zmq::context_t> weak;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (owner != ::getpid()) {
    // The parent's weak reference is dropped without touching its context
    // (only the control block's counts change, in this process's memory).
    weak = std::weak_ptr<zmq::context_t>();
    owner = ::getpid();
  }
  auto ctx = weak.lock();
  if (!ctx) {
    ctx = std::make_shared<zmq::context_t>(1);
    weak = ctx;
  }
  return ctx;
}

}  // namespace

std::string_view ZmqEncodingName(ZmqEncoding e) {
  switch (e) {
    case ZmqEncoding::kNative: return "native";
    case ZmqEncoding::kTensorcom: return "tensorcom";
    case ZmqEncoding::kTensorcomSingle: return "tensorcom-single";
    case ZmqEncoding::kZio: return "zio";
  }
  return "?";
}

std::optional<ZmqEncoding> ParseZmqEncoding(std::string_view name) {
  for (ZmqEncoding e :
       {ZmqEncoding::kNative, ZmqEncoding::kTensorcom, ZmqEncoding::kTensorcomSingle, ZmqEncoding::kZio}) {
    if (ZmqEncodingName(e) == name) return e;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- sender

class ZmqSender::Impl {
 public:
  explicit Impl(ZmqSenderOptions o) : opt_(std::move(o)), queue_(std::make_shared<QueueState>()) {}
  ~Impl() {
    if (owner_.foreign()) {
      Abandon(socket_, ctx_);
      return;
    }
    socket_.close();  // ctx_'s last owner waits up to linger_ms for queued messages
  }

  Status Open(const std::string& endpoint) {
    try {
      socket_ =
          zmq::socket_t(*ctx_, opt_.pattern == ZmqPattern::kPushPull ? zmq::socket_type::push : zmq::socket_type::xpub);
      socket_.set(zmq::sockopt::sndhwm, opt_.send_hwm);
      socket_.set(zmq::sockopt::sndtimeo, opt_.send_timeout_ms);
      socket_.set(zmq::sockopt::linger, opt_.linger_ms);
    } catch (const zmq::error_t& e) {
      return ZmqError(e, "socket for " + endpoint);
    }
    return Attach(socket_, opt_.bind, endpoint, endpoint_);
  }

  // A frame sent from `data` (owned by `owner`), or from a tracked copy when
  // there is no owner. Counts toward the queued bytes until libzmq frees it.
  // An owner is any non-empty shared_ptr, its stored pointer null or not:
  // a release token (python/src/stream.cc) owns no object of its own.
  zmq::message_t Frame(std::span<const std::byte> data, std::shared_ptr<const void> owner) {
    if (data.empty()) return zmq::message_t();
    if (owner.use_count() == 0) {
      auto copy = std::shared_ptr<std::byte[]>(new std::byte[data.size()]);
      std::memcpy(copy.get(), data.data(), data.size());
      data = {copy.get(), data.size()};
      owner = std::move(copy);
      copied_ += data.size();
    }
    auto* hold = new FrameHold{std::move(owner), queue_, data.size()};
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->queued += data.size();
      queue_->peak = std::max(queue_->peak, queue_->queued);
    }
    try {
      return zmq::message_t(const_cast<std::byte*>(data.data()), data.size(), &ReleaseFrame, hold);
    } catch (...) {
      ReleaseFrame(nullptr, hold);  // libzmq did not take it
      throw;
    }
  }

  // Waits for room for `bytes` more (always room when nothing is queued, so
  // a message larger than the bound still goes, alone).
  Status WaitForRoom(std::uint64_t bytes) {
    if (opt_.max_queued_bytes == 0) return Status::OK();
    std::unique_lock<std::mutex> lock(queue_->mu);
    const bool ok = WaitFor(*queue_, lock, opt_.send_timeout_ms,
                            [&] { return queue_->queued == 0 || queue_->queued + bytes <= opt_.max_queued_bytes; });
    if (!ok) return IOError("send timed out: " + Str(queue_->queued) + " bytes still queued", EAGAIN);
    return Status::OK();
  }

  Result<std::vector<zmq::message_t>> Encode(const TensorSet& b) {
    std::vector<zmq::message_t> frames;
    switch (opt_.encoding) {
      case ZmqEncoding::kNative: {
        TS_ASSIGN_OR_RETURN(auto e, internal::EncodeBatch(b, sent_, opt_.limits));
        frames.emplace_back(e.head.data(), e.head.size());
        for (const Tensor& t : b.tensors) frames.push_back(Frame(t.data, t.owner));
        break;
      }
      case ZmqEncoding::kTensorcom: {
        TS_ASSIGN_OR_RETURN(auto headers, internal::TenbinHeaders(b, opt_.tenbin, opt_.drop_metadata));
        for (std::size_t k = 0; k < headers.size(); ++k) {
          frames.emplace_back(headers[k].data(), headers[k].size());
          frames.push_back(Frame(b.tensors[k].data, b.tensors[k].owner));
        }
        break;
      }
      case ZmqEncoding::kTensorcomSingle: {
        TS_ASSIGN_OR_RETURN(auto headers, internal::TenbinHeaders(b, opt_.tenbin, opt_.drop_metadata));
        std::size_t size = 0;
        for (std::size_t k = 0; k < headers.size(); ++k) {
          size += 32 + *internal::AlignUp(headers[k].size(), 64) + *internal::AlignUp(b.tensors[k].data.size(), 64);
        }
        zmq::message_t m(size);
        auto* p = static_cast<std::byte*>(m.data());
        std::memset(p, 0, size);
        auto chunk = [&p](std::span<const std::byte> payload) {
          std::memcpy(p, "~TenBin~", 8);
          internal::Store64(p + 8, payload.size());
          if (!payload.empty()) std::memcpy(p + 16, payload.data(), payload.size());
          p += 16 + *internal::AlignUp(payload.size(), 64);
        };
        for (std::size_t k = 0; k < headers.size(); ++k) {
          chunk(internal::AsByteSpan(headers[k]));
          chunk(b.tensors[k].data);
        }
        frames.push_back(std::move(m));
        break;
      }
      case ZmqEncoding::kZio: {
        TS_ASSIGN_OR_RETURN(zio::Message m, zio::FromTensorSet(b));
        m.level = opt_.zio_level;
        m.form = opt_.zio_form;
        m.origin = opt_.zio_origin;
        m.granule = opt_.zio_granule;
        m.seqno = opt_.zio_first_seqno + sent_;
        zio::Message head = m;
        head.payload.clear();
        TS_ASSIGN_OR_RETURN(auto hf, zio::EncodeFrames(head));
        for (const std::string& f : hf) frames.emplace_back(f.data(), f.size());
        for (std::size_t k = 0; k < m.payload.size(); ++k) {
          const bool same = k < b.tensors.size() && m.payload[k].data() == b.tensors[k].data.data();
          frames.push_back(Frame(m.payload[k], same ? b.tensors[k].owner : m.owner));
        }
        break;
      }
    }
    return frames;
  }

  Status SendFrames(std::vector<zmq::message_t>& frames) {
    try {
      for (std::size_t k = 0; k < frames.size(); ++k) {
        const auto flags = k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        if (!socket_.send(frames[k], flags)) {
          // Only the first frame can meet a full queue: libzmq accepts the
          // rest of a message whose first frame it took.
          return IOError("send timed out after " + Str(opt_.send_timeout_ms) + " ms: the peer's queue is full", EAGAIN);
        }
      }
    } catch (const zmq::error_t& e) {
      return ZmqError(e, "send");
    }
    ++sent_;
    return Status::OK();
  }

  Status Send(const TensorSet& b) {
    TS_RETURN_IF_ERROR(owner_.Check("this ZeroMQ sender"));
    std::uint64_t bytes = 0;
    for (const Tensor& t : b.tensors) bytes += t.data.size();
    TS_RETURN_IF_ERROR(WaitForRoom(bytes));
    try {
      TS_ASSIGN_OR_RETURN(auto frames, Encode(b));
      return SendFrames(frames);
    } catch (const zmq::error_t& e) {
      return ZmqError(e, "encode");
    }
  }

  ZmqSenderOptions opt_;
  std::shared_ptr<QueueState> queue_;
  ProcessBound owner_;
  std::shared_ptr<zmq::context_t> ctx_ = SharedContext();
  zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t sent_ = 0, copied_ = 0;
};

Result<std::unique_ptr<ZmqSender>> ZmqSender::Create(const std::string& endpoint, const ZmqSenderOptions& o) {
  if (o.send_hwm < 0) return InvalidArgument("send_hwm " + std::to_string(o.send_hwm) + " is negative");
  auto impl = std::make_unique<Impl>(o);
  TS_RETURN_IF_ERROR(impl->Open(endpoint));
  return std::make_unique<ZmqSender>(std::move(impl));
}
ZmqSender::ZmqSender(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqSender::~ZmqSender() = default;
Status ZmqSender::Send(const TensorSet& batch) { return impl_->Send(batch); }

Status ZmqSender::SendEnd() { return SendEnd(impl_->opt_.send_timeout_ms); }

Status ZmqSender::SendEnd(int timeout_ms) {
  TS_RETURN_IF_ERROR(impl_->owner_.Check("this ZeroMQ sender"));
  if (impl_->opt_.encoding != ZmqEncoding::kNative) {
    return Unsupported(std::string(ZmqEncodingName(impl_->opt_.encoding)) + " has no end-of-stream marker");
  }
  const std::string end = internal::EncodeEndMessage(impl_->sent_);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(end.data(), end.size());
  try {
    impl_->socket_.set(zmq::sockopt::sndtimeo, timeout_ms);
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "send end");
  }
  Status s = impl_->SendFrames(frames);
  try {
    impl_->socket_.set(zmq::sockopt::sndtimeo, impl_->opt_.send_timeout_ms);
  } catch (const zmq::error_t& e) {
    if (s.ok()) s = ZmqError(e, "send end");
  }
  if (!s.ok() && s.error_number() == EAGAIN) {
    return IOError("the end-of-stream marker found no room within " + Str(timeout_ms) + " ms (no receiver?)", EAGAIN);
  }
  return s;
}

Status ZmqSender::WaitForSubscriber(int timeout_ms) {
  TS_RETURN_IF_ERROR(impl_->owner_.Check("this ZeroMQ sender"));
  if (impl_->opt_.pattern != ZmqPattern::kPubSub) return FailedPrecondition("not a PUB sender");
  try {
    impl_->socket_.set(zmq::sockopt::rcvtimeo, timeout_ms);
    while (true) {
      zmq::message_t m;
      if (!impl_->socket_.recv(m)) return IOError("no subscriber within " + Str(timeout_ms) + " ms", EAGAIN);
      if (m.size() >= 1 && static_cast<const std::uint8_t*>(m.data())[0] == 1) return Status::OK();
    }
  } catch (const zmq::error_t& e) {
    return ZmqError(e, "wait for subscriber");
  }
}

Status ZmqSender::Drain(int timeout_ms) {
  TS_RETURN_IF_ERROR(impl_->owner_.Check("this ZeroMQ sender"));
  std::unique_lock<std::mutex> lock(impl_->queue_->mu);
  if (!WaitFor(*impl_->queue_, lock, timeout_ms, [&] { return impl_->queue_->queued == 0; })) {
    return IOError("drain timed out with " + Str(impl_->queue_->queued) + " bytes queued", EAGAIN);
  }
  return Status::OK();
}

std::string ZmqSender::endpoint() const { return impl_->endpoint_; }
std::uint64_t ZmqSender::queued_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->queue_->mu);
  return impl_->queue_->queued;
}
std::uint64_t ZmqSender::peak_queued_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->queue_->mu);
  return impl_->queue_->peak;
}
std::uint64_t ZmqSender::messages_sent() const { return impl_->sent_; }
std::uint64_t ZmqSender::bytes_copied() const { return impl_->copied_; }

// ---------------------------------------------------------------- receiver

class ZmqReceiver::Impl {
 public:
  explicit Impl(ZmqReceiverOptions o) : opt_(std::move(o)) {}
  ~Impl() {
    if (owner_.foreign()) {
      Abandon(socket_, ctx_);
      return;
    }
    socket_.close();
  }

  Status Open(const std::string& endpoint) {
    try {
      const bool sub = opt_.pattern == ZmqPattern::kPubSub;
      socket_ = zmq::socket_t(*ctx_, sub ? zmq::socket_type::sub : zmq::socket_type::pull);
      socket_.set(zmq::sockopt::rcvhwm, opt_.recv_hwm);
      socket_.set(zmq::sockopt::rcvtimeo, opt_.recv_timeout_ms);
      socket_.set(zmq::sockopt::linger, 0);
      if (sub) socket_.set(zmq::sockopt::subscribe, opt_.subscribe);
    } catch (const zmq::error_t& e) {
      return ZmqError(e, "socket for " + endpoint);
    }
    return Attach(socket_, opt_.bind, endpoint, endpoint_);
  }

  using Frames = std::vector<zmq::message_t>;

  static std::span<const std::byte> View(const zmq::message_t& m) {
    return {static_cast<const std::byte*>(m.data()), m.size()};
  }

  Result<std::optional<TensorSet>> DecodeNative(const std::shared_ptr<Frames>& frames) {
    const StreamReaderOptions& no = opt_.native;
    auto f0 = View((*frames)[0]);
    TS_ASSIGN_OR_RETURN(auto h, internal::DecodeHeader(f0, no));
    last_sequence_ = h.sequence;
    if (h.kind == internal::MessageKind::kEnd) {
      if (frames->size() != 1 || f0.size() != internal::kMessageHeaderSize) {
        return Corruption("end-of-stream message with extra bytes or frames");
      }
      return std::optional<TensorSet>();
    }
    if (f0.size() != internal::kMessageHeaderSize + h.descriptor_bytes) {
      return Corruption("frame 0 is " + Str(f0.size()) + " bytes; the header says " +
                        Str(internal::kMessageHeaderSize + h.descriptor_bytes));
    }
    if (frames->size() != 1 + std::size_t{h.tensor_count}) {
      return Corruption("message has " + Str(frames->size()) + " frames; " + Str(h.tensor_count) + " tensors need " +
                        Str(1 + std::uint64_t{h.tensor_count}));
    }
    TS_ASSIGN_OR_RETURN(auto d, internal::DecodeDescriptors(h, f0.subspan(internal::kMessageHeaderSize), no));
    TensorSet set;
    set.metadata_json = std::move(d.metadata_json);
    for (std::size_t k = 0; k < d.tensors.size(); ++k) {
      auto bytes = View((*frames)[k + 1]);
      TS_RETURN_IF_ERROR(internal::CheckData(d.tensors[k].info, bytes, no));
      Tensor t;
      t.info = std::move(d.tensors[k].info);
      t.data = bytes;
      t.owner = frames;
      set.tensors.push_back(std::move(t));
    }
    return std::optional<TensorSet>(std::move(set));
  }

  Result<std::optional<TensorSet>> Decode(const std::shared_ptr<Frames>& frames) {
    std::vector<std::span<const std::byte>> spans;
    for (const auto& m : *frames) spans.push_back(View(m));
    const std::string name = "message " + Str(received_);
    switch (opt_.encoding) {
      case ZmqEncoding::kNative: return DecodeNative(frames);
      case ZmqEncoding::kTensorcom: {
        tenbin::ReadOptions ro;
        ro.limits = opt_.native.limits;
        TS_ASSIGN_OR_RETURN(TensorSet s, tenbin::DecodePayloads(spans, frames, name, ro));
        return std::optional<TensorSet>(std::move(s));
      }
      case ZmqEncoding::kTensorcomSingle: {
        if (spans.size() != 1) return Corruption(name + ": " + Str(spans.size()) + " frames; expected 1");
        tenbin::ReadOptions ro;
        ro.limits = opt_.native.limits;
        TS_ASSIGN_OR_RETURN(TensorSet s, tenbin::Decode(spans[0], frames, name, ro));
        return std::optional<TensorSet>(std::move(s));
      }
      case ZmqEncoding::kZio: {
        zio::ReadOptions ro;
        ro.limits = opt_.native.limits;
        TS_ASSIGN_OR_RETURN(zio::Message m, zio::DecodeFrames(spans, frames, name, ro));
        TS_ASSIGN_OR_RETURN(TensorSet s, zio::ToTensorSet(m, name, ro));
        return std::optional<TensorSet>(std::move(s));
      }
    }
    return Internal("unknown encoding");
  }

  // Copies tensors that are not aligned as asked, and counts every byte not
  // viewed in place (the codecs copy misaligned data themselves).
  void Realign(TensorSet& set, const Frames& frames) {
    for (Tensor& t : set.tensors) {
      const auto* p = t.data.data();
      bool in_frame = t.data.empty();
      for (const auto& m : frames) {
        const auto* b = static_cast<const std::byte*>(m.data());
        if (p >= b && p + t.data.size() <= b + m.size()) in_frame = true;
      }
      const std::size_t align = std::max(internal::NaturalAlignment(t.info.dtype), opt_.min_alignment);
      if (in_frame && reinterpret_cast<std::uintptr_t>(p) % align != 0) {
        auto buf = internal::AlignedBuffer::Allocate(t.data.size());
        std::memcpy(buf->data(), p, t.data.size());
        t.data = {buf->data(), t.data.size()};
        t.owner = std::move(buf);
        in_frame = false;
      }
      if (!in_frame) copied_ += t.data.size();
    }
  }

  Result<std::optional<TensorSet>> Receive() {
    TS_RETURN_IF_ERROR(owner_.Check("this ZeroMQ receiver"));
    auto frames = std::make_shared<Frames>();
    try {
      do {
        zmq::message_t m;
        if (!socket_.recv(m)) {
          if (frames->empty()) return IOError("receive timed out after " + Str(opt_.recv_timeout_ms) + " ms", EAGAIN);
          continue;  // rest of a multipart message: it is already here
        }
        frames->push_back(std::move(m));
      } while (frames->back().more());
    } catch (const zmq::error_t& e) {
      return ZmqError(e, "receive");
    }
    ++received_;
    auto r = Decode(frames);
    if (!r.ok())
      return r.status().WithContext("zmq " + std::string(ZmqEncodingName(opt_.encoding)) + " message " +
                                    Str(received_ - 1));
    if (*r) Realign(**r, *frames);
    return r;
  }

  ZmqReceiverOptions opt_;
  ProcessBound owner_;
  std::shared_ptr<zmq::context_t> ctx_ = SharedContext();
  zmq::socket_t socket_;
  std::string endpoint_;
  std::uint64_t received_ = 0, copied_ = 0;
  std::optional<std::uint64_t> last_sequence_;
};

Result<std::unique_ptr<ZmqReceiver>> ZmqReceiver::Create(const std::string& endpoint, const ZmqReceiverOptions& o) {
  auto impl = std::make_unique<Impl>(o);
  TS_RETURN_IF_ERROR(impl->Open(endpoint));
  return std::make_unique<ZmqReceiver>(std::move(impl));
}
ZmqReceiver::ZmqReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqReceiver::~ZmqReceiver() = default;
Result<std::optional<TensorSet>> ZmqReceiver::Receive() { return impl_->Receive(); }
std::string ZmqReceiver::endpoint() const { return impl_->endpoint_; }
std::uint64_t ZmqReceiver::messages_received() const { return impl_->received_; }
std::uint64_t ZmqReceiver::bytes_copied() const { return impl_->copied_; }
std::optional<std::uint64_t> ZmqReceiver::last_sequence() const { return impl_->last_sequence_; }

}  // namespace tensorsafe
