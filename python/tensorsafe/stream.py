"""Streams of tensor batches between processes: over a file descriptor (pipe,
TCP or Unix socket: docs/STREAM.md's native framing, or tenbin chunks) and
over ZeroMQ (PUSH/PULL, PUB/SUB; native, tensorcom or ZIO encodings).

A batch is a dict ``name -> array`` or a list (or tuple) of arrays, NumPy or
torch (CPU; bf16 and float8 included), with optional JSON metadata. Lists
travel as tensors named ``"0"``, ``"1"``, ...; a received batch whose names
are exactly those, in order, comes back as a list, any other as a dict.

:class:`Connection` follows tensorcom's ``Connection(url)``; its addresses
are those of the ``tensorsafe send`` / ``recv`` commands (one grammar, in C++:
include/tensorsafe/stream/url.h, docs/STREAM.md §12):

=========================  =====================================  =========
URL                        what                                   default
=========================  =====================================  =========
``zpush://host:port``      ZeroMQ PUSH (sends)                    connects
``zpull://host:port``      ZeroMQ PULL (receives)                 binds
``zpub://host:port``       ZeroMQ PUB (sends)                     binds
``zsub://host:port``       ZeroMQ SUB (receives)                  connects
``zrpush`` ... ``zrsub``   the same with bind and connect swapped
``zpush+ipc:///path``      any of them over ipc (``+tcp``: the
                           default; ``+inproc``)
``tcp-raw://host:port``    a TCP byte stream (``mode`` "send" or   recv listens,
                           "recv")                                send connects
``unix:///path``           a Unix socket byte stream              the same
``fd://N``, ``-``          an open file descriptor (pipe);
                           ``-``: stdin / stdout, with ``mode``
=========================  =====================================  =========

``bind=True/False`` overrides the default. A SUB socket's topic prefix is
the URL fragment (``zsub://h:p#topic``) or ``subscribe=``. Old spellings
(``unix-raw://``, bare ZeroMQ endpoints ``tcp://``, ``ipc://``) still work
until the next release, with a DeprecationWarning naming the new one.

The end of a stream: a sending connection sends the end marker (native
encoding) when it is closed: by ``close()``, at the end of a ``with`` block
(not when the block raises: the receiver then sees a truncated stream, or
over ZeroMQ no end), when it is garbage collected, and at interpreter exit.
Receivers' iteration stops there. A forked child never closes or ends a
parent's connection; it opens its own.

Everything that waits (connect, accept, send, receive) runs without the
GIL. Received arrays view the message in place (one 64-byte aligned buffer
per batch for byte streams; the ZeroMQ frames, when aligned for the
element type, otherwise a copy): read-only NumPy arrays whose ``base``
keeps the message alive, or torch tensors made with ``torch.from_dlpack``
(zero-copy; torch has no read-only flag, and writes only touch this
process's private copy of the message). ZeroMQ sends copy tensors under
64 KiB and send larger ones over tcp:// and ipc:// from the arrays' memory,
returning once libzmq has written them to the socket (libzmq's I/O thread
cannot release Python memory; inproc:// and sends with a ``timeout`` copy);
byte-stream sends write straight from the arrays (``writev``).
``send(batch, wait=False)`` returns before libzmq has written them, with a
:class:`SendTracker`, as pyzmq's ``send(copy=False, track=True)``: the next
batch is prepared while this one goes out, and the arrays must not change
until the tracker is ``done``.

Example:
    >>> from tensorsafe.stream import Connection
    >>> with Connection("zpull://127.0.0.1:7880") as pull:       # binds
    ...     with Connection("zpush://127.0.0.1:7880") as push:   # connects
    ...         push.send({"x": np.ones(3, np.float32)})
    ...         batch = pull.recv()
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import socket
import threading
import warnings
import weakref
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple, Union

from . import _arrays, _native
from .errors import Error, FailedPreconditionError, InvalidArgumentError

Batch = Union[Dict[str, Any], List[Any]]

ENCODINGS = ("native", "tensorcom", "tensorcom-single", "zio")

#: What ``Connection.send(batch, wait=False)`` returns: ``done`` (bool) tells
#: whether the batch's arrays are free again (libzmq has written every frame
#: that views them); ``wait(timeout_ms=-1)`` waits for that (negative: no
#: limit) and returns ``done``. It keeps the arrays alive until then; so does
#: the connection, which waits for all of them when it is closed (each wait
#: bounded by ``linger`` once the socket is closed). In a forked child it is
#: done at once.
SendTracker = _native.SendTracker



def parse_url(url: str, mode: Optional[str] = None) -> Dict[str, Any]:
    """The parts of a stream address (the C++ grammar, include/tensorsafe/stream/url.h):
    ``transport`` ("stdio", "fd", "tcp-raw", "unix", "zmq"), ``mode``, ``binds``, ``fd``,
    ``host``, ``port``, ``path``, ``pattern``, ``endpoint``, ``topic``, ``canonical`` (the
    current spelling) and ``deprecation`` (a note for an old spelling, else "").

    Raises:
        InvalidArgumentError: naming the address and what is wrong.
    """
    return dict(_native.parse_stream_url(url, mode))


# Sending connections still open, closed (with their end marker) at exit.
_open_senders: "weakref.WeakSet[Connection]" = weakref.WeakSet()


@atexit.register
def _close_senders_at_exit() -> None:
    for c in list(_open_senders):
        try:
            c.close()
        except Exception:  # noqa: BLE001 - exiting: nothing to raise to
            pass


def batch_entries(batch: Any, keep: List[Any]) -> List[Tuple[Any, ...]]:
    """Native entries of a dict or list batch (arrays or torch tensors);
    contiguous copies made on the way are appended to ``keep``, which the
    caller holds until the native call returns (torch entries are addresses)."""
    if isinstance(batch, dict):
        items = list(batch.items())
    elif isinstance(batch, (list, tuple)):
        items = [(str(i), a) for i, a in enumerate(batch)]
    else:
        raise InvalidArgumentError(f"a batch is a dict or a list of arrays, not {type(batch).__name__}")
    out = []
    for name, value in items:
        if type(value).__module__.startswith("torch"):
            if not value.is_sparse and not value.is_contiguous():
                value = value.contiguous()
                keep.append(value)
            out.append(_arrays.torch_entry(name, value))
        else:
            out.append(_arrays.numpy_entry(name, value))
    return out


def _to_framework(buffers: List[Any], framework: str) -> List[Any]:
    if framework == "np":
        return [b.numpy(False) for b in buffers]
    if framework == "buffer":
        return list(buffers)
    import torch

    out = []
    for b in buffers:
        if b.nbytes == 0:
            out.append(torch.empty(_arrays.torch_shape(b.dtype, b.shape), dtype=_arrays.torch_dtype(b.dtype)))
        elif b.dtype == "f4_e2m1":  # no DLPack code: view the bytes
            out.append(_arrays.torch_from_numpy(b.numpy(True), b.dtype, b.shape))
        else:
            out.append(torch.from_dlpack(b))
    return out


def decode_batch(buffers: List[Any], framework: str = "np") -> Batch:
    """A list when the names are "0", "1", ... in order, else a dict."""
    values = _to_framework(buffers, framework)
    names = [b.name for b in buffers]
    if names == [str(i) for i in range(len(names))]:
        return values
    return dict(zip(names, values))


class Connection:
    """One end of a batch stream; an iterator of received batches and a
    context manager.

    Args:
        url: see the module's table.
        mode: ``"send"`` or ``"recv"``; needed for ``tcp-raw``,
            ``unix-raw`` and ``fd`` URLs (ZeroMQ schemes imply it).
        encoding: ZeroMQ: ``"native"`` (checksummed, with an end marker),
            ``"tensorcom"`` (tensorcom's multipart frames),
            ``"tensorcom-single"`` (one frame: a whole .ten buffer) or
            ``"zio"`` (ZIO TENS). Byte streams: ``"native"`` or
            ``"tenbin"`` (webdataset's chunk stream; receivers detect it).
        framework: what :meth:`recv` returns: ``"np"`` (read-only views),
            ``"pt"`` (torch tensors, zero-copy through DLPack) or
            ``"buffer"`` (TensorBuffers).
        bind: override the URL's default (ZeroMQ; raw sockets: listen).
        hwm: ZeroMQ high-water mark, messages per peer.
        timeout: seconds a receive or send may wait (None: forever); then
            :class:`tensorsafe.IOError` with errno EAGAIN.
        subscribe: SUB topic prefix (default: the URL fragment, or all).
        verify: check the native encoding's data checksums on receive.
        max_queued_bytes: ZeroMQ sends: bytes handed to libzmq and not yet
            sent beyond which send() blocks (bounds the sender's memory).
        batch_arrays: tenbin/tensorcom byte streams have no batch boundary:
            this many arrays make a batch (0: the whole stream).
        linger: seconds a closing ZeroMQ sender keeps delivering.

    Raises:
        InvalidArgumentError: a bad URL or option.
        IOError: bind, connect or listen failed (errno set).

    Example:
        >>> c = Connection("zsub://127.0.0.1:7881#train", framework="pt")
        >>> for batch in c: ...
    """

    def __init__(self, url: str, mode: Optional[str] = None, *, encoding: str = "native", framework: str = "np",
                 bind: Optional[bool] = None, hwm: int = 16, timeout: Optional[float] = None,
                 subscribe: Optional[str] = None, verify: bool = True, max_queued_bytes: int = 256 << 20,
                 batch_arrays: int = 0, linger: float = 5.0) -> None:
        if framework not in ("np", "pt", "buffer"):
            raise InvalidArgumentError(f"framework must be 'np', 'pt' or 'buffer', not {framework!r}")
        self.url = url
        self.framework = framework
        self.encoding = encoding
        self._timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        self._linger = linger
        self._verify = verify
        self._batch_arrays = batch_arrays
        self._lock = threading.Lock()
        self._pid = os.getpid()  # a forked child never closes or ends this connection
        self._sender: Any = None
        self._receiver: Any = None
        self._writer: Any = None  # byte streams: made at the first send / recv
        self._reader: Any = None
        self._sock: Optional[socket.socket] = None  # raw byte streams
        self._listener: Optional[socket.socket] = None
        self._fd = -1
        self._closed = False
        self._ended = False  # receiving: the end arrived; sending: the end was sent
        self._sent = 0
        self._pending: Deque[Any] = deque()  # SendTrackers not yet done, oldest first
        self.metadata: Optional[Dict[str, Any]] = None  # of the last received batch
        if mode is not None and mode not in ("send", "recv"):
            raise InvalidArgumentError(f"{url}: mode must be 'send' or 'recv', not {mode!r}")
        u = parse_url(url, mode)
        if u["deprecation"]:
            warnings.warn(f"{u['deprecation']} (the old spelling is accepted until the next release)",
                          DeprecationWarning, stacklevel=2)
        self.mode = u["mode"]
        transport = u["transport"]
        if transport == "zmq":
            if encoding not in ENCODINGS:
                raise InvalidArgumentError(f"encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
            do_bind = u["binds"] if bind is None else bind
            if self.mode == "send":
                self._sender = _native.ZmqSender.create(
                    u["endpoint"], u["pattern"], encoding, do_bind, hwm, max_queued_bytes, self._timeout_ms,
                    int(linger * 1000), False, True)
                _open_senders.add(self)
            else:
                topic = u["topic"] if subscribe is None else subscribe
                self._receiver = _native.ZmqReceiver.create(
                    u["endpoint"], u["pattern"], encoding, do_bind, hwm, self._timeout_ms, topic, 0, verify)
            return
        if encoding not in ("native", "tenbin"):
            raise InvalidArgumentError(f"byte streams carry encoding 'native' or 'tenbin', not {encoding!r}")
        if self.mode == "send":
            _open_senders.add(self)
        if transport in ("fd", "stdio"):
            self._fd = int(u["fd"])
            return
        listen = u["binds"] if bind is None else bind
        if transport == "tcp-raw":
            host = u["host"]
            family, address = (socket.AF_INET6 if ":" in host else socket.AF_INET), (host, int(u["port"]))
        else:
            family, address = socket.AF_UNIX, u["path"]
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            if listen:
                if family != socket.AF_UNIX:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(address)
                s.listen(1)
                self._listener = s
            else:
                s.settimeout(None if timeout is None else timeout)
                s.connect(address)
                s.settimeout(None)
                self._attach(s)
        except BaseException:
            s.close()
            _open_senders.discard(self)
            raise

    @classmethod
    def from_fd(cls, fd: int, mode: str, **kwargs: Any) -> "Connection":
        """A byte-stream connection on an open descriptor (not closed by it)."""
        return cls(f"fd://{int(fd)}", mode, **kwargs)

    # -- plumbing -----------------------------------------------------------------
    def _attach(self, s: socket.socket) -> None:
        if s.family != socket.AF_UNIX:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = s
        self._fd = s.fileno()

    def _stream_fd(self) -> int:
        if self._fd < 0:
            if self._listener is None:
                raise FailedPreconditionError(f"{self.url}: the connection is closed")
            if self._timeout_ms >= 0:
                self._listener.settimeout(self._timeout_ms / 1000)
            conn, _ = self._listener.accept()  # releases the GIL
            conn.settimeout(None)
            self._attach(conn)
        return self._fd

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(f"{self.url}: the connection is closed")

    @property
    def endpoint(self) -> str:
        """The bound or connected address (the real port for port 0)."""
        if self._sender is not None:
            return str(self._sender.endpoint)
        if self._receiver is not None:
            return str(self._receiver.endpoint)
        s = self._listener or self._sock
        if s is None:
            return self.url
        name = s.getsockname()
        if s.family == socket.AF_UNIX:
            return f"unix://{name}"
        return f"tcp-raw://{name[0]}:{name[1]}"

    # -- sending ------------------------------------------------------------------
    def send(self, batch: Batch, metadata: Optional[Dict[str, Any]] = None, *,
             wait: bool = True) -> Optional[SendTracker]:
        """Sends one batch (a dict or list of arrays / tensors) with optional
        JSON metadata (native and ZIO; tenbin and tensorcom carry none and
        refuse it with UnsupportedError).

        Args:
            wait: True: returns once the arrays are free again (over ZeroMQ,
                once libzmq has written the frames that view them). False:
                returns as soon as the batch is queued, with a
                :class:`SendTracker`; until it is ``done`` the arrays must
                not be modified (what is sent is what they hold when libzmq
                writes them). Byte streams write before returning either way.

        Returns:
            None, or with ``wait=False`` a :class:`SendTracker`.

        Raises:
            InvalidArgumentError, UnsupportedError: the batch cannot be encoded.
            IOError: the peer is gone (EPIPE) or the timeout passed (EAGAIN).

        Example:
            >>> for step, batch in enumerate(batches):
            ...     push.send(batch, wait=False)   # hashes the next while this one goes out
        """
        keep: List[Any] = []
        entries = batch_entries(batch, keep)
        meta = _arrays.meta_json(metadata)
        with self._lock:
            self._check_open()
            if self.mode != "send":
                raise FailedPreconditionError(f"{self.url}: a receiving connection cannot send")
            if self._sender is not None:
                tracker = self._sender.send(entries, meta, wait, (batch, keep))
                if tracker is not None:
                    while self._pending and self._pending[0].done:
                        self._pending.popleft()
                    if not tracker.done:
                        self._pending.append(tracker)
                self._sent += 1
                self._ended = False  # after send_end(): the next stream (its sequence numbers go on)
                return tracker
            if self._writer is None:
                self._writer = _native.StreamWriter.to_fd(self._stream_fd(), self.encoding, False)
            self._writer.write(entries, meta)
            self._sent += 1
            return None if wait else SendTracker()

    def send_end(self) -> None:
        """Marks the end of the stream now: receivers' iteration stops. Native
        encoding only (others end with EOF, or never over ZeroMQ). Closing
        the connection does this too, unless the stream already ended (see
        the module doc). A ZeroMQ sender may go on: its next ``send()``
        starts its next stream (sequence numbers go on), which the next
        ``send_end()`` or ``close()`` ends; receivers read it after
        :meth:`next_stream`."""
        with self._lock:
            self._check_open()
            if self.mode != "send":
                raise FailedPreconditionError(f"{self.url}: a receiving connection cannot send")
            self._send_end_locked(None)

    def _send_end_locked(self, timeout_ms: Optional[int]) -> None:
        if self._sender is not None:
            self._sender.send_end(-2 if timeout_ms is None else timeout_ms)
        else:
            if self._writer is None:
                self._writer = _native.StreamWriter.to_fd(self._stream_fd(), self.encoding, False)
            self._writer.finish()
        self._ended = True

    def wait_for_subscriber(self, timeout: float = 5.0) -> None:
        """PUB: waits until a subscriber is connected (ZeroMQ drops what is
        published before)."""
        self._zmq_sender().wait_for_subscriber(int(timeout * 1000))

    def drain(self, timeout: float = 5.0) -> None:
        """ZeroMQ PUSH: waits until every queued message went to the kernel."""
        self._zmq_sender().drain(int(timeout * 1000))

    def _zmq_sender(self) -> Any:
        self._check_open()
        if self._sender is None:
            raise FailedPreconditionError(f"{self.url}: not a ZeroMQ sending connection")
        return self._sender

    # -- receiving ----------------------------------------------------------------
    def recv(self) -> Optional[Batch]:
        """The next batch (a list or dict, see the module doc), or None at the
        end of the stream (native end marker; EOF of a tenbin stream). Its
        metadata is in :attr:`metadata` (None when none).

        Raises:
            CorruptionError: a damaged, truncated or checksum-failing
                message (no partial batch is ever returned).
            IOError: EAGAIN after ``timeout``.
        """
        got = self.recv_buffers()
        if got is None:
            return None
        return decode_batch(got[0], self.framework)

    def recv_buffers(self) -> Optional[Tuple[List[Any], Optional[Dict[str, Any]]]]:
        """(TensorBuffers, metadata) of the next batch, or None at the end."""
        with self._lock:
            self._check_open()
            if self.mode != "recv":
                raise FailedPreconditionError(f"{self.url}: a sending connection cannot receive")
            if self._ended:
                return None
            if self._receiver is not None:
                got = self._receiver.receive()
            else:
                if self._reader is None:
                    self._reader = _native.StreamReader.from_fd(self._stream_fd(), self._verify, self._batch_arrays)
                got = self._reader.next()
            if got is None:
                self._ended = True
                return None
            buffers, meta = got
            self.metadata = json.loads(meta) if meta else None
            return buffers, self.metadata

    def __iter__(self) -> Iterator[Batch]:
        while True:
            batch = self.recv()
            if batch is None:
                return
            yield batch

    @property
    def last_sequence(self) -> Optional[int]:
        """ZeroMQ native receivers: the sequence number of the last message,
        else None. Sequence numbers count every message a sender sent, end
        markers included, and go on across its streams: an end marker's is
        the number of messages sent before it (docs/STREAM.md §4, §12)."""
        return None if self._receiver is None else self._receiver.last_sequence

    def next_stream(self) -> None:
        """ZeroMQ receivers, after ``recv()`` returned None: reads on to the
        sender's next stream on the same socket (in the middle of a stream,
        nothing changes). Reconnecting instead can
        lose messages: a PUSH deals what it sends in the moment after a
        PULL peer left to that peer's dead pipe (docs/STREAM.md, "DataLoader").

        Raises:
            FailedPreconditionError: a byte stream (it ends once) or a
                sending connection.
        """
        with self._lock:
            self._check_open()
            if self.mode != "recv" or self._receiver is None:
                raise FailedPreconditionError(f"{self.url}: only a ZeroMQ receiver reads on after the end of a "
                                              "stream (a byte stream ends once)")
            self._ended = False

    # -- closing ------------------------------------------------------------------
    def close(self, *, end: bool = True) -> None:
        """Closes the connection. A sending connection of the native encoding
        first sends the end marker, unless it was sent, ``end`` is False, or
        the stream never started (a listening sender nobody connected to); a
        ZeroMQ sender then delivers what is queued, up to ``linger`` seconds,
        which also bounds the wait for the end marker. In a forked child the
        parent's connection is only let go: nothing is sent or unlinked.

        Raises:
            IOError: the end marker could not be sent (the connection is
                closed all the same).
        """
        error: Optional[BaseException] = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            _open_senders.discard(self)
            foreign = os.getpid() != self._pid
            if (end and not foreign and self.mode == "send" and not self._ended and self.encoding == "native"
                    and (self._sender is not None or self._writer is not None or self._sock is not None
                         or self._listener is None)):
                # A ZeroMQ sender that sent nothing may have no receiver at
                # all: it offers the end without waiting, and keeps quiet.
                idle_zmq = self._sender is not None and self._sent == 0
                try:
                    self._send_end_locked(0 if idle_zmq else max(0, int(self._linger * 1000)))
                except Error as e:
                    if not (idle_zmq and getattr(e, "errno", None) == errno.EAGAIN):
                        error = e
            for obj in (self._sender, self._receiver, self._writer, self._reader):
                if obj is not None:
                    obj.close()
            self._sender = self._receiver = self._writer = self._reader = None
            self._pending.clear()  # each waits until libzmq lets go of its arrays (up to linger)
            if self._sock is not None:
                self._sock.close()
            if self._listener is not None:
                path = self._listener.getsockname() if self._listener.family == socket.AF_UNIX else None
                self._listener.close()
                if not foreign and isinstance(path, str) and path and os.path.exists(path):
                    os.unlink(path)
            self._sock = self._listener = None
            self._fd = -1
        if error is not None:
            raise error

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A block that failed leaves the stream unended: its receiver must not
        # take a partial stream for a whole one.
        ok = exc_type is None or issubclass(exc_type, GeneratorExit) or (
            exc_type is SystemExit and getattr(exc, "code", None) in (0, None))
        self.close(end=ok)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to raise to from a finalizer
            pass


def __getattr__(name: str) -> Any:
    # StreamDataset subclasses torch's IterableDataset: it lives in its own
    # module so that importing tensorsafe.stream does not import torch.
    if name == "StreamDataset":
        from .stream_dataset import StreamDataset

        return StreamDataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Connection", "StreamDataset", "Batch", "ENCODINGS", "batch_entries", "decode_batch", "parse_url"]
