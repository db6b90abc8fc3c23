// tensorsafe._native stream classes: StreamWriter / StreamReader over a file
// descriptor (stream/fd.h) and ZmqSender / ZmqReceiver (stream/zmq.h). Thin:
// entries are converted with the GIL held, then every send, receive, read
// and write runs with it released. Received tensors are TensorBuffers that
// view the message (one aligned buffer for fd streams, the ZeroMQ frames
// otherwise) and keep it alive.
//
// ZeroMQ sends never let libzmq hold Python memory past the call: its I/O
// thread could not release a Python owner without the GIL. Small tensors are
// copied (ZmqSender copies tensors without an owner); large ones over tcp://
// or ipc:// go zero-copy and send() returns once libzmq has released their
// frames (written them to the socket), as a byte-stream write returns once
// the bytes are in the kernel. Either way the caller's arrays are free again
// when send() returns.
//
// send(wait=False) returns at once instead, with a SendTracker that holds
// the batch's Python objects until libzmq has released the frames (pyzmq's
// send(copy=False, track=True)). The release only sets a flag; the objects
// are dropped later, with the GIL, by whoever drops the tracker, which
// waits for the release first if it has not come.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <unistd.h>

#include "buffer.h"
#include "common.h"
#include "entries.h"
#include "tensorsafe/stream/fd.h"
#include "tensorsafe/stream/url.h"
#include "tensorsafe/stream/zmq.h"

namespace tensorsafe::python {
namespace {

// (list of TensorBuffer, metadata JSON or ""), or None at the end.
py::object BatchToPython(std::optional<TensorSet>&& batch) {
  if (!batch) return py::none();
  py::list tensors(batch->tensors.size());
  for (std::size_t i = 0; i < batch->tensors.size(); ++i) tensors[i] = MakeBuffer(std::move(batch->tensors[i]));
  return py::make_tuple(tensors, py::str(batch->metadata_json));
}

// The batch's entries as a TensorSet viewing them; streams carry dense
// tensors only (STREAM.md §5: layout 0).
TensorSet BatchFromPython(const std::vector<Entry>& entries, const std::string& metadata_json) {
  for (const Entry& e : entries) {
    if (e.coo) {
      Throw(Unsupported("tensor \"" + e.name +
                        "\": a sparse COO tensor cannot be sent in a stream batch "
                        "(the wire format is dense only); send t.to_dense() or its indices and values"));
    }
  }
  return ToTensorSet(entries, metadata_json);
}

template <typename T>
T& Live(const std::unique_ptr<T>& p, const char* what) {
  if (!p) Throw(FailedPrecondition(std::string(what) + " is closed"));
  return *p;
}

// Destroys `p` without the GIL (a ZmqSender may wait up to linger_ms).
template <typename T>
void CloseNoGil(std::unique_ptr<T>& p) {
  std::unique_ptr<T> doomed = std::move(p);
  py::gil_scoped_release nogil;
  doomed.reset();
}

struct PyStreamWriter {
  std::unique_ptr<StreamWriter> w;
};
struct PyStreamReader {
  std::unique_ptr<StreamReader> r;
};
struct PyZmqSender {
  std::unique_ptr<ZmqSender> s;
  // Large tensors zero-copy (see the top of this file): not over inproc://,
  // whose frames are released only when the receiver drops them, nor with a
  // send timeout, which could not bound the wait for the release.
  bool zero_copy = false;
  ~PyZmqSender() { CloseNoGil(s); }
};

// Tensors at least this large go zero-copy (pyzmq's COPY_THRESHOLD is 64 KiB
// for the same reason: below it, a copy costs less than the bookkeeping).
constexpr std::size_t kZeroCopyBytes = std::size_t{64} << 10;

// Set once every copy of the token it hands out is gone. A token keeps its
// Released alive (`self`), so it may outlive the send that made it.
class Released {
 public:
  static std::shared_ptr<const void> Token(const std::shared_ptr<Released>& self) {
    return std::shared_ptr<const void>(static_cast<const void*>(nullptr), [self](const void*) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->done_ = true;
      self->cv_.notify_all();
    });
  }
  // Done within `timeout_ms` (negative: no limit)?
  bool WaitFor(int timeout_ms) {
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout_ms < 0) {
      cv_.wait(lock, [this] { return done_; });
      return true;
    }
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done_; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// A batch sent with send(wait=False): see the top of this file.
class SendTracker {
 public:
  SendTracker(std::shared_ptr<Released> released, py::object keep)
      : released_(std::move(released)), keep_(std::move(keep)), pid_(getpid()) {}
  SendTracker(const SendTracker&) = delete;
  SendTracker& operator=(const SendTracker&) = delete;
  // Runs with the GIL (Python dropped the tracker); libzmq may still read
  // the memory that keep_ owns, so it waits for the release without it.
  ~SendTracker() {
    if (!done()) {
      py::gil_scoped_release nogil;
      released_->WaitFor(-1);
    }
  }
  // In a forked child no libzmq thread reads this copy of the memory (and
  // the Released's mutex may have been copied locked): done.
  bool done() const { return !released_ || getpid() != pid_ || released_->done(); }
  bool Wait(int timeout_ms) const {
    if (done()) return true;
    py::gil_scoped_release nogil;
    return released_->WaitFor(timeout_ms);
  }

 private:
  std::shared_ptr<Released> released_;  // null: nothing was left to libzmq
  py::object keep_;
  pid_t pid_;
};

struct PyZmqReceiver {
  std::unique_ptr<ZmqReceiver> r;
  ~PyZmqReceiver() { CloseNoGil(r); }
};

ZmqPattern ParsePattern(const std::string& p) {
  if (p == "pushpull") return ZmqPattern::kPushPull;
  if (p == "pubsub") return ZmqPattern::kPubSub;
  Throw(InvalidArgument("pattern must be \"pushpull\" or \"pubsub\", not \"" + p + "\""));
}

ZmqEncoding ParseEncoding(const std::string& e) {
  std::optional<ZmqEncoding> z = ParseZmqEncoding(e);
  if (!z) {
    Throw(InvalidArgument("encoding must be \"native\", \"tensorcom\", \"tensorcom-single\" or \"zio\", not \"" + e +
                          "\""));
  }
  return *z;
}

}  // namespace

void RegisterStream(py::module_& m) {
  py::class_<PyStreamWriter>(m, "StreamWriter", "Native/tenbin batches to a file descriptor; use tensorsafe.stream.")
      .def_static(
          "to_fd",
          [](int fd, const std::string& wire, bool drop_metadata) {
            StreamWriterOptions o;
            if (wire == "tenbin") {
              o.wire = WireFormat::kTenbin;
            } else if (wire != "native") {
              Throw(InvalidArgument("wire must be \"native\" or \"tenbin\", not \"" + wire + "\""));
            }
            o.drop_metadata = drop_metadata;
            return PyStreamWriter{Unwrap(StreamWriter::ToFd(fd, o))};
          },
          py::arg("fd"), py::arg("wire") = "native", py::arg("drop_metadata") = false)
      .def(
          "write",
          [](PyStreamWriter& self, const py::iterable& items, const std::string& metadata_json) {
            StreamWriter& w = Live(self.w, "the stream writer");
            std::vector<Entry> entries = ParseEntries(items);
            TensorSet set = BatchFromPython(entries, metadata_json);
            Status s;
            {
              py::gil_scoped_release nogil;
              s = w.Write(set);
            }
            Check(s);
          },
          py::arg("entries"), py::arg("metadata_json") = "")
      .def("finish",
           [](PyStreamWriter& self) {
             StreamWriter& w = Live(self.w, "the stream writer");
             Status s;
             {
               py::gil_scoped_release nogil;
               s = w.Finish();
             }
             Check(s);
           })
      .def("close", [](PyStreamWriter& self) { self.w.reset(); })
      .def_property_readonly(
          "batches_written",
          [](const PyStreamWriter& self) { return Live(self.w, "the stream writer").batches_written(); })
      .def_property_readonly("bytes_written", [](const PyStreamWriter& self) {
        return Live(self.w, "the stream writer").bytes_written();
      });

  py::class_<PyStreamReader>(m, "StreamReader", "Batches from a file descriptor; use tensorsafe.stream.")
      .def_static(
          "from_fd",
          [](int fd, bool verify_data, std::uint32_t tenbin_arrays_per_batch, std::uint64_t max_message_bytes) {
            StreamReaderOptions o;
            o.verify_data = verify_data;
            o.tenbin_arrays_per_batch = tenbin_arrays_per_batch;
            o.max_message_bytes = max_message_bytes;
            return PyStreamReader{Unwrap(StreamReader::FromFd(fd, o))};
          },
          py::arg("fd"), py::arg("verify_data") = true, py::arg("tenbin_arrays_per_batch") = 0,
          py::arg("max_message_bytes") = std::uint64_t{4} << 30)
      .def(
          "next",
          [](PyStreamReader& self) {
            StreamReader& r = Live(self.r, "the stream reader");
            Result<std::optional<TensorSet>> b = [&] {
              py::gil_scoped_release nogil;
              return r.Next();
            }();
            return BatchToPython(Unwrap(std::move(b)));
          },
          "(tensors, metadata_json) of the next batch, or None at the end of the stream.")
      .def("close", [](PyStreamReader& self) { self.r.reset(); })
      .def_property_readonly("wire_format",
                             [](const PyStreamReader& self) -> py::object {
                               std::optional<WireFormat> w = Live(self.r, "the stream reader").wire_format();
                               if (!w) return py::none();
                               return py::str(*w == WireFormat::kTenbin ? "tenbin" : "native");
                             })
      .def_property_readonly(
          "batches_read", [](const PyStreamReader& self) { return Live(self.r, "the stream reader").batches_read(); })
      .def_property_readonly("bytes_read",
                             [](const PyStreamReader& self) { return Live(self.r, "the stream reader").bytes_read(); });

  py::class_<PyZmqSender>(m, "ZmqSender", "Batches to a ZeroMQ PUSH or PUB socket; use tensorsafe.stream.")
      .def_static(
          "create",
          [](const std::string& endpoint, const std::string& pattern, const std::string& encoding, bool bind,
             int send_hwm, std::uint64_t max_queued_bytes, int send_timeout_ms, int linger_ms, bool drop_metadata,
             bool names_as_infos) {
            ZmqSenderOptions o;
            o.pattern = ParsePattern(pattern);
            o.encoding = ParseEncoding(encoding);
            o.bind = bind;
            o.send_hwm = send_hwm;
            o.max_queued_bytes = max_queued_bytes;
            o.send_timeout_ms = send_timeout_ms;
            o.linger_ms = linger_ms;
            o.drop_metadata = drop_metadata;
            o.tenbin.names_as_infos = names_as_infos;
            Result<std::unique_ptr<ZmqSender>> s = [&] {
              py::gil_scoped_release nogil;
              return ZmqSender::Create(endpoint, o);
            }();
            auto out = std::make_unique<PyZmqSender>();
            out->s = Unwrap(std::move(s));
            out->zero_copy = send_timeout_ms < 0 && endpoint.rfind("inproc://", 0) != 0;
            return out;
          },
          py::arg("endpoint"), py::arg("pattern") = "pushpull", py::arg("encoding") = "native", py::arg("bind") = true,
          py::arg("send_hwm") = 16, py::arg("max_queued_bytes") = std::uint64_t{256} << 20,
          py::arg("send_timeout_ms") = -1, py::arg("linger_ms") = 5000, py::arg("drop_metadata") = false,
          py::arg("names_as_infos") = true)
      .def(
          "send",
          [](PyZmqSender& self, const py::iterable& items, const std::string& metadata_json, bool wait,
             py::object keep) -> std::unique_ptr<SendTracker> {
            ZmqSender& z = Live(self.s, "the ZeroMQ sender");
            std::vector<Entry> entries = ParseEntries(items);
            TensorSet set = BatchFromPython(entries, metadata_json);
            std::shared_ptr<Released> released;
            if (self.zero_copy) {
              released = std::make_shared<Released>();
              std::shared_ptr<const void> token = Released::Token(released);
              for (Tensor& t : set.tensors) {
                if (t.data.size() >= kZeroCopyBytes) t.owner = token;
              }
            }
            Status s;
            {
              py::gil_scoped_release nogil;
              s = z.Send(set);      // tensors without an owner are copied before it returns
              set.tensors.clear();  // drops this thread's tokens: libzmq holds the rest
              // A failed send may leave frames queued: they view the
              // arrays, which the caller gets back with the exception.
              if (released && (wait || !s.ok())) released->WaitFor(-1);
            }
            Check(s);
            if (wait) return nullptr;
            // The tracker owns what the frames view: the entries' arrays and
            // whatever the caller passed as their owners.
            return std::make_unique<SendTracker>(std::move(released), py::make_tuple(items, keep));
          },
          py::arg("entries"), py::arg("metadata_json") = "", py::arg("wait") = true, py::arg("keep") = py::none(),
          "wait=False: returns a SendTracker at once (None otherwise, once libzmq is done with the arrays).")
      .def(
          "send_end",
          [](PyZmqSender& self, int timeout_ms) {
            ZmqSender& z = Live(self.s, "the ZeroMQ sender");
            Status s;
            {
              py::gil_scoped_release nogil;
              s = timeout_ms == -2 ? z.SendEnd() : z.SendEnd(timeout_ms);
            }
            Check(s);
          },
          py::arg("timeout_ms") = -2, "-2: the send timeout; -1: wait forever; else milliseconds.")
      .def(
          "wait_for_subscriber",
          [](PyZmqSender& self, int timeout_ms) {
            ZmqSender& z = Live(self.s, "the ZeroMQ sender");
            Status s;
            {
              py::gil_scoped_release nogil;
              s = z.WaitForSubscriber(timeout_ms);
            }
            Check(s);
          },
          py::arg("timeout_ms"))
      .def(
          "drain",
          [](PyZmqSender& self, int timeout_ms) {
            ZmqSender& z = Live(self.s, "the ZeroMQ sender");
            Status s;
            {
              py::gil_scoped_release nogil;
              s = z.Drain(timeout_ms);
            }
            Check(s);
          },
          py::arg("timeout_ms"))
      .def("close", [](PyZmqSender& self) { CloseNoGil(self.s); })
      .def_property_readonly("endpoint",
                             [](const PyZmqSender& self) { return Live(self.s, "the ZeroMQ sender").endpoint(); })
      .def_property_readonly("messages_sent",
                             [](const PyZmqSender& self) { return Live(self.s, "the ZeroMQ sender").messages_sent(); })
      .def_property_readonly(
          "peak_queued_bytes",
          [](const PyZmqSender& self) { return Live(self.s, "the ZeroMQ sender").peak_queued_bytes(); })
      .def_property_readonly(
          "bytes_copied", [](const PyZmqSender& self) { return Live(self.s, "the ZeroMQ sender").bytes_copied(); },
          "Tensor bytes copied before sending (those under 64 KiB, or all when zero copy is off).");

  py::class_<SendTracker>(m, "SendTracker",
                          "A batch sent with send(wait=False); its arrays must not change until it is done.")
      .def(py::init([] { return std::make_unique<SendTracker>(nullptr, py::none()); }), "One already done.")
      .def_property_readonly("done", &SendTracker::done, "Whether libzmq has released every frame of the batch.")
      .def("wait", &SendTracker::Wait, py::arg("timeout_ms") = -1,
           "Waits until done (negative: no limit); returns whether it is.");

  py::class_<PyZmqReceiver>(m, "ZmqReceiver", "Batches from a ZeroMQ PULL or SUB socket; use tensorsafe.stream.")
      .def_static(
          "create",
          [](const std::string& endpoint, const std::string& pattern, const std::string& encoding, bool bind,
             int recv_hwm, int recv_timeout_ms, const std::string& subscribe, std::size_t min_alignment,
             bool verify_data, std::uint64_t max_message_bytes) {
            ZmqReceiverOptions o;
            o.pattern = ParsePattern(pattern);
            o.encoding = ParseEncoding(encoding);
            o.bind = bind;
            o.recv_hwm = recv_hwm;
            o.recv_timeout_ms = recv_timeout_ms;
            o.subscribe = subscribe;
            o.min_alignment = min_alignment;
            o.native.verify_data = verify_data;
            o.native.max_message_bytes = max_message_bytes;
            Result<std::unique_ptr<ZmqReceiver>> r = [&] {
              py::gil_scoped_release nogil;
              return ZmqReceiver::Create(endpoint, o);
            }();
            auto out = std::make_unique<PyZmqReceiver>();
            out->r = Unwrap(std::move(r));
            return out;
          },
          py::arg("endpoint"), py::arg("pattern") = "pushpull", py::arg("encoding") = "native", py::arg("bind") = false,
          py::arg("recv_hwm") = 16, py::arg("recv_timeout_ms") = -1, py::arg("subscribe") = "",
          py::arg("min_alignment") = 0, py::arg("verify_data") = true,
          py::arg("max_message_bytes") = std::uint64_t{4} << 30)
      .def(
          "receive",
          [](PyZmqReceiver& self) {
            ZmqReceiver& z = Live(self.r, "the ZeroMQ receiver");
            Result<std::optional<TensorSet>> b = [&] {
              py::gil_scoped_release nogil;
              return z.Receive();
            }();
            return BatchToPython(Unwrap(std::move(b)));
          },
          "(tensors, metadata_json) of the next message, or None for a native end-of-stream marker.")
      .def("close", [](PyZmqReceiver& self) { CloseNoGil(self.r); })
      .def_property_readonly("endpoint",
                             [](const PyZmqReceiver& self) { return Live(self.r, "the ZeroMQ receiver").endpoint(); })
      .def_property_readonly(
          "messages_received",
          [](const PyZmqReceiver& self) { return Live(self.r, "the ZeroMQ receiver").messages_received(); })
      .def_property_readonly(
          "bytes_copied", [](const PyZmqReceiver& self) { return Live(self.r, "the ZeroMQ receiver").bytes_copied(); })
      .def_property_readonly(
          "last_sequence",
          [](const PyZmqReceiver& self) -> py::object {
            std::optional<std::uint64_t> s = Live(self.r, "the ZeroMQ receiver").last_sequence();
            return s ? py::object(py::int_(*s)) : py::object(py::none());
          },
          "Native encoding: the header sequence of the last message (an end marker's: the batches sent).");

  m.def(
      "parse_stream_url",
      [](const std::string& url, const std::optional<std::string>& mode, bool pubsub) {
        StreamUrlOptions o;
        if (mode) {
          if (*mode == "send")
            o.role = StreamRole::kSend;
          else if (*mode == "recv")
            o.role = StreamRole::kRecv;
          else
            Throw(InvalidArgument("mode must be \"send\" or \"recv\", not \"" + *mode + "\""));
        }
        o.pubsub = pubsub;
        StreamUrl u = Unwrap(ParseStreamUrl(url, o));
        static const char* kTransports[] = {"stdio", "fd", "tcp-raw", "unix", "zmq"};
        py::dict d;
        d["transport"] = kTransports[static_cast<int>(u.transport)];
        d["mode"] = u.role == StreamRole::kSend ? "send" : "recv";
        d["binds"] = u.binds;
        d["fd"] = u.fd;
        d["host"] = u.host;
        d["port"] = u.port;
        d["path"] = u.path;
        d["pattern"] = u.pattern == ZmqPattern::kPubSub ? "pubsub" : "pushpull";
        d["endpoint"] = u.endpoint;
        d["topic"] = u.topic;
        d["canonical"] = u.canonical;
        d["deprecation"] = u.deprecation;
        return d;
      },
      py::arg("url"), py::arg("mode") = py::none(), py::arg("pubsub") = false,
      "The stream address grammar of include/tensorsafe/stream/url.h, as a dict.");
}

}  // namespace tensorsafe::python
