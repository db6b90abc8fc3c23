// Batches of tensors over ZeroMQ: PUSH/PULL and PUB/SUB, in three encodings
// (docs/STREAM.md §9):
//   kNative          frame 0 = native message header + descriptors, then one
//                    frame per tensor's data (checksummed; end-of-stream
//                    marker supported);
//   kTensorcom       tensorcom's multipart: [tenbin header payload, data]
//                    per tensor, no magic or padding;
//   kTensorcomSingle one frame holding a whole .ten buffer;
//   kZio             ZIO TENS: header frame, 24-byte coordinate frame, one
//                    payload frame per tensor.
//
// Zero copy. Sending: a tensor whose Tensor::owner is set (not empty; its
// stored pointer may be null) is sent from its own memory
// (zmq_msg_init_data); libzmq releases the owner when it has sent the frame.
// A tensor without an owner is copied first (its memory could not be kept
// alive otherwise; the sender's bytes_copied() counts them).
// kTensorcomSingle always copies. Receiving: the tensors view the received
// ZeroMQ frames, kept alive by a shared owner; a frame that is not aligned
// for its element type (or for min_alignment) is copied instead (the
// receiver's bytes_copied() counts them).
//
// Flow control: a sender holds at most `send_hwm` messages per peer in
// libzmq's queue and at most `max_queued_bytes` of frames not yet released
// by libzmq; beyond either, PUSH blocks (up to send_timeout_ms), so a slow
// or stopped reader bounds the sender's memory. PUB never blocks at the high
// water mark: libzmq drops messages for slow subscribers (ZeroMQ semantics),
// the byte bound still applies.
//
// Addresses are ZeroMQ endpoints: tcp://127.0.0.1:5555, tcp://127.0.0.1:*
// (ephemeral; endpoint() tells which), ipc:///tmp/x, inproc://name.
//
// Senders and receivers of a process share one ZeroMQ context (inproc://
// needs that); it ends with the last of them, waiting up to each socket's
// linger_ms for undelivered messages. A forked child gets a context of its
// own: senders and receivers it inherited refuse to work there
// (kFailedPrecondition) and are destroyed without touching the parent's
// sockets; new ones work normally.
//
// Thread safety: a sender or receiver is used by one thread at a time.
// Received batches may be used from any thread, after the receiver is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe {

enum class ZmqEncoding : std::uint8_t { kNative, kTensorcom, kTensorcomSingle, kZio };
enum class ZmqPattern : std::uint8_t { kPushPull, kPubSub };

// "native", "tensorcom", "tensorcom-single", "zio".
std::string_view ZmqEncodingName(ZmqEncoding e);
std::optional<ZmqEncoding> ParseZmqEncoding(std::string_view name);

struct ZmqSenderOptions {
  ZmqPattern pattern = ZmqPattern::kPushPull;
  ZmqEncoding encoding = ZmqEncoding::kNative;
  bool bind = true;   // else connect
  int send_hwm = 16;  // messages (ZMQ_SNDHWM)
  // Bytes of frames handed to libzmq and not yet released; 0 = no bound.
  std::uint64_t max_queued_bytes = std::uint64_t{256} << 20;
  int send_timeout_ms = -1;  // -1 = block
  int linger_ms = 5000;      // on close: time to deliver what is queued
  Limits limits;
  // kTensorcom*: info naming; batch/tensor metadata is refused unless dropped.
  tenbin::WriteOptions tenbin;
  bool drop_metadata = false;
  // kZio: the message's level, form and coordinates; seqno counts up from
  // zio_first_seqno, one per message.
  std::uint8_t zio_level = 0;
  std::string zio_form = "TENS";
  std::uint64_t zio_origin = 0;
  std::uint64_t zio_granule = 0;
  std::uint64_t zio_first_seqno = 0;
};

struct ZmqReceiverOptions {
  ZmqPattern pattern = ZmqPattern::kPushPull;
  ZmqEncoding encoding = ZmqEncoding::kNative;
  bool bind = false;  // else connect
  int recv_hwm = 16;
  int recv_timeout_ms = -1;  // -1 = block; a timeout is kIOError EAGAIN
  std::string subscribe;     // SUB prefix filter ("" = everything)
  // Tensors whose frame is not aligned to their element type (or to this,
  // when larger) are copied into aligned memory.
  std::size_t min_alignment = 0;
  // Native: limits and data checksums as for StreamReader.
  StreamReaderOptions native;
};

class ZmqSender {
 public:
  // Creates the socket and binds or connects. Errors: kInvalidArgument (bad
  // endpoint or options), kIOError (bind/connect failed, with errno).
  static Result<std::unique_ptr<ZmqSender>> Create(const std::string& endpoint, const ZmqSenderOptions& options = {});
  ~ZmqSender();  // queued messages are still delivered (see linger_ms above)
  ZmqSender(const ZmqSender&) = delete;
  ZmqSender& operator=(const ZmqSender&) = delete;

  // Queues one batch as one multipart message. Errors: kInvalidArgument /
  // kUnsupported / kLimitExceeded (the batch cannot be encoded), kIOError
  // (EAGAIN when send_timeout_ms passed with the queue full).
  Status Send(const TensorSet& batch);
  // kNative: sends the end-of-stream marker (a receiver then returns
  // nullopt). Other encodings have none: kUnsupported. The second form waits
  // at most timeout_ms (-1: forever) for room instead of send_timeout_ms.
  Status SendEnd();
  Status SendEnd(int timeout_ms);
  // PUB: waits until a subscriber's subscription has arrived (ZeroMQ drops
  // what is published before that). Errors: kIOError EAGAIN on timeout,
  // kFailedPrecondition for PUSH.
  Status WaitForSubscriber(int timeout_ms);
  // PUSH: waits until libzmq has released every frame (all sent to the
  // kernel, their owners released), up to timeout_ms. kIOError EAGAIN on
  // timeout.
  Status Drain(int timeout_ms);

  // The bound or connected endpoint (with the real port for tcp://...:*).
  std::string endpoint() const;
  std::uint64_t queued_bytes() const;       // frames not yet released now
  std::uint64_t peak_queued_bytes() const;  // the most ever queued
  std::uint64_t messages_sent() const;
  std::uint64_t bytes_copied() const;  // tensor bytes copied for want of an owner

  class Impl;
  explicit ZmqSender(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

class ZmqReceiver {
 public:
  static Result<std::unique_ptr<ZmqReceiver>> Create(const std::string& endpoint,
                                                     const ZmqReceiverOptions& options = {});
  ~ZmqReceiver();
  ZmqReceiver(const ZmqReceiver&) = delete;
  ZmqReceiver& operator=(const ZmqReceiver&) = delete;

  // The next batch, or nullopt for a native end-of-stream marker. A
  // malformed message is an error (kCorruption, kUnsupported,
  // kLimitExceeded) and the receiver stays usable: the next call reads the
  // next message. kIOError EAGAIN after recv_timeout_ms.
  Result<std::optional<TensorSet>> Receive();

  std::string endpoint() const;
  std::uint64_t messages_received() const;
  std::uint64_t bytes_copied() const;  // tensor bytes that could not be viewed in place
  // kNative: the header sequence of the last message received (a batch's,
  // or an end marker's: the number of batches the sender sent before it).
  // nullopt before the first message and for other encodings.
  std::optional<std::uint64_t> last_sequence() const;

  class Impl;
  explicit ZmqReceiver(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorsafe
