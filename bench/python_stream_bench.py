"""Python streaming throughput: tensorsafe.stream against raw pyzmq and a raw
pipe, in one run on the same data (docs/python.md, "Streaming").

Cases (best of --repeat runs each):
  zmq small: batches of 10 x 1 KiB float32 arrays over ZeroMQ PUSH/PULL on
      loopback TCP; tensorsafe (native, tensorcom encodings) vs pyzmq
      send_multipart/recv_multipart of the same raw frames (no framing, no
      checksums: the baseline).
  pipe large: 256 MiB of 1 MiB arrays (16 per batch) through a pipe;
      tensorsafe native framing vs os.write/os.readinto of the same bytes.

    .venv/bin/python bench/python_stream_bench.py [--messages 5000] [--repeat 3]
"""
import argparse
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--pipe-mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    small = [np.random.default_rng(0).random(256, dtype=np.float32) for _ in range(10)]  # 10 x 1 KiB
    raw = best(lambda: zmq_raw(small, a.messages), a.repeat)
    print(f"zmq 10 x 1 KiB, pyzmq raw frames:      {a.messages / raw:10.0f} msg/s (baseline)")
    for enc in ("native", "tensorcom"):
        t = best(lambda: zmq_tensorsafe(small, a.messages, enc), a.repeat)
        print(f"zmq 10 x 1 KiB, tensorsafe {enc:10s}: {a.messages / t:10.0f} msg/s ({raw / t:.2f}x)")
    big = [np.ones(1 << 18, np.float32) for _ in range(16)]  # 16 x 1 MiB per batch
    batches = a.pipe_mib // 16
    gib = batches * 16 / 1024
    raw = best(lambda: pipe_raw(big, batches), a.repeat)
    print(f"pipe {a.pipe_mib} MiB of 1 MiB arrays, raw write/read:  {gib / raw:6.2f} GiB/s (baseline)")
    t = best(lambda: pipe_tensorsafe(big, batches), a.repeat)
    print(f"pipe {a.pipe_mib} MiB of 1 MiB arrays, tensorsafe:      {gib / t:6.2f} GiB/s ({raw / t:.2f}x)")


if __name__ == "__main__":
    main()
