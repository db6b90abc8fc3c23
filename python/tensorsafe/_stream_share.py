"""How the DataLoader workers of a StreamDataset share one ZeroMQ PUSH/PULL
stream (docs/STREAM.md, "DataLoader").

Each worker connects its own PULL socket and ZeroMQ deals the messages
among them, so no worker can tell from its own socket when a stream is
over: only one of them receives the end marker, whose sequence number E is
the number of messages the sender sent before it (its sequence numbers go
on across streams, or restart at 0 for a new sender). A stream is the
sequence numbers [base, E); it is complete once the workers together
received E - base batches in that range. Counting by sequence number, not
by arrival, keeps the count right when a sender runs ahead into its next
stream: a sequence number at E or above belongs to a later stream.

A worker keeps its socket and receiving thread (a ``Receiver``) across the
iterations of a persistent DataLoader: ZeroMQ drops what a PUSH sends in
the moment after a PULL peer disconnected, so reconnecting every epoch
loses batches. What arrives between iterations waits for the next one.

The workers share int64 slots of shared memory (made with the dataset,
handed to workers when they start), each written by one process only:

* slot 0 (worker 0, when an iteration starts): (stream << 40) | base;
* slot 1 (worker 0): the DataLoader iteration reading it;
* per worker w, at 2 + 8w, written by w:
  - V, T, U, C: a seqlock (V odd while writing) over the count C of
    batches w received in [base, E), for T = slot 0 and U = (view << 40) |
    (E + 1), where view = (stream << 1) | restart. A reader gives up after
    1,000 tries and takes the count as not written: a writer killed in the
    middle leaves V odd until w's next process writes;
  - A: (view << 40) | (e + 1), e the smallest end marker w holds at or
    above base, 0 if none (E is the smallest of all workers' e);
  - R: (stream << 40) | 1 once w received a sequence number below base
    during that stream: the sender started anew, and the stream's base is 0;
  - D: (stream << 40) | 1 once w's iteration over that stream ended at its
    end (not interrupted);
  - S: (stream << 40) | 1 while w's iteration waits with no batch of that
    stream to yield: the others' threads then read on past their bound, so
    the batches w waits for, or the counts that end the stream, come.

Each slot is one aligned 8-byte store, so no lock is needed between
processes; within a process, one condition variable guards the receiver.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import multiprocessing
import os
import threading
import time
import weakref
from array import array
from collections import deque
from typing import Any, Deque, Iterator, List, NamedTuple, Optional, Tuple

from .errors import Error
from .errors import IOError as _IOError
from .stream import Connection

MAX_WORKERS = 256
POLL = 0.1  # seconds a receive waits before the receiving thread looks at the others
_LOW = (1 << 40) - 1
_PER = 8
_V, _T, _U, _C, _A, _R, _D, _S = range(_PER)
_NOTHING = object()


def new_board() -> Any:
    return multiprocessing.RawArray(ctypes.c_int64, 2 + _PER * MAX_WORKERS)


def _at(worker: int, field: int) -> int:
    return 2 + _PER * worker + field


class State(NamedTuple):
    head: int  # slot 0
    stream: int
    base: int  # 0 if the sender started anew
    restart: bool
    end: Optional[int]  # E, once an end marker at or above base arrived
    received: int  # batches in [base, E) the workers counted (those with a count for E)
    complete: bool


def _view(slots: Any, workers: int, head: int) -> Tuple[int, int, bool, int]:
    """(stream, base, restart, view) of slot 0's value `head`: the base is 0
    once a worker flagged that the sender started anew during the stream."""
    stream = head >> 40
    restart = any(slots[_at(w, _R)] == (stream << 40) | 1 for w in range(workers))
    return stream, 0 if restart else head & _LOW, restart, (stream << 1) | restart


def read_state(slots: Any, workers: int) -> State:
    head = slots[0]
    stream, base, restart, view = _view(slots, workers, head)
    end: Optional[int] = None
    for w in range(workers):
        a = slots[_at(w, _A)]
        if a >> 40 == view and a & _LOW:
            e = (a & _LOW) - 1
            end = e if end is None else min(end, e)
    if end is None:
        return State(head, stream, base, restart, None, 0, False)
    u = (view << 40) | (end + 1)
    received, counted = 0, True
    for w in range(workers):
        v = _at(w, _V)
        for _ in range(1000):  # a seqlock: retry while w is writing
            v1, t, uu, c, v2 = slots[v], slots[v + 1], slots[v + 2], slots[v + 3], slots[v]
            if v1 == v2 and not v1 & 1:
                break
            time.sleep(0)
        else:  # a writer killed in the middle: not counted until w's next process writes
            t = uu = -1
        if t == head and uu == u:
            received += c
        else:
            counted = False  # w has not counted against this end yet
    return State(head, stream, base, restart, end, received, counted and received >= end - base)


def finished(slots: Any, workers: int, stream: int) -> bool:
    """Whether every worker's iteration over `stream` ended at its end."""
    return all(slots[_at(w, _D)] == (stream << 40) | 1 for w in range(workers))


_live: "weakref.WeakSet[Receiver]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Spawned workers exit through the interpreter's shutdown: the receiving
    # thread must leave its socket before the socket is destroyed.
    for r in list(_live):
        r.close()


class Receiver:
    """One worker's receiving side: a connection and the thread that reads it.

    Every message gets the earliest stream it may belong to (``elig``): the
    current stream, or the next once the current one is complete. An
    iteration over stream k yields a batch if elig <= k and its sequence
    number is in [base, E) (or E is not yet known).
    """

    def __init__(self, url: str, kwargs: Any, slots: Any, worker: int, workers: int) -> None:
        self.url, self.slots, self.w, self.n = url, slots, worker, workers
        self.pid = os.getpid()
        self.conn = Connection(url, **kwargs)
        # Batches held at most, of the current stream and of later ones
        # each (more wait in the socket, and the sender's queue fills): a
        # sender faster than the training loop, or running ahead by whole
        # epochs, costs no memory. While another worker waits with nothing
        # to yield, the current stream's are taken past the bound: they may
        # be what ends the stream for it.
        self.ahead = max(1, int(kwargs.get("hwm", 16)))
        self.low = max(1, self.ahead // 2)  # once waiting for room, it waits for fewer than this
        self.paused = False  # waiting for room (read and written under cv)
        self.cv = threading.Condition()
        self.items: Deque[Tuple[int, int, Any]] = deque()  # (sequence, elig, buffers), not yet yielded
        # Sequence numbers of the batches received for the current stream
        # (elig <= stream) and for the next (received once it was complete):
        # 8 bytes a batch, kept until the stream is over.
        self.cur, self.nxt = array("q"), array("q")
        self.ends: List[Tuple[int, int]] = []  # (sequence, elig) of end markers
        head = slots[0]
        self.stream = head >> 40
        self.tag: Optional[Tuple[int, int]] = None  # (T, U) of the published count
        self.count, self.lo, self.hi = 0, 0, 0  # the count and its range [lo, hi)
        self.looked = 0.0  # when _publish last ran
        # A worker process of an earlier iteration (workers that do not
        # persist) may have counted batches of this stream: they stay counted.
        t, u, c = slots[_at(worker, _T)], slots[_at(worker, _U)], slots[_at(worker, _C)]
        self.carry = (t, u, c) if t == head else (0, 0, 0)
        self.error: Optional[BaseException] = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, name=f"tensorsafe-stream-{worker}", daemon=True)
        _live.add(self)
        self.thread.start()

    # -- the receiving thread -------------------------------------------------
    def _pump(self) -> None:
        try:
            while not self.stop.is_set():
                with self.cv:
                    self._follow(self.slots[0])
                    if self._full():
                        self._publish()
                        self.cv.wait(POLL)
                        continue
                try:
                    got: Any = self.conn.recv_buffers()
                except Error as e:
                    if getattr(e, "errno", None) != errno.EAGAIN:  # EAGAIN: the poll interval passed
                        raise
                    got = _NOTHING
                with self.cv:
                    if got is not _NOTHING:
                        seq = int(self.conn.last_sequence)
                        if got is None:
                            self.conn.next_stream()
                        self._take(seq, None if got is None else got[0])
                        self.cv.notify_all()
                    # In the middle of a stream (no end known) a batch
                    # changes nothing the others read: the whole state is
                    # looked at on end markers, when the end is known, and
                    # at least every POLL seconds.
                    now = time.monotonic()
                    if got is _NOTHING or got is None or self.tag is not None or now - self.looked >= POLL:
                        self.looked = now
                        self._publish()
        except BaseException as e:  # noqa: BLE001 - handed to the iterating thread
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def _follow(self, head: int) -> None:
        """Once worker 0 moved slot 0 (`head`) to a new stream: forgets what
        belongs to the streams before it, and flags a restart held back."""
        stream, base = head >> 40, head & _LOW
        if stream == self.stream:
            return
        old = self.stream
        self.cur = array("q", [s for s in self.cur if s >= base]) + self.nxt
        self.nxt = array("q")
        self.ends = [x for x in self.ends if x[1] > old or x[0] >= base]
        self.items = deque(x for x in self.items if x[1] > old or x[0] >= base)
        self.stream, self.tag, self.carry = stream, None, (0, 0, 0)
        if any(s < base for s in self.cur) or any(s < base for s, _ in self.ends):
            self.slots[_at(self.w, _R)] = (stream << 40) | 1

    def _held_ahead(self) -> int:
        """Batches held that belong to a later stream than the current one:
        the newest ones (each pipe brings a stream's batches before the
        next stream's), so only those are looked at."""
        n = 0
        for s, e, _ in reversed(self.items):
            if not (e > self.stream or (self.tag is not None and s >= self.hi)):
                break
            n += 1
        return n

    def _full(self) -> bool:
        """Whether the thread waits before receiving more: it holds `ahead`
        batches of later streams, or `ahead` of the current one while no
        other worker waits for batches of it. Once waiting, it waits until
        half are yielded, not one: fewer wake-ups."""
        later = self._held_ahead()
        if later >= self.ahead:
            return True
        room = self.low if self.paused else self.ahead
        if len(self.items) - later < room:
            self.paused = False
            return False
        starving = (self.stream << 40) | 1
        self.paused = not any(self.slots[_at(w, _S)] == starving for w in range(self.n) if w != self.w)
        return self.paused

    def _take(self, seq: int, buffers: Any) -> None:
        head = self.slots[0]
        self._follow(head)
        stream = head >> 40
        complete = False  # it needs this worker's count against the end: none yet, not complete
        if self.tag is not None:
            st = read_state(self.slots, self.n)
            complete = st.head == head and st.complete
        elig = stream + 1 if complete else stream
        if elig == stream and seq < (head & _LOW) and self.slots[_at(self.w, _R)] != (stream << 40) | 1:
            self.slots[_at(self.w, _R)] = (stream << 40) | 1  # flagged before it can be counted
        if buffers is None:
            self.ends.append((seq, elig))
            return
        (self.cur if elig <= stream else self.nxt).append(seq)
        self.items.append((seq, elig, buffers))
        if self.tag is not None and elig <= stream and self.lo <= seq < self.hi:
            self.count += 1

    def _publish(self) -> None:
        slots, head = self.slots, self.slots[0]
        self._follow(head)
        stream, base, _, view = _view(slots, self.n, head)
        mine = [s for s, e in self.ends if e <= stream and s >= base]
        a = (view << 40) | (min(mine) + 1) if mine else 0
        if slots[_at(self.w, _A)] != a:
            slots[_at(self.w, _A)] = a
        st = read_state(slots, self.n)
        if st.end is None or st.head != head:
            return
        tag = (head, (view << 40) | (st.end + 1))
        if tag != self.tag:
            self.tag, self.lo, self.hi = tag, base, st.end
            self.count = sum(1 for s in self.cur if base <= s < st.end)
            if (self.carry[0], self.carry[1]) == tag:
                self.count += self.carry[2]
        v = _at(self.w, _V)
        if (slots[v + 1], slots[v + 2], slots[v + 3]) != (tag[0], tag[1], self.count):
            odd = (slots[v] + 1) | 1  # being written (odd even if a killed writer left it odd)
            slots[v] = odd
            slots[v + 1], slots[v + 2], slots[v + 3] = tag[0], tag[1], self.count
            slots[v] = odd + 1

    # -- the iterating thread -------------------------------------------------
    def batches(self, stream: int, end_timeout: float, timeout: Optional[float]) -> Iterator[Any]:
        """The buffers of stream `stream`'s batches this worker received, up
        to the end of the stream (the workers together received all)."""
        last_change, last_seen, idle_since = time.monotonic(), -1, time.monotonic()
        waits, here = _at(self.w, _S), (stream << 40) | 1
        try:
            while True:
                with self.cv:
                    if self.error is not None:
                        raise self.error
                    st = read_state(self.slots, self.n)
                    buffers = self._pop(stream, st)
                    if buffers is None:
                        if st.stream != stream or st.complete:
                            self.slots[_at(self.w, _D)] = here
                            return
                        if self.slots[waits] != here:
                            self.slots[waits] = here
                        self.cv.wait(POLL)
                    else:
                        if self.slots[waits]:
                            self.slots[waits] = 0
                        if self.paused and len(self.items) < self.low:
                            self.cv.notify_all()  # room for the receiving thread
                if buffers is not None:
                    idle_since = time.monotonic()
                    yield buffers
                    continue
                now = time.monotonic()
                if st.received != last_seen:
                    last_seen, last_change = st.received, now
                if st.end is not None and now - last_change > end_timeout:
                    raise _IOError(errno.EIO, f"{self.url}: the end marker counts {st.end - st.base} batches but "
                                   f"the workers received {st.received} and nothing more for {end_timeout:g} s "
                                   "(batches queued in the workers of an interrupted iteration are lost, unless "
                                   "they persist)")
                if timeout is not None and now - idle_since > timeout:
                    raise _IOError(errno.EAGAIN, f"{self.url}: no batch for {timeout:g} s")
        finally:
            if self.slots[waits]:
                self.slots[waits] = 0  # the others' threads keep to their bound again

    def _pop(self, stream: int, st: State) -> Any:
        for i, (s, e, buffers) in enumerate(self.items):
            if e <= stream and s >= st.base and (st.end is None or s < st.end):
                del self.items[i]
                return buffers
        return None

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.error is None and self.thread.is_alive()

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # a forked child's copy: the thread is not here; the connection lets itself go
        self.stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join()
        self.conn.close()
        _live.discard(self)
