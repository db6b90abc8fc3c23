"""StreamDataset under a real torch DataLoader: 3 workers, fork and spawn,
every batch exactly once; a sender with one stream per epoch, which sends
the next stream the moment an epoch ends (the batches a reconnecting
reader would lose), runs ahead by whole streams, or starts anew each
epoch; an epoch stopped early; a sender faster than the loop, which
waits for it instead of filling the workers' memory; and what cannot be
shared, refused."""

import time

import numpy as np
import pytest

from tensorsafe._stream_share import Receiver, new_board
from tensorsafe.stream import Connection, decode_batch

from helpers import in_thread

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from tensorsafe.stream import StreamDataset  # noqa: E402

EPOCH = 15  # batches per stream



def send_stream(tx, epoch, n=EPOCH):
    for i in range(n):
        tx.send({"i": np.array([epoch * 100 + i])})
    tx.send_end()


def ids(batches):
    return sorted(int(b["i"]) for b in batches)


def stream(epoch, n=EPOCH):
    return [epoch * 100 + i for i in range(n)]


def loader(ds, workers, ctx="fork", persistent=True):
    kw = dict(multiprocessing_context=ctx, persistent_workers=persistent) if workers else {}
    return DataLoader(ds, batch_size=None, num_workers=workers, **kw)


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_three_workers_every_batch_once(ctx):
    n = 40
    with Connection("zrpush://127.0.0.1:*") as tx:  # the sender binds, each worker connects
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"))

        def send():
            for i in range(n):
                tx.send({"i": torch.tensor([i]), "x": torch.full((64,), float(i))})
            tx.send_end()  # or the end of the with block

        join = in_thread(send)
        seen = list(loader(ds, 3, ctx, persistent=False))
        join()
    assert ids(seen) == list(range(n))
    assert all(torch.equal(b["x"], torch.full((64,), float(b["i"]))) for b in seen)


def test_a_sender_ahead_of_the_loop_waits_for_it():
    """3 workers in order, hwm=2, a loop slower than the sender: the workers
    hold a bounded number of batches, so the sender's send() waits for the
    loop (it finishes late) instead of the workers taking the whole stream
    into memory; every batch comes once."""
    n, mib = 150, 1 << 20
    with Connection("zrpush://127.0.0.1:*", hwm=2) as tx:
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"), hwm=2)
        done_at = []
        got = []

        def send():
            for i in range(n):
                tx.send({"i": torch.tensor([i]), "x": torch.full((mib // 4,), float(i))})
            tx.send_end()
            done_at.append(len(got))  # batches the loop had by then

        join = in_thread(send)
        for b in loader(ds, 3):
            got.append(int(b["i"][0]))
            time.sleep(0.005)
        join()
    assert sorted(got) == list(range(n))
    # Held in the workers, ZeroMQ, TCP and the DataLoader: some dozens.
    assert done_at[0] >= n // 2, done_at  # 113 to 121 of 150; 22 to 27 when the workers took all


def test_refuses_what_several_workers_cannot_share():
    for url, why in [("zpull://127.0.0.1:*", "binds: each worker would bind"),
                     ("tcp-raw://127.0.0.1:0", "a byte stream has one reader")]:
        with pytest.raises(Exception, match=why):
            list(loader(StreamDataset(url), 2, persistent=False))


def test_one_stream_per_epoch_sent_while_the_epoch_starts():
    with Connection("zrpush://127.0.0.1:*") as tx:
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"))
        dl = loader(ds, 3)
        for epoch in range(3):
            join = in_thread(send_stream, tx, epoch)
            got = ids(dl)
            join()
            assert got == stream(epoch), epoch


@pytest.mark.parametrize("workers,ctx", [(0, None), (1, "fork"), (3, "fork"), (3, "spawn")])
def test_next_stream_sent_the_moment_an_epoch_ends(workers, ctx):
    """The sender sends epoch k + 1's whole stream as soon as the loop over
    epoch k ended, before the next loop starts: a reader that disconnected
    at the end of the epoch would lose what PUSH dealt to its dead pipe
    (15 of 15 batches in one process); the kept sockets get them all."""
    with Connection("zrpush://127.0.0.1:*") as tx:
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"), timeout=20)
        dl = loader(ds, workers, ctx)
        join = in_thread(send_stream, tx, 0)  # waits for the first reader to connect
        for epoch in range(3):
            got = ids(dl)
            join()
            join = in_thread(send_stream, tx, epoch + 1)  # never waits: the readers stay connected
            join(20)
            tx.drain(20)
            assert got == stream(epoch), epoch
        assert ids(dl) == stream(3)
        ds.close()


def test_sender_running_ahead_by_whole_streams():
    """Three streams sent before the first epoch: every batch exactly once,
    each in its own epoch or an earlier one (one that arrived before its
    worker knew the earlier stream's end), and every epoch ends."""
    with Connection("zrpush://127.0.0.1:*") as tx:
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"), timeout=20)
        dl = loader(ds, 3)
        join = in_thread(lambda: [send_stream(tx, epoch) for epoch in range(3)])
        epochs = [ids(dl) for _ in range(3)]
        join()
    everything = sorted(sum(epochs, []))
    assert everything == stream(0) + stream(1) + stream(2)
    for k, got in enumerate(epochs):
        assert set(stream(k)) <= set(sum(epochs[:k + 1], [])), k
        assert all(i // 100 >= k for i in got), (k, got)


def test_sender_starting_anew_each_epoch():
    """A new sending Connection per epoch (its sequence numbers restart at
    0), bound to the same address: each epoch whole. (Spawned workers:
    forked ones would hold the bound port of the first sender.)"""
    first = Connection("zrpush://127.0.0.1:*")
    url = first.endpoint.replace("tcp://", "zrpush://")
    ds = StreamDataset(url.replace("zrpush://", "zrpull://"), timeout=20)
    dl = loader(ds, 3, "spawn")
    tx = first
    for epoch in range(3):
        join = in_thread(send_stream, tx, epoch, EPOCH + 2 * epoch)
        got = ids(dl)
        join()
        tx.close()
        assert got == stream(epoch, EPOCH + 2 * epoch), epoch
        tx = Connection(url)
    tx.close()


def test_epoch_stopped_early_is_read_on():
    """Persistent workers keep what they received: the next iteration reads
    the rest of the stream (less the batches the DataLoader had already
    fetched and drops with the stopped iterator), the one after it the
    next stream."""
    n = 60
    with Connection("zrpush://127.0.0.1:*") as tx:
        ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"), timeout=20)
        dl = loader(ds, 3)
        join = in_thread(send_stream, tx, 0, n)
        first = []
        for b in dl:
            first.append(int(b["i"]))
            if len(first) == 5:
                break
        rest = ids(dl)
        join()
        assert not set(first) & set(rest)
        assert set(rest) <= set(stream(0, n)) and len(first) + len(rest) >= n - 3 * 2 * 2, (first, rest)
        send_stream(tx, 1)
        assert ids(dl) == stream(1)


def values(rx, stream_no):
    return [int(decode_batch(b, "np")["i"][0]) for b in rx.batches(stream_no, 30.0, 20.0)]


def held(rx, n, settle=0.5):
    """The sequence numbers rx holds once it holds `n` (and `settle` s more)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(rx.items) < n:
        time.sleep(0.02)
    time.sleep(settle)  # time to take more, if it would
    with rx.cv:
        return [s for s, _, _ in rx.items]


def test_a_worker_holds_at_most_hwm_batches_of_each_stream():
    """One worker's receiving side, in this process, with a sender far
    ahead of the reader: it holds `hwm` batches of the current stream and,
    once that stream's end is known, `hwm` of the next; the rest waits in
    ZeroMQ and the sender's send() waits. Every batch comes, in order."""
    with Connection("zrpush://127.0.0.1:*", hwm=4) as tx:
        board = new_board()
        rx = Receiver(tx.endpoint.replace("tcp://", "zrpull://"), dict(timeout=0.1, bind=False, hwm=4), board, 0, 1)
        try:
            join = in_thread(lambda: (send_stream(tx, 0, 30), send_stream(tx, 1, 40)))
            assert held(rx, 4) == [0, 1, 2, 3]
            assert values(rx, 0) == stream(0, 30)
            assert held(rx, 4) == [31, 32, 33, 34]  # 30: stream 0's end marker
            board[0] = (1 << 40) | 31  # what worker 0 does when the next iteration starts
            assert values(rx, 1) == stream(1, 40)
            join()
        finally:
            rx.close()


def test_a_worker_reads_past_its_bound_while_another_waits():
    """Two workers' receiving sides sharing one stream, hwm=2: worker 1 is
    iterated, worker 0 is not (as when the DataLoader waits in order for
    worker 1). Worker 1 runs out of batches before the stream is complete;
    worker 0's thread then takes its whole share, so the counts add up and
    worker 1's iteration ends."""
    with Connection("zrpush://127.0.0.1:*", hwm=2) as tx:
        board = new_board()
        url, kw = tx.endpoint.replace("tcp://", "zrpull://"), dict(timeout=0.1, bind=False, hwm=2)
        rx = [Receiver(url, kw, board, w, 2) for w in range(2)]
        try:
            join = in_thread(send_stream, tx, 0, 60)
            got1 = values(rx[1], 0)
            join()
            with rx[0].cv:
                got0 = [int(decode_batch(b, "np")["i"][0]) for _, _, b in rx[0].items]
            assert len(got0) > 2  # past its bound of 2
            assert sorted(got1 + got0) == stream(0, 60)
        finally:
            for r in rx:
                r.close()


def test_a_count_left_half_written_by_a_killed_worker_is_not_counted():
    """A worker killed in the middle of writing its count (its seqlock left
    odd) makes the stream incomplete instead of hanging the readers; once
    written whole, it counts."""
    from tensorsafe._stream_share import _A, _C, _T, _U, _V, _at, read_state

    board = new_board()
    board[_at(0, _A)] = 3 + 1  # stream 0, view 0: worker 0 holds the end marker 3
    board[_at(0, _T)], board[_at(0, _U)], board[_at(0, _C)] = 0, 3 + 1, 3
    board[_at(0, _V)] = 7
    start = time.monotonic()
    st = read_state(board, 1)
    assert st.end == 3 and not st.complete and time.monotonic() - start < 5
    board[_at(0, _V)] = 8
    st = read_state(board, 1)
    assert st.complete and st.received == 3
