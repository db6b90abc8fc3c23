"""Datasets at fsspec URLs (docs/REMOTE.md, "fsspec URLs"): native, MDS and
WebDataset datasets served by a real FTP server (pyftpdlib on 127.0.0.1,
reached through fsspec's ftp:// filesystem) and by fsspec's memory://, read
through the shard cache equal to the local copy, by 2 ranks x 2 DataLoader
workers exactly once per epoch, written by the Writer, with the errors a
damaged or missing object gives."""

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tensorsafe as ts
from tensorsafe import dataset as tds

from moto_s3 import check_two_ranks_two_workers
from test_remote_datasets import assert_equal_datasets, write_mds, write_wds

fsspec = pytest.importorskip("fsspec")


@pytest.fixture(scope="module")
def ftp(tmp_path_factory):
    """An anonymous, writable FTP server over a fresh directory: (root, url)."""
    pytest.importorskip("pyftpdlib")
    root = tmp_path_factory.mktemp("ftp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(root.parent / "ftp.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "pyftpdlib", "-i", "127.0.0.1", "-p", str(port), "-w", "-d",
                             str(root)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "pyftpdlib did not start"
            time.sleep(0.05)
    yield root, f"ftp://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


@pytest.fixture
def mem():
    fs = fsspec.filesystem("memory")
    yield fs
    fs.store.clear()


def write_native(out, n=500):
    with tds.Writer(out, shard_samples=64, compression="zstd") as w:
        for i in range(n):
            w.add({"x": np.full(4, 3 * i, np.int32), "label": i})
    return out


@pytest.mark.parametrize("kind", ["native", "mds", "wds"])
def test_datasets_over_ftp_read_like_the_local_copy(ftp, tmp_path, kind):
    root, base = ftp
    local = tmp_path / kind
    {"native": write_native, "mds": lambda p: write_mds(p, compression="zstd"), "wds": write_wds}[kind](local)
    shutil.copytree(local, root / f"read-{kind}")
    url = f"{base}/read-{kind}"
    cache = tmp_path / "cache"
    want = tds.Dataset(local, cache_dir=tmp_path / "local-cache")
    got = tds.Dataset(url, cache_dir=cache)
    assert_equal_datasets(got, want)
    if kind == "wds":
        # No index.json: the shards come from fsspec's listing, and a brace
        # pattern names them without one.
        assert [s["name"] for s in got.shards] == [f"{url}/shard-{k:04d}.tar" for k in range(5)]
        assert_equal_datasets(tds.Dataset(url + "/shard-{0000..0004}.tar", cache_dir=cache), want)
    assert tds.verify(url, cache_dir=cache) == []


@pytest.mark.parametrize("kind", ["mds", "wds"])
def test_two_ranks_two_workers_exactly_once_over_ftp(ftp, tmp_path, kind):
    pytest.importorskip("torch")
    root, base = ftp
    if kind == "mds":
        write_mds(root / "ranks-mds", compression="zstd")
        url, label, x = f"{base}/ranks-mds", "label", "x"
    else:
        write_wds(root / "ranks-wds")
        url, label, x = f"{base}/ranks-wds", "cls", "x.npy"
    check_two_ranks_two_workers(url, tmp_path / "cache", label, x, 300, collate="list")


def test_writer_to_ftp_stores_shards_then_the_index(ftp, tmp_path, monkeypatch):
    root, base = ftp
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    url = f"{base}/written/ds"
    with tds.Writer(url, shard_samples=100, metadata={"source": "test"}) as w:
        for i in range(1000):
            w.add({"x": np.full(4, 3 * i, np.int32), "label": i})
    assert sorted(os.listdir(root / "written/ds")) == ["index.json"] + [f"shard-{k:05d}.tsafe" for k in range(10)]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("tensorsafe-upload-")]  # staging removed
    ds = tds.Dataset(url, cache_dir=tmp_path / "cache")
    assert len(ds) == 1000 and ds.metadata == {"source": "test"}
    assert all(int(s["x"][0]) == 3 * int(s["label"]) for s in ds)
    with pytest.raises(ts.FailedPreconditionError, match=r"ftp://127\.0\.0\.1:\d+/written/ds/index\.json exists"):
        tds.Writer(url)


def test_an_abandoned_writer_removes_its_shards(mem):
    with pytest.raises(RuntimeError, match="stop"):
        with tds.Writer("memory://bkt/abandoned", shard_samples=10) as w:
            for i in range(55):
                w.add({"label": i})
            raise RuntimeError("stop")
    assert mem.find("/bkt") == []


def test_errors_name_the_url_and_leave_nothing_cached(mem, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(ts.NotFoundError, match=r"memory://bkt/none/index\.json.*no \.tar shards under "
                                               r"memory://bkt/none/"):
        tds.Dataset("memory://bkt/none", cache_dir=cache)
    write_native(tmp_path / "ds", n=100)
    for name in os.listdir(tmp_path / "ds"):
        mem.pipe(f"/bkt/ds/{name}", (tmp_path / "ds" / name).read_bytes())
    shard = "/bkt/ds/shard-00001.tsafe.zst"
    data = bytearray(mem.cat_file(shard))
    data[len(data) // 2] ^= 0x40
    mem.pipe(shard, bytes(data))
    ds = tds.Dataset("memory://bkt/ds", cache_dir=cache)
    assert int(ds[0]["label"]) == 0
    with pytest.raises(ts.CorruptionError, match=r"GET memory://bkt/ds/shard-00001\.tsafe\.zst: XXH3-64 .* not cached"):
        ds[64]
    mem.pipe(shard, bytes(data[:-10]))  # shorter than the index says
    with pytest.raises(ts.CorruptionError, match=r"memory://bkt/ds/shard-00001\.tsafe\.zst: the object has \d+ "
                                                 r"bytes, the index says \d+; not cached"):
        tds.Dataset("memory://bkt/ds", cache_dir=cache)[64]
    cached = [n for _, _, files in os.walk(cache) for n in files if "shard-00001" in n]
    assert cached == []
    with pytest.raises(ts.UnsupportedError, match=r"nosuchscheme://b/ds/index\.json: fsspec cannot serve this URL"):
        tds.Dataset("nosuchscheme://b/ds", cache_dir=cache)
    with pytest.raises(ts.InvalidArgumentError, match=r"credentials in the URL"):
        tds.Dataset("ftp://user:secret@127.0.0.1:9/ds", cache_dir=cache)


# Downloads run on the cache's threads, which call fsspec with the GIL. A
# dataset dropped while they do must not wait for them holding the GIL.
SLOW_DROP = textwrap.dedent(r"""
    import sys, time
    import fsspec
    import numpy as np
    from fsspec.implementations.memory import MemoryFileSystem
    from tensorsafe import dataset as tds

    class Slow(MemoryFileSystem):
        protocol = "slowmem"
        @classmethod
        def _strip_protocol(cls, path):
            return super()._strip_protocol(path.replace("slowmem://", "memory://", 1))
        def cat_file(self, path, start=None, end=None, **kw):
            time.sleep(0.3)
            return super().cat_file(path, start=start, end=end, **kw)

    fsspec.register_implementation("slowmem", Slow)
    with tds.Writer("memory://slow/ds", shard_samples=10) as w:
        for i in range(200):
            w.add({"x": np.full(1000, i, np.int32)})
    ds = tds.Dataset("slowmem://slow/ds", cache_dir=sys.argv[1])
    it = iter(ds)
    assert int(next(it)["x"][0]) == 0
    del it, ds  # the next shards are downloading now
    print("dropped", flush=True)
""")


def test_dropping_a_dataset_while_fsspec_downloads_run(tmp_path):
    r = subprocess.run([sys.executable, "-c", SLOW_DROP, str(tmp_path / "cache")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "dropped" in r.stdout, r.stderr[-3000:]
