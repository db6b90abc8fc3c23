"""Python streaming throughput: tensorsafe.stream against raw pyzmq and a raw
pipe, in one run on the same data (docs/python.md, "Streaming").

Cases (best of --repeat runs each):
  zmq small: batches of 10 x 1 KiB float32 arrays over ZeroMQ PUSH/PULL on
      loopback TCP; tensorsafe (native, tensorcom encodings) vs pyzmq
      send_multipart/recv_multipart of the same raw frames (no framing, no
      checksums: the baseline).
  pipe large: 256 MiB of 1 MiB arrays (16 per batch) through a pipe;
      tensorsafe native framing vs os.write/os.readinto of the same bytes.
  64 MiB batches (docs/STREAM.md §13): batches of one 64 MiB float32 array,
      Python sending and Python receiving (a thread each), over loopback TCP
      (Connection tcp-raw:// vs a plain Python socket: sendall / recv_into
      of the same bytes into a buffer reused per batch, np.frombuffer) and
      over ZeroMQ PUSH/PULL (Connection zpush/zpull vs raw pyzmq:
      send(copy=False) / recv(copy=False) and np.frombuffer), reported as
      ratios of the same run. ZeroMQ twice: send() returning once libzmq
      has written the batch (the default), and send(wait=False) returning
      at once with a tracker, as pyzmq's copy=False send does.

    .venv/bin/python bench/python_stream_bench.py [--messages 5000] [--repeat 3] [--only small|pipe|big]
"""
import argparse
import os
import socket
import threading
import time

import numpy as np
import zmq

from tensorsafe.stream import Connection


def best(fn, repeat):
    return min(fn() for _ in range(repeat))


def zmq_raw(batch, n):
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    frames = [a.data for a in batch]

    def send():
        for _ in range(n):
            push.send_multipart(frames, copy=False)

    t0 = time.perf_counter()
    th = threading.Thread(target=send)
    th.start()
    for _ in range(n):
        got = pull.recv_multipart(copy=False)
        [np.frombuffer(f.buffer, np.float32) for f in got]
    th.join()
    dt = time.perf_counter() - t0
    push.close(0), pull.close(0), ctx.term()
    return dt


def zmq_tensorsafe(batch, n, encoding):
    with Connection("zpull://127.0.0.1:*", encoding=encoding) as rx:
        with Connection(rx.endpoint.replace("tcp://", "zpush://"), encoding=encoding) as tx:
            def send():
                for _ in range(n):
                    tx.send(batch)

            t0 = time.perf_counter()
            th = threading.Thread(target=send)
            th.start()
            for _ in range(n):
                rx.recv()
            th.join()
            return time.perf_counter() - t0


def pipe_raw(arrays, batches):
    r, w = os.pipe()
    size = sum(a.nbytes for a in arrays)

    def send():
        for _ in range(batches):
            for a in arrays:
                mv = memoryview(a).cast("B")
                while mv:
                    k = os.write(w, mv)
                    mv = mv[k:]
        os.close(w)

    buf = bytearray(size)
    t0 = time.perf_counter()
    th = threading.Thread(target=send)
    th.start()
    for _ in range(batches):
        view = memoryview(buf)
        while view:
            k = os.readv(r, [view])
            view = view[k:]
    th.join()
    dt = time.perf_counter() - t0
    os.close(r)
    return dt


def pipe_tensorsafe(arrays, batches):
    r, w = os.pipe()

    def send():
        with Connection.from_fd(w, "send") as tx:
            for _ in range(batches):
                tx.send(arrays)
            tx.send_end()
        os.close(w)

    t0 = time.perf_counter()
    th = threading.Thread(target=send)
    th.start()
    with Connection.from_fd(r, "recv") as rx:
        n = sum(1 for _ in rx)
    th.join()
    dt = time.perf_counter() - t0
    os.close(r)
    assert n == batches
    return dt


def tcp_plain(arr, batches):
    """A plain Python socket pair: the baseline of tcp-raw://."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    view = memoryview(arr).cast("B")

    def send():
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(batches):
                s.sendall(view)

    th = threading.Thread(target=send)
    t0 = time.perf_counter()
    th.start()
    conn, _ = listener.accept()
    buf = bytearray(arr.nbytes)
    for _ in range(batches):
        mv = memoryview(buf)
        while mv:
            k = conn.recv_into(mv)
            mv = mv[k:]
        np.frombuffer(buf, np.float32)
    th.join()
    dt = time.perf_counter() - t0
    conn.close(), listener.close()
    return dt


def tcp_tensorsafe(arr, batches):
    with Connection("tcp-raw://127.0.0.1:0", "recv") as rx:
        def send():
            with Connection(rx.endpoint, "send") as tx:
                for _ in range(batches):
                    tx.send({"x": arr})

        th = threading.Thread(target=send)
        t0 = time.perf_counter()
        th.start()
        n = 0
        for b in rx:
            assert b["x"].nbytes == arr.nbytes
            n += 1
        th.join()
        assert n == batches
        return time.perf_counter() - t0


def zmq_big_raw(arr, batches):
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")

    def send():
        for _ in range(batches):
            push.send(arr, copy=False)

    th = threading.Thread(target=send)
    t0 = time.perf_counter()
    th.start()
    for _ in range(batches):
        f = pull.recv(copy=False)
        assert np.frombuffer(f.buffer, np.float32).nbytes == arr.nbytes
    th.join()
    dt = time.perf_counter() - t0
    push.close(0), pull.close(0), ctx.term()
    return dt


def zmq_big_tensorsafe(arr, batches, wait=True):
    with Connection("zpull://127.0.0.1:*") as rx:
        def send():
            with Connection(rx.endpoint.replace("tcp://", "zpush://")) as tx:
                for _ in range(batches):
                    tx.send({"x": arr}, wait=wait)

        th = threading.Thread(target=send)
        t0 = time.perf_counter()
        th.start()
        n = 0
        for b in rx:
            assert b["x"].nbytes == arr.nbytes
            n += 1
        th.join()
        assert n == batches
        return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--pipe-mib", type=int, default=256)
    ap.add_argument("--big-batches", type=int, default=16, help="64 MiB batches per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["small", "pipe", "big"])
    a = ap.parse_args()
    if a.only in (None, "small"):
        small = [np.random.default_rng(0).random(256, dtype=np.float32) for _ in range(10)]  # 10 x 1 KiB
        raw = best(lambda: zmq_raw(small, a.messages), a.repeat)
        print(f"zmq 10 x 1 KiB, pyzmq raw frames:      {a.messages / raw:10.0f} msg/s (baseline)")
        for enc in ("native", "tensorcom"):
            t = best(lambda: zmq_tensorsafe(small, a.messages, enc), a.repeat)
            print(f"zmq 10 x 1 KiB, tensorsafe {enc:10s}: {a.messages / t:10.0f} msg/s ({raw / t:.2f}x)")
    if a.only in (None, "pipe"):
        big = [np.ones(1 << 18, np.float32) for _ in range(16)]  # 16 x 1 MiB per batch
        batches = a.pipe_mib // 16
        gib = batches * 16 / 1024
        raw = best(lambda: pipe_raw(big, batches), a.repeat)
        print(f"pipe {a.pipe_mib} MiB of 1 MiB arrays, raw write/read:  {gib / raw:6.2f} GiB/s (baseline)")
        t = best(lambda: pipe_tensorsafe(big, batches), a.repeat)
        print(f"pipe {a.pipe_mib} MiB of 1 MiB arrays, tensorsafe:      {gib / t:6.2f} GiB/s ({raw / t:.2f}x)")
    if a.only in (None, "big"):
        arr = np.random.default_rng(1).random(16 << 20, dtype=np.float32)  # 64 MiB
        n = a.big_batches
        gib = n * arr.nbytes / (1 << 30)
        # Interleaved, best of each: the machine's load drifts between runs.
        times = {"tcp plain": [], "tcp ts": [], "zmq raw": [], "zmq ts": [], "zmq ts nowait": []}
        for _ in range(a.repeat):
            times["tcp plain"].append(tcp_plain(arr, n))
            times["tcp ts"].append(tcp_tensorsafe(arr, n))
            times["zmq raw"].append(zmq_big_raw(arr, n))
            times["zmq ts"].append(zmq_big_tensorsafe(arr, n))
            times["zmq ts nowait"].append(zmq_big_tensorsafe(arr, n, wait=False))
        b = {k: min(v) for k, v in times.items()}
        print(f"64 MiB batches x {n}, TCP, plain Python socket:  {gib / b['tcp plain']:6.2f} GiB/s (baseline)")
        print(f"64 MiB batches x {n}, TCP, tensorsafe tcp-raw:   {gib / b['tcp ts']:6.2f} GiB/s "
              f"({b['tcp plain'] / b['tcp ts']:.2f}x)")
        print(f"64 MiB batches x {n}, ZeroMQ, raw pyzmq:         {gib / b['zmq raw']:6.2f} GiB/s (baseline)")
        print(f"64 MiB batches x {n}, ZeroMQ, tensorsafe zpush:  {gib / b['zmq ts']:6.2f} GiB/s "
              f"({b['zmq raw'] / b['zmq ts']:.2f}x)")
        print(f"  the same, send(wait=False):                    {gib / b['zmq ts nowait']:6.2f} GiB/s "
              f"({b['zmq raw'] / b['zmq ts nowait']:.2f}x)")


if __name__ == "__main__":
    main()
