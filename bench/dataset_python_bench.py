#!/usr/bin/env python3
"""Python dataset iteration and writing: tensorsafe against MosaicML
`streaming` (MDS), `webdataset` (tar shards) and plain os.pread of the same
bytes, in one process, from the page cache (docs/dataset-bench.md).

For each sample size (default 200,000 x 1 KiB and 2,000 x 1 MiB of random
bytes, one `bytes` field per sample), each system in turn writes the samples
(timed), its files are read once into the page cache, then it is iterated
sequentially and shuffled (each timed after a warm-up of a few thousand
samples), and its files are deleted before the next system runs (the 1 MiB
set is 2 GiB per system). Every system returns each sample's bytes as a
Python `bytes` object and the loop touches its length.

Shuffled means each system's own shuffle: tensorsafe and MosaicML shuffle
the whole epoch within blocks of shards (tensorsafe's block = MosaicML's
default py1e block, 262,144 samples); webdataset shuffles shards and then
a 1,000-sample buffer; pread reads a uniform random permutation.

MosaicML's StreamingDataset gets batch_size=256: it reads ahead 8 x
batch_size samples and its threads poll, so batch_size=1 throttles it to
about 800 samples/s here, which would not be a fair comparison.

Usage: bench/dataset_python_bench.py [--small N] [--large N] [--only ts,raw,...]
Prints a table and writes JSON with --json FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

SHARD_BYTES = 64 << 20


def warm_files(path):
    """Reads every file under `path` once so the runs read from the page cache."""
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(16 << 20):
                    pass


def timed_iter(make_iter, n_expected, warm=2000):
    """Samples/s of one full pass of make_iter() after a warm-up of `warm`
    samples from another iterator."""
    it = make_iter()
    for i, s in enumerate(it):
        if i + 1 >= warm:
            break
    del it
    t0 = time.perf_counter()
    n = 0
    total = 0
    for s in make_iter():
        total += len(s)
        n += 1
    dt = time.perf_counter() - t0
    if n != n_expected:
        raise RuntimeError(f"expected {n_expected} samples, got {n}")
    return n / dt


class Payloads:
    """Deterministic random payloads: sample i is a slice of one random pool
    at a varying offset (distinct bytes without generating N x size)."""

    def __init__(self, n, size, seed=1):
        rng = np.random.default_rng(seed)
        self.pool = rng.integers(0, 256, size=size + 4096, dtype=np.uint8).tobytes()
        self.offsets = rng.integers(0, 4096, size=n)
        self.n, self.size = n, size

    def __getitem__(self, i):
        o = int(self.offsets[i])
        return self.pool[o:o + self.size]


# ---- systems ---------------------------------------------------------------


def run_raw(dirpath, data, perm):
    path = os.path.join(dirpath, "raw.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for i in range(data.n):
            f.write(data[i])
    write = data.n / (time.perf_counter() - t0)
    warm_files(dirpath)
    fd = os.open(path, os.O_RDONLY)
    size = data.size
    pread = os.pread

    def seq():
        for i in range(data.n):
            yield pread(fd, size, i * size)

    def shuf():
        for i in perm:
            yield pread(fd, size, int(i) * size)

    try:
        return write, timed_iter(seq, data.n), timed_iter(shuf, data.n)
    finally:
        os.close(fd)


def run_tensorsafe(dirpath, data, perm):
    from tensorsafe import dataset as tds

    path = os.path.join(dirpath, "ts")
    t0 = time.perf_counter()
    with tds.Writer(path, schema={"x": "bytes"}, shard_bytes=SHARD_BYTES, sync=False) as w:
        for i in range(data.n):
            w.add({"x": data[i]})
    write = data.n / (time.perf_counter() - t0)
    warm_files(path)

    def seq():
        return (s["x"] for s in tds.StreamingDataset(path))

    def shuf():
        return (s["x"] for s in tds.StreamingDataset(path, shuffle=True, seed=7))

    return write, timed_iter(seq, data.n), timed_iter(shuf, data.n)


def run_mosaic(dirpath, data, perm):
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("streaming").setLevel(logging.ERROR)
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    path = os.path.join(dirpath, "mds")
    t0 = time.perf_counter()
    with MDSWriter(out=path, columns={"x": "bytes"}, size_limit=SHARD_BYTES) as w:
        for i in range(data.n):
            w.write({"x": data[i]})
    write = data.n / (time.perf_counter() - t0)
    warm_files(path)

    def make(shuffle):
        def it():
            ds = StreamingDataset(local=path, shuffle=shuffle, shuffle_seed=7, batch_size=256)
            return (s["x"] for s in ds)
        return it

    try:
        return write, timed_iter(make(False), data.n), timed_iter(make(True), data.n)
    finally:
        clean_stale_shared_memory()


def run_wds(dirpath, data, perm):
    import webdataset as wds

    path = os.path.join(dirpath, "wds")
    os.makedirs(path)
    t0 = time.perf_counter()
    with wds.ShardWriter(os.path.join(path, "shard-%06d.tar"), maxsize=SHARD_BYTES, maxcount=10**9,
                         verbose=0) as w:
        for i in range(data.n):
            w.write({"__key__": f"{i:09d}", "bin": data[i]})
    write = data.n / (time.perf_counter() - t0)
    warm_files(path)
    urls = sorted(os.path.join(path, f) for f in os.listdir(path))

    def seq():
        return (s["bin"] for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False))

    def shuf():
        ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=7, empty_check=False).shuffle(1000)
        return (s["bin"] for s in ds)

    return write, timed_iter(seq, data.n), timed_iter(shuf, data.n)


SYSTEMS = {"raw": ("os.pread", run_raw), "ts": ("tensorsafe", run_tensorsafe),
           "mds": ("MosaicML streaming", run_mosaic), "wds": ("webdataset", run_wds)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=200_000, help="number of 1 KiB samples (0: skip)")
    ap.add_argument("--large", type=int, default=2_000, help="number of 1 MiB samples (0: skip)")
    ap.add_argument("--only", default="raw,ts,mds,wds")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    which = args.only.split(",")
    results = []
    for n, size in ((args.small, 1024), (args.large, 1 << 20)):
        if n <= 0:
            continue
        data = Payloads(n, size)
        perm = np.random.default_rng(7).permutation(n)
        for key in which:
            name, fn = SYSTEMS[key]
            d = tempfile.mkdtemp(prefix=f"dsbench-{key}-", dir=args.dir)
            try:
                w, seq, shuf = fn(d, data, perm)
            except Exception as e:  # a peer that fails is reported, not fatal
                print(f"{name}: {size} B: failed: {e!r}", file=sys.stderr)
                continue
            finally:
                shutil.rmtree(d, ignore_errors=True)
            results.append({"system": key, "name": name, "samples": n, "size": size,
                            "write": w, "seq": seq, "shuffled": shuf})
            print(f"{name:20s} {size:>8d} B x {n:>7d}: write {w:>11,.0f}/s  seq {seq:>11,.0f}/s  "
                  f"shuffled {shuf:>11,.0f}/s", flush=True)
    print()
    for size in sorted({r["size"] for r in results}):
        rows = {r["system"]: r for r in results if r["size"] == size}
        print(f"{size} B samples (samples/s; ratio = tensorsafe / other)")
        print(f"{'':20s} {'write':>12s} {'sequential':>12s} {'shuffled':>12s}")
        for key in ("ts", "raw", "mds", "wds"):
            if key in rows:
                r = rows[key]
                print(f"{r['name']:20s} {r['write']:>12,.0f} {r['seq']:>12,.0f} {r['shuffled']:>12,.0f}")
        if "ts" in rows:
            t = rows["ts"]
            for key in ("raw", "mds", "wds"):
                if key in rows:
                    r = rows[key]
                    print(f"  tensorsafe / {r['name']:18s} write {t['write'] / r['write']:6.2f}x  "
                          f"seq {t['seq'] / r['seq']:6.2f}x  shuffled {t['shuffled'] / r['shuffled']:6.2f}x")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
