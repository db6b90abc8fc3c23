"""tensorsafe.stream against the real peers from PyPI, on 127.0.0.1:

- pyzmq sockets speaking tensorcom's framing, encoded and decoded by
  webdataset's tenbin module: multipart (a header frame and a data frame per
  array, as tensorcom's zsend_multipart sends) and single-frame (a whole .ten
  buffer, encode_buffer), both directions;
- tensorcom itself (0.1.0, installed with its dependencies already present),
  both directions;
- the CLI: `tensorsafe recv --encoding tensorcom` receives what pyzmq sends.
"""
import subprocess

import numpy as np
import pytest
import zmq
from webdataset import tenbin

import tensorsafe
from tensorsafe.stream import Connection

# What tenbin carries (uint32 excepted: webdataset's table has a typo,
# docs/formats/tenbin.md; tensorsafe reads and writes it).
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint64]


def random_list(rng, min_rank=0):
    """One array of each dtype, ranks min_rank..3 (webdataset cannot decode
    rank 0: np.prod(()) is a float there, docs/formats/tenbin.md)."""
    out = []
    for i, d in enumerate(DTYPES):
        shape = tuple(int(x) for x in rng.integers(1, 5, size=min_rank + i % (4 - min_rank)))
        out.append(rng.integers(0, 100, size=shape).astype(d))
    return out


def assert_same_list(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.mark.parametrize("single", [False, True], ids=["multipart", "single-frame"])
def test_pyzmq_tensorcom_sender_to_tensorsafe(ctx, rng, single):
    batches = [random_list(rng) for _ in range(3)]
    encoding = "tensorcom-single" if single else "tensorcom"
    with Connection("zpull://127.0.0.1:*", encoding=encoding, timeout=20) as rx:
        push = ctx.socket(zmq.PUSH)
        push.connect(rx.endpoint)
        for b in batches:
            if single:
                push.send(tenbin.encode_buffer(b))  # tensorcom's zsend_single
            else:
                push.send_multipart(tenbin.encode_list(b))  # tensorcom's zsend_multipart
        for b in batches:
            assert_same_list(rx.recv(), b)
        push.close(linger=0)


@pytest.mark.parametrize("single", [False, True], ids=["multipart", "single-frame"])
def test_tensorsafe_sender_to_pyzmq_and_webdataset(ctx, rng, single):
    batches = [random_list(rng, min_rank=1) for _ in range(3)]
    encoding = "tensorcom-single" if single else "tensorcom"
    with Connection("zrpush://127.0.0.1:*", encoding=encoding) as tx:  # binds
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVTIMEO, 20000)
        pull.connect(tx.endpoint)
        for b in batches:
            tx.send(b)
        for b in batches:
            if single:
                frames = [pull.recv()]
                got = tenbin.decode_buffer(frames[0])
            else:
                frames = pull.recv_multipart()
                assert len(frames) == 2 * len(b)
                # Header frames are tenbin header payloads: 24 + 8 * rank bytes.
                assert [len(f) for f in frames[::2]] == [24 + 8 * a.ndim for a in b]
                got = tenbin.decode_list(frames)
            assert_same_list(got, b)
        pull.close(linger=0)


def test_cli_receives_what_pyzmq_sends(ctx, rng, tmp_path, cli):
    want = [np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(5, dtype=np.int64)]
    out = tmp_path / "got.tsafe"
    port = _free_port()
    recv = subprocess.Popen([str(cli), "recv", "--encoding", "tensorcom", "--count", "1",
                             f"zpull://127.0.0.1:{port}", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{port}")
        push.send_multipart(tenbin.encode_list(want))
        assert recv.wait(30) == 0, recv.stderr.read()
        push.close(linger=0)
    finally:
        if recv.poll() is None:
            recv.kill()
    got = tensorsafe.read(out)[0]
    assert_same_list(list(got.values()), want)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("multipart", [True, False], ids=["multipart", "single-frame"])
def test_real_tensorcom_both_ways(rng, multipart):
    tensorcom = pytest.importorskip("tensorcom.zcom", reason="tensorcom is not installed")
    encoding = "tensorcom" if multipart else "tensorcom-single"
    batch = [rng.standard_normal((4, 3)).astype(np.float32), rng.integers(0, 9, (2, 2)).astype(np.int16)]
    port = _free_port()
    # tensorcom -> tensorsafe: tensorcom's zpush connects, our zpull binds.
    with Connection(f"zpull://127.0.0.1:{port}", encoding=encoding, timeout=20) as rx:
        tc = tensorcom.Connection(f"zpush://127.0.0.1:{port}", multipart=multipart)
        tc.send(batch)
        assert_same_list(rx.recv(), batch)
        tc.close()
    # tensorsafe -> tensorcom: tensorcom's zpull binds, our zpush connects.
    port = _free_port()
    tc = tensorcom.Connection(f"zpull://127.0.0.1:{port}", multipart=multipart)
    tc.socket.setsockopt(zmq.RCVTIMEO, 20000)
    with Connection(f"zpush://127.0.0.1:{port}", encoding=encoding) as tx:
        tx.send(batch)
        assert_same_list(tc.recv(), batch)
    tc.close()
