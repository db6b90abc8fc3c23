"""StreamDataset: the batches arriving on a stream as a torch
``IterableDataset`` (docs/STREAM.md, "DataLoader"; docs/python.md).

With one reader (no DataLoader workers, or one) the dataset receives until
the end marker (or ``count`` batches). With several DataLoader workers over
ZeroMQ PUSH/PULL, each worker connects its own PULL socket and the workers
agree through shared memory on where each stream ends (_stream_share.py).

A ZeroMQ socket is kept across iterations (by the dataset, or by each
worker of a persistent DataLoader): a PUSH drops what it sends in the
moment after a PULL peer disconnected, so reconnecting every epoch would
lose batches. Byte streams end once: each iteration opens its own.
"""

from __future__ import annotations

import multiprocessing.context
import os
import time
from typing import Any, Dict, Iterator, Optional

from torch.utils.data import IterableDataset, get_worker_info

from ._stream_share import MAX_WORKERS, POLL, Receiver, finished, new_board, read_state
from .errors import InvalidArgumentError
from .stream import Batch, Connection, decode_batch, parse_url


class StreamDataset(IterableDataset):  # type: ignore[type-arg]
    """A torch ``IterableDataset`` of the batches arriving on ``url``:
    ``DataLoader(StreamDataset("zpull://127.0.0.1:7880"), batch_size=None)``.

    Each iteration stops at the end of a stream (the sender's
    ``send_end()``, or its ``with`` block's end) or after ``count`` batches;
    the next reads on. Over ZeroMQ the socket is kept between iterations
    (by the dataset, or by each worker of a persistent DataLoader), so
    nothing a sender sends between epochs is lost; :meth:`close` releases
    it. A byte stream ends once: each iteration opens its own.

    DataLoader workers: with ``num_workers > 1`` every worker receives a
    share of the batches, each batch exactly once, and all of them stop at
    the end marker, with any ``multiprocessing_context`` and ``in_order``.
    That needs ZeroMQ PUSH/PULL, the native encoding, a receiving URL that
    connects (``zrpull://``, or ``bind=False``; the sender binds:
    ``zrpush://``) and no ``count``; anything else is refused with a message
    saying so. Batches come in the order the workers deliver them. An
    iteration yields the batches that arrive before its stream's end is
    known to the worker; a sender that runs ahead into its next stream
    before that may see a few of them in the current epoch (none is lost
    or repeated).

    Args:
        url: a receiving stream address (docs/STREAM.md §12).
        mode: for byte streams (``tcp-raw://``, ``unix://``, ``fd://``).
        count: stop after this many batches (one reader only).
        end_timeout: several workers: seconds to wait, once the end marker
            arrived, for batches still missing before raising IOError (they
            were lost with the workers of an earlier, interrupted iteration
            that did not persist).
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
        self._slots: Any = new_board()
        self._one: Optional[Connection] = None  # one reader over ZeroMQ: kept across iterations
        self._one_pid = 0  # the process that made it
        self._rx: Optional[Receiver] = None  # a DataLoader worker's, kept across iterations

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["_one"] = d["_rx"] = None  # sockets stay in their process
        # Shared memory travels only to processes being started (DataLoader
        # workers); any other copy (pickle, deepcopy) gets its own.
        if multiprocessing.context.get_spawning_popen() is None:
            d["_slots"] = None
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        if self._slots is None:
            self._slots = new_board()

    def close(self) -> None:
        """Closes the ZeroMQ socket this process keeps between iterations
        (iterating again opens a new one). Read the dataset with DataLoader
        workers only once the process itself no longer reads it: its socket
        would take its share of the batches."""
        one, rx, self._one, self._rx = self._one, self._rx, None, None
        if one is not None:
            one.close()
        if rx is not None:
            rx.close()

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        if info is None or info.num_workers == 1:
            return self._iter_one()
        self._check_shareable(info.num_workers)
        return self._iter_shared(info)

    # -- one reader -----------------------------------------------------------
    def _iter_one(self) -> Iterator[Batch]:
        if self._url["transport"] != "zmq":
            with Connection(self.url, self.mode, **self.kwargs) as c:
                yield from self._read(c)
            return
        if self._one is None or self._one_pid != os.getpid():  # a forked process makes its own
            self._one, self._one_pid = Connection(self.url, self.mode, **self.kwargs), os.getpid()
        c = self._one
        c.next_stream()  # when the last iteration read to the end of a stream
        yield from self._read(c)

    def _read(self, c: Connection) -> Iterator[Batch]:
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
        if workers > MAX_WORKERS:
            why.append(f"at most {MAX_WORKERS} workers")
        if why:
            raise InvalidArgumentError(f"StreamDataset({self.url!r}) with {workers} DataLoader workers: "
                                       + "; ".join(why))

    def _join_iteration(self, info: Any, persistent: bool) -> int:
        """The stream this DataLoader iteration reads. Worker 0 alone moves
        slot 0 to a new iteration (so no two workers race on it): a stream
        the previous iteration read to its end is followed by the next one;
        one it left unfinished is read on (for workers that do not persist,
        what their queues held is lost: only a stream not yet received
        whole is read on). The others wait for it. An iteration is known by
        the DataLoader's base seed (new for every iterator; fixed for
        persistent workers) and how many iterations this worker process ran."""
        self._iterations = getattr(self, "_iterations", 0) + 1
        key = ((info.seed - info.id) * 1_000_003 + self._iterations) % (1 << 62) + 1
        slots = self._slots
        if info.id == 0 and slots[1] != key:
            st = read_state(slots, info.num_workers)
            ended = not persistent or finished(slots, info.num_workers, st.stream)
            if st.complete and ended and st.end is not None:
                slots[0] = ((st.stream + 1) << 40) | (st.end + 1)  # the next stream starts after this end
            slots[1] = key
        while slots[1] != key:
            time.sleep(0.01)
        return slots[0] >> 40

    def _iter_shared(self, info: Any) -> Iterator[Batch]:
        rx = self._rx
        persistent = rx is not None and rx.alive()
        if rx is not None and not persistent:
            self._rx = None
            rx.close()
        stream = self._join_iteration(info, persistent)
        if self._rx is None:
            kwargs = dict(self.kwargs, timeout=POLL, bind=False)
            kwargs.pop("framework")
            self._rx = Receiver(self.url, kwargs, self._slots, info.id, info.num_workers)
        rx, framework = self._rx, self.kwargs["framework"]
        try:
            for buffers in rx.batches(stream, self.end_timeout, self.kwargs.get("timeout")):
                yield decode_batch(buffers, framework)
        except BaseException:
            if not rx.alive():
                self._rx = None
                rx.close()
            raise
