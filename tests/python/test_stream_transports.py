"""Streams as users run them: a Python sender in a `with` block and Python
and CLI receivers over every transport (pipe, tcp-raw, unix, ZeroMQ
PUSH/PULL and PUB/SUB) ending cleanly without an explicit send_end();
end markers on the exit paths a user expects (and none after a failure);
one address grammar for the CLI and Python; ZeroMQ across fork()
(StreamDataset and DataLoader workers: test_stream_dataset.py)."""

import errno
import os
import re
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import tensorsafe
from tensorsafe.stream import Connection, parse_url

from helpers import in_thread

torch = pytest.importorskip("torch")

BATCHES = 3


def cli():
    return os.path.join(os.path.dirname(sys.executable), "tensorsafe")


def batch(i):
    # Unique names per batch: the CLI writes every tensor of the stream to one file.
    return {f"x{i}": np.full((2, 3), i, np.float32), f"n{i}": np.arange(i + 1, dtype=np.int64)}


def send_all(url, mode="send", wait_sub=False, **kw):
    """The sender as a user writes it: no send_end(); the block ends it."""
    with Connection(url, mode, **kw) as tx:
        if wait_sub:
            tx.wait_for_subscriber(20)
        for i in range(BATCHES):
            tx.send(batch(i), {"i": i})



def check_python_batches(got):
    assert len(got) == BATCHES
    for i, b in enumerate(got):
        assert sorted(b) == [f"n{i}", f"x{i}"]
        assert b[f"x{i}"].tolist() == np.full((2, 3), i, np.float32).tolist()
        assert b[f"n{i}"].tolist() == list(range(i + 1))


def check_cli_file(path):
    tensors, meta = tensorsafe.read(path)
    assert sorted(tensors) == sorted(f"{k}{i}" for i in range(BATCHES) for k in "xn")
    for i in range(BATCHES):
        assert tensors[f"x{i}"].tolist() == np.full((2, 3), i, np.float32).tolist()
    assert meta == {"i": 0}  # the first batch's metadata


# ---- Python receivers ---------------------------------------------------------


@pytest.mark.parametrize("transport", ["pipe", "tcp-raw", "unix", "zpush", "zpush+ipc", "zpub"])
def test_python_to_python_with_blocks_end_cleanly(tmp_path, transport):
    if transport == "pipe":
        r, w = os.pipe()
        join = in_thread(lambda: (send_all(f"fd://{w}"), os.close(w)))
        with Connection(f"fd://{r}", "recv", timeout=30) as rx:
            got = list(rx)
        os.close(r)
    elif transport in ("tcp-raw", "unix"):
        url = "tcp-raw://127.0.0.1:0" if transport == "tcp-raw" else f"unix://{tmp_path}/s"
        with Connection(url, "recv", timeout=30) as rx:
            join = in_thread(send_all, rx.endpoint)
            got = list(rx)
    else:
        recv_url = {"zpush": "zpull://127.0.0.1:*", "zpush+ipc": f"zpull+ipc://{tmp_path}/z",
                    "zpub": "zrsub://127.0.0.1:*"}[transport]
        with Connection(recv_url, timeout=30) as rx:
            ep = rx.endpoint
            send_url = ep.replace("tcp://", "zpush://").replace("ipc://", "zpush+ipc://")
            if transport == "zpub":
                send_url = ep.replace("tcp://", "zrpub://")
            join = in_thread(send_all, send_url, None, wait_sub=transport == "zpub")
            got = list(rx)
    join()
    check_python_batches(got)


# ---- CLI receivers ------------------------------------------------------------


def start_cli_recv(address, out, *flags):
    return subprocess.Popen([cli(), "recv", *flags, address, str(out)], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def bound_address(proc, pattern, lines=None):
    """The address the CLI printed on stderr (it binds port 0 / *); the lines
    read on the way are appended to `lines`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if lines is not None:
            lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m.group(1)
    raise AssertionError("the CLI did not say where it listens")


@pytest.mark.parametrize("transport", ["pipe", "tcp-raw", "unix", "zpush", "zpub"])
def test_python_sender_cli_receiver(tmp_path, transport):
    out = tmp_path / "out.tsafe"
    if transport == "pipe":
        r, w = os.pipe()
        proc = subprocess.Popen([cli(), "recv", "-", str(out)], stdin=r, stderr=subprocess.PIPE, text=True)
        os.close(r)
        send_all(f"fd://{w}")
        os.close(w)
    elif transport == "tcp-raw":
        proc = start_cli_recv("tcp-raw://127.0.0.1:0", out)
        send_all(bound_address(proc, r"listening on (tcp-raw://\S+)"))
    elif transport == "unix":
        sock = tmp_path / "cli.sock"
        proc = start_cli_recv(f"unix://{sock}", out)
        deadline = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        send_all(f"unix://{sock}")
    elif transport == "zpush":
        proc = start_cli_recv("zpull://127.0.0.1:*", out)
        send_all(bound_address(proc, r"bound to tcp://(\S+)").join(["zpush://", ""]))
    else:
        with Connection("zpub://127.0.0.1:*") as tx:  # binds; the CLI's zsub:// connects
            proc = start_cli_recv(tx.endpoint.replace("tcp://", "zsub://"), out)
            tx.wait_for_subscriber(60)
            for i in range(BATCHES):
                tx.send(batch(i), {"i": i})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"({BATCHES} batches," in err
    check_cli_file(out)


def test_cli_old_spellings_still_work_with_a_warning(tmp_path):
    out = tmp_path / "out.tsafe"
    proc = start_cli_recv("tcp://127.0.0.1:*", out)  # the old bare ZeroMQ endpoint
    lines = []
    ep = bound_address(proc, r"bound to (tcp://\S+)", lines)
    assert any("warning: tcp://127.0.0.1:*: a bare ZeroMQ endpoint is deprecated: use zpull://127.0.0.1:*" in line
               for line in lines), lines
    with pytest.warns(DeprecationWarning, match=r"use zpush://127\.0\.0\.1:\d+"):
        send_all(ep, "send")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    check_cli_file(out)


# ---- the grammar --------------------------------------------------------------


def test_one_grammar_for_cli_and_python(tmp_path):
    u = parse_url("zpush://127.0.0.1:7000")
    assert (u["transport"], u["mode"], u["pattern"], u["binds"], u["endpoint"]) == (
        "zmq", "send", "pushpull", False, "tcp://127.0.0.1:7000")
    assert parse_url("zrsub+ipc:///tmp/x#topic")["topic"] == "topic"
    assert parse_url("tcp-raw://[::1]:9", "recv")["host"] == "::1"
    assert parse_url("-", "send")["fd"] == 1
    old = parse_url("unix-raw:///tmp/s", "recv")
    assert old["canonical"] == "unix:///tmp/s" and "deprecated" in old["deprecation"]
    assert parse_url("ipc:///tmp/q", "send")["canonical"] == "zpush+ipc:///tmp/q"
    for url, mode, msg in [
        ("zpush://h:1", "recv", "zpush:// sends; it cannot recv"),
        ("tcp-raw://h", "send", "needs HOST:PORT"),
        ("tcp-raw://h:70000", "send", 'bad port "70000"'),
        ("tcp-raw://h:1", None, "needs a role"),
        ("zpush+udp://h:1", None, 'unknown ZeroMQ transport "+udp"'),
        ("http://h:1", "recv", 'unknown scheme "http"'),
        ("zpush://h:1#t", None, "a #topic is for SUB receivers only"),
    ]:
        with pytest.raises(tensorsafe.InvalidArgumentError, match=re.escape(msg)):
            parse_url(url, mode)
    # The CLI reads the same grammar: the same message for the same mistake.
    r = subprocess.run([cli(), "send", str(tmp_path / "none.tsafe"), "zpull://h:1"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "zpull:// receives; it cannot send" in r.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Connection(f"unix-raw://{tmp_path}/old.sock", "recv"):
            pass
    assert any(issubclass(w.category, DeprecationWarning) and "use unix://" in str(w.message) for w in caught)


# ---- end markers on exit paths -------------------------------------------------


def run_sender_script(code, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("how", ["exit", "gc", "sys.exit"])
@pytest.mark.parametrize("transport", ["tcp-raw", "zpush"])
def test_end_marker_on_process_exit_paths(transport, how):
    url = "tcp-raw://127.0.0.1:0" if transport == "tcp-raw" else "zpull://127.0.0.1:*"
    with Connection(url, "recv", timeout=60) as rx:
        target = rx.endpoint.replace("tcp://", "zpush://")
        ending = {"exit": "", "gc": "del c; import gc; gc.collect(); time.sleep(0.5)", "sys.exit": "sys.exit(0)"}[how]
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            import numpy as np
            from tensorsafe.stream import Connection
            c = Connection(sys.argv[1], "send")
            for i in range({BATCHES}):
                c.send({{"x": np.full(4, i, np.int32)}})
            {ending}
        """), target], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), stderr=subprocess.PIPE)
        got = [b["x"].tolist() for b in rx]  # ends: the exit path sent the end marker
        assert proc.wait(60) == 0, proc.stderr.read()
    assert got == [[i] * 4 for i in range(BATCHES)]


def test_failed_block_sends_no_end():
    with Connection("tcp-raw://127.0.0.1:0", "recv", timeout=60) as rx:
        def fail():
            with Connection(rx.endpoint, "send") as tx:
                tx.send(batch(0))
                raise RuntimeError("the producer failed")

        join = in_thread(fail)
        assert next(iter(rx)).keys() == {"x0", "n0"}
        with pytest.raises(tensorsafe.CorruptionError, match="truncated"):
            rx.recv()  # a stream cut short is not taken for a whole one
        with pytest.raises(RuntimeError, match="the producer failed"):
            join()
    with Connection("zpull://127.0.0.1:*", timeout=1.5) as rx:
        def fail_zmq():
            with Connection(rx.endpoint.replace("tcp://", "zpush://")) as tx:
                tx.send(batch(0))
                raise RuntimeError("the producer failed")

        join = in_thread(fail_zmq)
        assert rx.recv() is not None
        with pytest.raises(tensorsafe.IOError) as e:
            rx.recv()
        assert e.value.errno == errno.EAGAIN
        with pytest.raises(RuntimeError):
            join()


def test_zmq_stream_after_stream_on_one_socket():
    """A ZeroMQ sender that goes on after send_end(): its next stream is
    ended by close(); the receiver reads on with next_stream(). A byte
    stream ends once."""
    with Connection("zpull://127.0.0.1:*", timeout=20) as rx:
        with Connection(rx.endpoint.replace("tcp://", "zpush://")) as tx:
            tx.send(batch(0))
            tx.send_end()
            tx.send(batch(1))
        assert list(rx)[0].keys() == {"x0", "n0"} and rx.last_sequence == 1
        assert rx.recv() is None  # still at the end until asked to read on
        rx.next_stream()
        assert [b.keys() for b in rx] == [{"x1", "n1"}]
        assert rx.last_sequence == 3  # the end close() sent: sequence numbers go on
    r, w = os.pipe()
    os.close(w)
    with Connection.from_fd(r, "recv") as rx:
        with pytest.raises(tensorsafe.FailedPreconditionError, match="a byte stream ends once"):
            rx.next_stream()



# ---- ZeroMQ across fork() --------------------------------------------------------


def test_forked_child_of_a_socket_holder_sends_and_receives():
    rx = Connection("zpull://127.0.0.1:*", timeout=30)
    tx = Connection(rx.endpoint.replace("tcp://", "zpush://"))
    tx.send({"a": np.arange(3)})
    assert rx.recv()["a"].tolist() == [0, 1, 2]
    pid = os.fork()
    if pid == 0:  # the child: its own sockets work; the inherited ones refuse
        code = 1
        try:
            with Connection("zpull://127.0.0.1:*", timeout=10) as crx:
                with Connection(crx.endpoint.replace("tcp://", "zpush://")) as ctx:
                    ctx.send({"b": np.arange(5)})
                    ok = crx.recv()["b"].tolist() == [0, 1, 2, 3, 4]
            try:
                tx.send({"a": np.arange(1)})
                ok = False
            except tensorsafe.FailedPreconditionError as e:
                ok = ok and "do not cross fork()" in str(e)
            code = 0 if ok else 2
            # What exiting does to connections (close, the atexit hook): the
            # parent's must come through untouched, no end marker sent.
            tx.close()
            tensorsafe.stream._close_senders_at_exit()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    tx.send({"a": np.arange(4)})  # the parent's pair still works, and no end marker came
    assert rx.recv()["a"].tolist() == [0, 1, 2, 3]
    tx.close()
    assert rx.recv() is None
    rx.close()
