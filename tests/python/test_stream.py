"""tensorsafe.stream: batches of NumPy arrays and torch tensors over pipes,
TCP (127.0.0.1) and ZeroMQ, through the C++ stream API."""
import errno
import os
import threading
import time

import ml_dtypes
import numpy as np
import pytest
import torch

import tensorsafe
from tensorsafe.stream import Connection

from helpers import NUMPY_DTYPES, in_thread, random_array, same_bits

# What tenbin (and so tensorcom) carries.
TENBIN_DTYPES = ["f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
# What ZIO TENS carries.
ZIO_DTYPES = TENBIN_DTYPES + ["bool", "c64", "c128"]


def every_dtype_batch(rng):
    batch = {f"t_{name}": random_array(rng, dt, (3, 5)) for name, dt in NUMPY_DTYPES.items()}
    batch["scalar"] = np.array(7, np.int64)
    batch["empty"] = np.zeros((0, 4), np.float32)
    batch["big"] = random_array(rng, np.float32, (256, 129))
    return batch



def check_batch(got, want):
    assert isinstance(got, dict) and list(got) == list(want)
    for k, v in want.items():
        assert same_bits(got[k], v), k


def test_zmq_send_is_zero_copy_for_large_arrays(rng):
    """Arrays of 64 KiB and more leave from their own memory (send() returns
    once libzmq has sent them); smaller ones are copied. A release token once
    read as "no owner" made every array a copy."""
    big, small = random_array(rng, np.float32, (1 << 18,)), random_array(rng, np.float32, (100,))
    with Connection("zpull://127.0.0.1:*") as rx:
        with Connection(rx.endpoint.replace("tcp://", "zpush://")) as tx:
            for _ in range(3):
                tx.send({"big": big, "small": small})
            want = big.copy()
            big[:] = 0  # the caller's again once send() has returned
            assert tx._sender.bytes_copied == 3 * small.nbytes
        for _ in range(3):
            got = rx.recv()
            assert same_bits(got["small"], small) and same_bits(got["big"], want)


def test_zmq_send_without_waiting_keeps_the_arrays_until_sent(rng, tmp_path):
    """send(wait=False) returns before libzmq has written the batch: here
    before any receiver exists. The connection keeps the arrays alive (the
    caller dropped every reference, and fresh arrays of the same size were
    made meanwhile) until the tracker is done."""
    endpoint = f"ipc://{tmp_path}/s"
    with Connection(f"zpush+{endpoint}") as tx:  # connects; nobody listens yet
        big = random_array(rng, np.float32, (1 << 20,))
        want = big.copy()
        tracker = tx.send({"big": big}, wait=False)
        assert isinstance(tracker, tensorsafe.stream.SendTracker)
        assert not tracker.done and not tracker.wait(50)
        assert len(tx._pending) == 1
        del big, tracker
        scratch = [np.zeros(1 << 20, np.float32) for _ in range(4)]  # would take freed memory
        with Connection(f"zpull+{endpoint}") as rx:
            got = rx.recv()
            assert same_bits(got["big"], want)
            tx.drain()  # every frame written: the first tracker is done
            assert tx._pending[0].done
            second = tx.send({"big": want}, wait=False)
            assert list(tx._pending) in ([], [second])  # the done one was let go
            assert same_bits(rx.recv()["big"], want)
            assert second.wait(5000) and second.done
            assert tx.send({"big": want}) is None  # waiting: nothing to track
            rx.recv()
        assert len(scratch) == 4


def test_send_tracker_is_done_in_a_forked_child(rng, tmp_path):
    """A forked child has no libzmq thread reading the parent's frames: its
    copy of a pending tracker is done, and its exit never waits for it."""
    endpoint = f"ipc://{tmp_path}/s"
    with Connection(f"zpush+{endpoint}") as tx:
        arr = random_array(rng, np.float32, (1 << 18,))
        tracker = tx.send({"a": arr}, wait=False)
        assert not tracker.done
        pid = os.fork()
        if pid == 0:
            os._exit(0 if tracker.done and tracker.wait(0) else 1)
        assert os.waitpid(pid, 0)[1] == 0
        with Connection(f"zpull+{endpoint}") as rx:
            assert same_bits(rx.recv()["a"], arr)
            assert tracker.wait(5000)


def test_close_with_a_batch_nobody_received_returns_after_linger(rng, tmp_path):
    """close() waits for pending trackers, which libzmq releases when the
    socket's linger ends: a peer that never came does not hang the close."""
    tx = Connection(f"zpush+ipc://{tmp_path}/s", linger=0.2)
    tracker = tx.send({"a": random_array(rng, np.float32, (1 << 18,))}, wait=False)
    t0 = time.monotonic()
    tx.close()  # the end marker is queued behind the batch
    assert time.monotonic() - t0 < 5 and tracker.done


def test_byte_stream_send_without_waiting_is_done_at_once(rng):
    r, w = os.pipe()
    with Connection.from_fd(r, "recv") as rx, Connection.from_fd(w, "send") as tx:
        arr = random_array(rng, np.float32, (1000,))
        got = []
        th = threading.Thread(target=lambda: got.append(rx.recv()))
        th.start()
        tracker = tx.send({"a": arr}, wait=False)
        assert tracker.done and tracker.wait(0)
        th.join()
        assert same_bits(got[0]["a"], arr)


@pytest.mark.parametrize("transport", ["tcp-raw", "unix", "pipe", "zmq"])
def test_every_dtype_round_trip_with_metadata(rng, tmp_path, transport):
    batches = [every_dtype_batch(rng) for _ in range(3)]
    meta = [{"step": i, "nested": {"ok": [1, 2]}} for i in range(3)]

    def send(c):
        with c:
            for b, m in zip(batches, meta):
                c.send(b, m)
            c.send_end()

    if transport == "pipe":
        r, w = os.pipe()
        rx, tx = Connection.from_fd(r, "recv"), Connection.from_fd(w, "send")
    elif transport == "tcp-raw":
        rx = Connection("tcp-raw://127.0.0.1:0", "recv")
        tx = None
    elif transport == "unix":
        rx = Connection(f"unix://{tmp_path}/s.sock", "recv")
        tx = Connection(rx.endpoint, "send")
    else:
        rx = Connection("zpull://127.0.0.1:*")
        tx = None
    with rx:
        if tx is None:
            scheme = "tcp-raw" if transport == "tcp-raw" else "zpush"
            url = rx.endpoint.replace("tcp-raw", scheme).replace("tcp://", "zpush://")
            tx = Connection(url, "send" if transport == "tcp-raw" else None)
        join = in_thread(send, tx)
        got = list(rx)
        join()
        assert len(got) == 3
        for g, b in zip(got, batches):
            check_batch(g, b)
        assert rx.metadata == meta[-1]
        arr = got[0]["big"]
        assert not arr.flags.writeable and isinstance(arr.base, tensorsafe.TensorBuffer)  # a view of the message
        if transport != "zmq":
            assert arr.ctypes.data % 64 == 0  # byte streams: every tensor 64-byte aligned in the buffer
    if transport == "pipe":
        os.close(r)
        os.close(w)


def test_received_arrays_outlive_the_connection(rng):
    r, w = os.pipe()
    want = random_array(rng, np.float64, (100,))
    with Connection.from_fd(w, "send") as tx:
        tx.send([want])
        tx.send_end()
    os.close(w)
    with Connection.from_fd(r, "recv") as rx:
        got = rx.recv()
        assert rx.recv() is None and rx.recv() is None  # the end, and it stays the end
    os.close(r)
    assert isinstance(got, list) and same_bits(got[0], want)


def test_list_batches_and_torch_tensors_over_zmq():
    with Connection("zpull://127.0.0.1:*", framework="pt") as rx:
        with Connection(rx.endpoint.replace("tcp://", "zpush://")) as tx:
            tx.send([torch.arange(12, dtype=torch.bfloat16).reshape(3, 4), torch.tensor([True, False]),
                     np.arange(3, dtype=np.uint32), torch.arange(10)[::2]])  # non-contiguous: copied
            tx.send({"0": torch.ones(1), "x": torch.zeros(2, dtype=torch.float8_e4m3fn)})
            got = rx.recv()
            assert isinstance(got, list) and len(got) == 4
            assert got[0].dtype == torch.bfloat16 and torch.equal(got[0], torch.arange(12).reshape(3, 4).bfloat16())
            assert torch.equal(got[1], torch.tensor([True, False]))
            assert got[2].dtype == torch.uint32 and got[2].tolist() == [0, 1, 2]
            assert got[3].tolist() == [0, 2, 4, 6, 8]
            got = rx.recv()
            assert isinstance(got, dict) and list(got) == ["0", "x"]
            assert got["x"].dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("encoding", ["native", "tensorcom", "tensorcom-single", "zio"])
def test_zmq_encodings(rng, encoding):
    dtypes = {"native": list(NUMPY_DTYPES), "zio": ZIO_DTYPES}.get(encoding, TENBIN_DTYPES)
    batch = [random_array(rng, NUMPY_DTYPES[d], (2, 3)) for d in dtypes]
    with Connection("zpull://127.0.0.1:*", encoding=encoding) as rx:
        with Connection(rx.endpoint.replace("tcp://", "zpush://"), encoding=encoding) as tx:
            for _ in range(2):
                tx.send(batch)
            for _ in range(2):
                got = rx.recv()
                assert isinstance(got, list) and len(got) == len(batch)
                for g, w in zip(got, batch):
                    assert same_bits(g, w)


def test_tensorcom_refuses_metadata_and_dtypes_it_lacks():
    with Connection("zpush://127.0.0.1:1", encoding="tensorcom", linger=0) as tx:
        with pytest.raises(tensorsafe.UnsupportedError, match="metadata"):
            tx.send([np.ones(2, np.float32)], {"a": 1})
        with pytest.raises(tensorsafe.UnsupportedError, match="bf16"):
            tx.send([np.ones(2, ml_dtypes.bfloat16)])


def test_pub_sub():
    with Connection("zpub://127.0.0.1:*") as pub:
        with Connection(pub.endpoint.replace("tcp://", "zsub://"), timeout=10) as sub:
            pub.wait_for_subscriber(10)
            pub.send({"x": np.arange(4, dtype=np.int16)}, {"topic": "t"})
            got = sub.recv()
            assert got["x"].tolist() == [0, 1, 2, 3] and sub.metadata == {"topic": "t"}


def test_dataloader_over_the_stream():
    from torch.utils.data import DataLoader

    from tensorsafe.stream import StreamDataset

    # The sender's with block ends the stream; the DataLoader reads up to
    # the end marker. (With count=5 the reader would leave after the fifth
    # batch, and the sender's end marker rightly find no receiver.)
    tx = Connection("zpush://127.0.0.1:*", bind=True)
    ds = StreamDataset(tx.endpoint.replace("tcp://", "zrpull://"))
    assert isinstance(ds, torch.utils.data.IterableDataset)

    def send():
        with tx:
            for i in range(5):
                tx.send({"x": torch.full((2, 3), float(i)), "y": torch.tensor([i])})

    join = in_thread(send)
    seen = [batch for batch in DataLoader(ds, batch_size=None, num_workers=0)]
    join()
    assert [int(b["y"].item()) for b in seen] == [0, 1, 2, 3, 4]
    assert all(torch.equal(b["x"], torch.full((2, 3), float(i))) for i, b in enumerate(seen))


def _one_message_stream(batch):
    """The bytes a native sender writes for one batch and the end marker."""
    r, w = os.pipe()
    with Connection.from_fd(w, "send") as tx:
        tx.send(batch)
        tx.send_end()
    os.close(w)
    chunks = []
    while True:
        c = os.read(r, 1 << 16)
        if not c:
            break
        chunks.append(c)
    os.close(r)
    return b"".join(chunks)


def _receive_bytes(data):
    r, w = os.pipe()
    join = in_thread(lambda: (os.write(w, data), os.close(w)))
    try:
        with Connection.from_fd(r, "recv") as rx:
            return list(rx)
    finally:
        join()
        os.close(r)


def test_truncated_message_is_a_clear_error_and_no_partial_batch():
    data = _one_message_stream({"x": np.arange(1000, dtype=np.float32)})
    assert len(data) == 16 + 64 + 64 + 4032 + 64  # preamble, header, descriptors, data, end
    assert len(_receive_bytes(data)) == 1
    with pytest.raises(tensorsafe.CorruptionError,
                       match=r"^batch 0 \(stream offset \d+\): truncated: the stream ended after 2000 of the 4096 "
                             r"bytes of a message body of 4096 bytes$"):
        _receive_bytes(data[:16 + 64 + 2000])
    # The end marker is missing: the sender died between batches.
    with pytest.raises(tensorsafe.CorruptionError,
                       match="truncated: the stream ended after 1 batches without the end-of-stream marker"):
        _receive_bytes(data[:-64])


def test_corrupted_data_fails_its_checksum():
    data = bytearray(_one_message_stream({"x": np.arange(1000, dtype=np.float32)}))
    data[16 + 64 + 128 + 100] ^= 1
    with pytest.raises(tensorsafe.CorruptionError, match=r'tensor "x": data checksum mismatch'):
        _receive_bytes(bytes(data))


def test_receive_timeout_and_closed_connection():
    rx = Connection("zpull://127.0.0.1:*", timeout=0.05)
    with pytest.raises(tensorsafe.IOError) as e:
        rx.recv()
    assert e.value.errno == errno.EAGAIN
    rx.close()
    with pytest.raises(tensorsafe.FailedPreconditionError, match="the connection is closed"):
        rx.recv()
    with pytest.raises(tensorsafe.InvalidArgumentError, match='unknown scheme "http"'):
        Connection("http://x")
    with pytest.raises(tensorsafe.InvalidArgumentError, match=r"tcp-raw:// needs a role: send or recv \(mode=\)"):
        Connection("tcp-raw://127.0.0.1:0")
    with pytest.raises(tensorsafe.InvalidArgumentError, match="mode must be 'send' or 'recv'"):
        Connection("tcp-raw://127.0.0.1:0", "both")
    with pytest.raises(tensorsafe.InvalidArgumentError, match="encoding must be one of"):
        Connection("zpull://127.0.0.1:*", encoding="msgpack")


def test_sparse_tensors_are_refused():
    with Connection("zpush://127.0.0.1:1", linger=0) as tx:
        with pytest.raises(tensorsafe.UnsupportedError, match="sparse COO tensor cannot be sent"):
            tx.send({"s": torch.eye(3).to_sparse()})


def test_sender_killed_mid_message_gives_truncation_and_no_batch(tmp_path):
    import signal
    import subprocess
    import sys

    with Connection("tcp-raw://127.0.0.1:0", "recv") as rx:
        child = subprocess.Popen(
            [sys.executable, "-c", (
                "import sys, numpy as np\n"
                "from tensorsafe.stream import Connection\n"
                f"tx = Connection({rx.endpoint!r}, 'send')\n"
                "tx.send({'ok': np.arange(4, dtype=np.int32)})\n"
                "print('sending', flush=True)\n"
                "tx.send({'big': np.ones(64 << 20, np.uint8)})\n"  # blocks: nobody reads yet
                "print('sent', flush=True)\n")],
            stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "sending"
            import time
            time.sleep(1.0)  # the 64 MiB batch is partly in the kernel, the sender blocked
            child.send_signal(signal.SIGKILL)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
        assert rx.recv()["ok"].tolist() == [0, 1, 2, 3]
        # Killed inside the big message (usual), or, on a loaded machine,
        # before its first byte: truncated either way, and no batch.
        with pytest.raises(tensorsafe.CorruptionError,
                           match=r"batch 1 \(stream offset \d+\): truncated: the stream ended after (\d+ of the "
                                 r"67108928 bytes of a message body|1 batches without the end-of-stream marker)"):
            rx.recv()
        with pytest.raises(tensorsafe.FailedPreconditionError):
            rx.recv()  # and it stays failed
