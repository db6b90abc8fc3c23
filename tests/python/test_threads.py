"""Concurrent reads from threads (the GIL is released during I/O)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tensorsafe as ts


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_concurrent_reads(tmp_path, mode):
    p = tmp_path / "x.tsafe"
    arrays = {f"t{i}": np.full((64, 33), i, dtype=np.int32) for i in range(32)}
    with ts.Writer(p) as w:
        for k, v in arrays.items():
            w.add(k, v)
    r = ts.open(p, mode=mode)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            i = int(rng.integers(32))
            a = r[f"t{i}"]
            if a.shape != (64, 33) or not (a == i).all():
                errors.append((seed, i))
            s = r.read_slice(f"t{i}", np.s_[5:9, ::3])
            if not (s == i).all():
                errors.append((seed, i, "slice"))
        return True

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, range(8)))
    assert errors == []


def test_gil_released_during_write(tmp_path):
    """Another thread runs Python while a large tensor is written and synced."""
    big = np.ones(128 << 20, dtype=np.uint8)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        w = ts.Writer(tmp_path / "big.tsafe")
        n0 = len(ticks)
        w.add("big", big)  # one native call: ~128 MiB of writing
        n1 = len(ticks)
        w.finish()
    finally:
        stop.set()
        t.join()
    assert n1 - n0 >= 5, f"the other thread ran {n1 - n0} times during the write"


def test_concurrent_verify_and_safe_open(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        for i in range(16):
            w.add(f"t{i}", np.arange(1000, dtype=np.float64) * i)
    def work(_):
        ts.verify(p)
        with ts.safe_open(p, "np") as f:
            return float(sum(f.get_tensor(k).sum() for k in f.keys()))
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(work, range(16)))
    assert len(set(results)) == 1
