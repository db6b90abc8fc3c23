"""Tensor files at fsspec URLs (docs/REMOTE.md, "fsspec URLs"): fsspec's own
in-memory filesystem (memory://) serves the bytes, and every tensor-file API
reads them through the native file seam, ranges only."""

import json

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from tensorsafe import _native

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def mem():
    fs = fsspec.filesystem("memory")
    yield fs
    fs.store.clear()


def put(fs, local, name):
    fs.pipe(f"/t/{name}", open(local, "rb").read())
    return f"memory://t/{name}"


def tensors(rng):
    return {"emb": rng.standard_normal((64, 48)).astype(np.float32),
            "ids": rng.integers(-9, 9, size=(37,), dtype=np.int64),
            "half": rng.standard_normal((5, 3)).astype(np.float16)}


def same(got, want):
    assert set(got) == set(want)
    for k, v in want.items():
        g = np.asarray(got[k])
        assert g.dtype == v.dtype and np.array_equal(g, v), k


@pytest.mark.parametrize("fmt", ["tsafe", "safetensors", "gguf", "npz"])
def test_every_reader_takes_an_fsspec_url(mem, tmp_path, rng, fmt):
    want = tensors(rng)
    local = str(tmp_path / f"x.{fmt}")
    if fmt == "safetensors":
        tsn.save_file(want, local)
    else:
        ts.write(local, want, format=fmt)
    url = put(mem, local, f"x.{fmt}")
    same(ts.read(url)[0], want)
    if fmt in ("tsafe", "safetensors", "gguf"):
        same(ts.load(url, framework="np"), want)
        with ts.safe_open(url, framework="np") as f:
            same({k: f.get_tensor(k) for k in f.keys()}, want)
            assert np.array_equal(f.get_slice("emb")[2:4, :5], want["emb"][2:4, :5])
    if fmt in ("tsafe", "safetensors"):
        same(tsn.load_file(url), want)


def test_a_tsafe_of_100k_tensors_opens_in_a_few_reads(mem, tmp_path):
    local = str(tmp_path / "many.tsafe")
    with ts.Writer(local) as w:
        for i in range(100_000):
            w.add(f"t{i}", np.full(4, i, np.int32))
    url = put(mem, local, "many.tsafe")
    before = _native.remote_requests()
    r = ts.open(url)
    assert len(r) == 100_000
    assert _native.remote_requests() - before <= 5
    assert int(r.get("t77777")[0]) == 77777


def test_errors_name_the_url(mem, tmp_path, rng):
    with pytest.raises(ts.NotFoundError, match=r"memory://t/none\.tsafe: no such object"):
        ts.load("memory://t/none.tsafe")
    with pytest.raises(ts.UnsupportedError, match=r"nosuchscheme://b/x\.tsafe: fsspec cannot serve this URL"):
        ts.open("nosuchscheme://b/x.tsafe")
    local = str(tmp_path / "x.tsafe")
    ts.write(local, tensors(rng), format="tsafe")
    data = bytearray(open(local, "rb").read())
    data[200] ^= 1  # inside the first tensor's bytes
    mem.pipe("/t/bad.tsafe", bytes(data))
    with pytest.raises(ts.CorruptionError, match=r"memory://t/bad\.tsafe"):
        ts.load("memory://t/bad.tsafe", framework="np")


def test_a_checkpoint_by_its_folder_url(mem, tmp_path, rng):
    """A folder URL, as a Hub repo or a bucket prefix is given: the index
    under it, else its one tensor file (what huggingface_hub looks for)."""
    want = tensors(rng)
    tsn.save_sharded(want, str(tmp_path / "ck"), max_shard_size=4096)
    shards = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert len(shards) == 3, shards  # an index and two shards
    for name in shards:
        put(mem, tmp_path / "ck" / name, f"ck/{name}")
    ts.write(str(tmp_path / "model.tsafe"), want, format="tsafe")
    put(mem, tmp_path / "model.tsafe", "one/model.tsafe")
    for folder in ("memory://t/ck", "memory://t/ck/", "memory://t/one", "memory://t/one/"):
        with ts.safe_open(folder, framework="np") as f:
            same({k: f.get_tensor(k) for k in f.keys()}, want)
        same(ts.load(folder, framework="np"), want)
        same(tsn.load_file(folder), want)
        same(ts.read(folder)[0], want)
    ts.convert("memory://t/ck/", str(tmp_path / "out.tsafe"))
    same(ts.read(str(tmp_path / "out.tsafe"))[0], want)
    # The index wins over a single file beside it, as for a local folder.
    put(mem, tmp_path / "model.tsafe", "ck/model.tsafe")
    with ts.safe_open("memory://t/ck", framework="np") as f:
        assert [s["name"] for s in f._view.shards()] == [n for n in shards if n.endswith(".safetensors")]
    for missing in ("memory://t/nothing", "memory://t/nothing/"):
        with pytest.raises(ts.NotFoundError, match=missing + ": no checkpoint at this URL: .*"
                           "none of model.safetensors.index.json, model.tsafe.index.json, model.safetensors and "
                           "model.tsafe lies under it"):
            ts.safe_open(missing, framework="np")


def test_an_hf_sharded_checkpoint_by_its_index_url(mem, tmp_path, rng):
    want = tensors(rng)
    names = {"emb": "model-00001-of-00002.safetensors", "ids": "model-00002-of-00002.safetensors",
             "half": "model-00002-of-00002.safetensors"}
    for shard in sorted(set(names.values())):
        tsn.save_file({k: v for k, v in want.items() if names[k] == shard}, str(tmp_path / shard))
        put(mem, tmp_path / shard, shard)
    mem.pipe("/t/model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": names}).encode())
    url = "memory://t/model.safetensors.index.json"
    same(ts.load(url, framework="np"), want)
    with ts.safe_open(url, framework="np") as f:
        same({k: f.get_tensor(k) for k in f.keys()}, want)
