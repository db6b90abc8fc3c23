"""StreamDataset: the batches arriving on a stream as a torch
``IterableDataset`` (docs/STREAM.md, "DataLoader"; docs/python.md).

With one reader (no DataLoader workers, or one) the dataset simply receives
until the end marker (or ``count`` batches). With several DataLoader workers
over ZeroMQ PUSH/PULL, each worker connects its own PULL socket and ZeroMQ
deals the messages among them, so no worker can tell from its own socket
when the stream is over: only one of them receives the end marker, whose
sequence number is the number of batches sent. The workers share a few
int64s of shared memory (made with the dataset, handed to workers when they
start: inherited on fork, passed with the dataset on spawn and forkserver):

* slot 0: (stream << 40) | (end marker's sequence + 1), 0 while unknown;
* slot 1: the sequence of the stream's first batch: 0, or for a sender that
  goes on after an end marker (one stream per epoch), the sequence after
  the previous stream's end marker (a sender starting anew counts from 0,
  which the workers see as a sequence below it);
* slot 2: the DataLoader iteration reading it (see _join_iteration);
* slot 3 + w: (stream << 40) | batches worker w received of that stream.

Each worker receives in a thread of its own (so the end marker is read even
while the DataLoader waits for another worker, as ``in_order=True`` makes it
do) and finishes when its queue is empty and the workers together received
every batch the end marker counts. Each value is one aligned 8-byte store
written by one process, so no lock is needed.
"""

from __future__ import annotations

import ctypes
import errno
import multiprocessing
import multiprocessing.context
import queue
import threading
import time
from typing import Any, Dict, Iterator, Optional

from torch.utils.data import IterableDataset, get_worker_info

from .errors import Error, InvalidArgumentError
from .errors import IOError as _IOError
from .stream import Batch, Connection, decode_batch, parse_url

_MAX_WORKERS = 256
_LOW = (1 << 40) - 1
_POLL = 0.1  # seconds a worker's receive waits before it looks at the others


class StreamDataset(IterableDataset):  # type: ignore[type-arg]
    """A torch ``IterableDataset`` of the batches arriving on ``url``:
    ``DataLoader(StreamDataset("zpull://127.0.0.1:7880"), batch_size=None)``.

    Each iteration opens its own :class:`~tensorsafe.stream.Connection` and
    stops at the end of the stream (the sender's ``send_end()``, or its
    ``with`` block's end) or after ``count`` batches.

    DataLoader workers: with ``num_workers > 1`` every worker receives a
    share of the batches, each batch exactly once, and all of them stop at
    the end marker, with any ``multiprocessing_context`` and ``in_order``.
    That needs ZeroMQ PUSH/PULL, the native encoding, a receiving URL that
    connects (``zrpull://``, or ``bind=False``; the sender binds:
    ``zrpush://``) and no ``count``; anything else is refused with a message
    saying so. Batches come in the order the workers deliver them.

    Args:
        url: a receiving stream address (docs/STREAM.md §12).
        mode: for byte streams (``tcp-raw://``, ``unix://``, ``fd://``).
        count: stop after this many batches (one reader only).
        end_timeout: several workers: seconds to wait, once the end marker
            arrived, for batches still missing before raising IOError (they
            were lost with the workers of an earlier, interrupted iteration).
        **kwargs: :class:`~tensorsafe.stream.Connection` options
            (``framework`` defaults to ``"pt"``).
    """

    def __init__(self, url: str, mode: Optional[str] = "recv", *, count: Optional[int] = None,
                 end_timeout: float = 30.0, **kwargs: Any) -> None:
        super().__init__()
        if mode not in (None, "recv"):
            raise InvalidArgumentError(f"{url}: a StreamDataset receives; mode={mode!r}")
        u = parse_url(url, "recv")
        self.url, self.count, self.end_timeout = url, count, float(end_timeout)
        self.mode = None if u["transport"] == "zmq" else mode
        self.kwargs = dict(kwargs, framework=kwargs.get("framework", "pt"))
        self._url = u
        self._slots: Any = multiprocessing.RawArray(ctypes.c_int64, 3 + _MAX_WORKERS)

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        # Shared memory travels only to processes being started (DataLoader
        # workers); any other copy (pickle, deepcopy) gets its own.
        if multiprocessing.context.get_spawning_popen() is None:
            d["_slots"] = None
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        if self._slots is None:
            self._slots = multiprocessing.RawArray(ctypes.c_int64, 3 + _MAX_WORKERS)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        if info is None or info.num_workers == 1:
            return self._iter_one()
        self._check_shareable(info.num_workers)
        return self._iter_shared(info)

    # -- one reader -----------------------------------------------------------
    def _iter_one(self) -> Iterator[Batch]:
        with Connection(self.url, self.mode, **self.kwargs) as c:
            n = 0
            while self.count is None or n < self.count:
                batch = c.recv()
                if batch is None:
                    return
                n += 1
                yield batch

    # -- several DataLoader workers -------------------------------------------
    def _check_shareable(self, workers: int) -> None:
        u, why = self._url, []
        if u["transport"] != "zmq" or u["pattern"] != "pushpull":
            why.append("only ZeroMQ PUSH/PULL deals batches among readers (a byte stream has one reader; SUB "
                       "sockets each get every batch)")
        if self.kwargs.get("encoding", "native") != "native":
            why.append("only the native encoding has the end marker and sequence numbers the workers need")
        if self.kwargs.get("bind", u["binds"]):
            why.append(f"{self.url} binds: each worker would bind the same address; receive with zrpull:// "
                       "(or bind=False) and let the sender bind (zrpush://)")
        if self.count is not None:
            why.append("count= needs one reader; end the stream with send_end() (a sender's with block does)")
        if workers > _MAX_WORKERS:
            why.append(f"at most {_MAX_WORKERS} workers")
        if why:
            raise InvalidArgumentError(f"StreamDataset({self.url!r}) with {workers} DataLoader workers: "
                                       + "; ".join(why))

    def _received(self, stream: int) -> int:
        total = 0
        for v in self._slots[3:]:
            if v >> 40 == stream:
                total += v & _LOW
        return total

    def _complete(self, stream: int) -> bool:
        """Whether the workers together received every batch of `stream`."""
        head = self._slots[0]
        if head >> 40 != stream:
            return True  # a later iteration moved on: this one is over
        end = (head & _LOW) - 1
        base = self._slots[1] if self._slots[1] <= end else 0  # below the base: a sender starting anew
        return end >= 0 and self._received(stream) >= end - base

    def _join_iteration(self, info: Any) -> int:
        """The stream this DataLoader iteration reads. Worker 0 alone moves
        the block to a new iteration (so no two workers race on it): a
        stream the previous iteration completed is followed by the next one;
        one it left unfinished is read on. The others wait for it. An
        iteration is known by the DataLoader's base seed (new for every
        iterator; fixed for persistent workers) and how many iterations this
        worker process ran."""
        self._iterations = getattr(self, "_iterations", 0) + 1
        key = ((info.seed - info.id) * 1_000_003 + self._iterations) % (1 << 62) + 1
        slots = self._slots
        if info.id == 0 and slots[2] != key:
            stream = slots[0] >> 40
            if self._complete(stream):
                end = (slots[0] & _LOW) - 1
                slots[1] = end + 1  # the next stream starts after this end (if the sender goes on)
                slots[0] = (stream + 1) << 40
            slots[2] = key
        while slots[2] != key:
            time.sleep(0.01)
        return slots[0] >> 40

    def _iter_shared(self, info: Any) -> Iterator[Batch]:
        worker = info.id
        slots = self._slots
        stream = self._join_iteration(info)
        if slots[3 + worker] >> 40 != stream:
            slots[3 + worker] = stream << 40
        kwargs = dict(self.kwargs, timeout=_POLL, bind=False)
        framework = kwargs.pop("framework")
        user_timeout = self.kwargs.get("timeout")
        got: "queue.Queue[Any]" = queue.Queue()
        stop = threading.Event()
        conn = Connection(self.url, **kwargs)

        def pump() -> None:
            try:
                while not stop.is_set():
                    try:
                        item = conn.recv_buffers()
                    except Error as e:
                        if getattr(e, "errno", None) == errno.EAGAIN:  # the poll interval passed
                            continue
                        raise
                    if item is None:  # the end marker: its sequence counts what the sender sent
                        end = int(conn.last_sequence)
                        if end < slots[1]:
                            slots[1] = 0  # a sender starting anew
                        slots[0] = (stream << 40) | (end + 1)
                        return
                    if int(conn.last_sequence) < slots[1]:
                        slots[1] = 0  # a sender starting anew
                    got.put(item)  # queued before counted: a count the others see is in a queue
                    slots[3 + worker] += 1
            except BaseException as e:  # noqa: BLE001 - handed to the iterating thread
                got.put(e)

        thread = threading.Thread(target=pump, name=f"tensorsafe-stream-{worker}", daemon=True)
        thread.start()
        try:
            last_change, last_seen, idle_since = time.monotonic(), -1, time.monotonic()
            while True:
                try:
                    item = got.get(timeout=_POLL)
                except queue.Empty:
                    if self._complete(stream):
                        return
                    now, seen = time.monotonic(), self._received(stream)
                    if seen != last_seen:
                        last_seen, last_change = seen, now
                    head = slots[0]
                    if (head & _LOW) and now - last_change > self.end_timeout:
                        raise _IOError(errno.EIO, f"{self.url}: the end marker counts {(head & _LOW) - 1 - slots[1]} "
                                       "batches but the "
                                    f"workers received {seen} and nothing more for {self.end_timeout:g} s "
                                    "(batches queued in the workers of an interrupted iteration are lost)")
                    if user_timeout is not None and now - idle_since > user_timeout:
                        raise _IOError(errno.EAGAIN, f"{self.url}: no batch for {user_timeout:g} s")
                    continue
                if isinstance(item, BaseException):
                    raise item
                idle_since = time.monotonic()
                buffers, _ = item
                yield decode_batch(buffers, framework)
        finally:
            stop.set()
            thread.join()
            conn.close()
