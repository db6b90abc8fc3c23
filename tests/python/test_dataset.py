"""tensorsafe.dataset: writing, map-style reading, the fast iterator, merge,
verify and the errors of damaged datasets (docs/python-dataset.md)."""

import gc
import json

import ml_dtypes
import numpy as np
import pytest

import tensorsafe as ts
from tensorsafe import dataset as tds
from helpers import NUMPY_DTYPES, random_array

torch = pytest.importorskip("torch")


def write(path, samples, **kw):
    kw.setdefault("sync", False)
    with tds.Writer(path, **kw) as w:
        for s in samples:
            w.add(s)
    return w


def assert_sample_equal(got, want):
    assert set(got) == set(want)
    for k, v in want.items():
        g = got[k]
        if isinstance(v, torch.Tensor):
            v = v.numpy() if v.dtype not in (torch.bfloat16,) else v.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if isinstance(v, (np.ndarray, np.generic)):
            v = np.asarray(v)
            assert isinstance(g, np.ndarray), k
            assert g.dtype == v.dtype and g.shape == v.shape, (k, g.dtype, v.dtype, g.shape, v.shape)
            assert g.tobytes() == v.tobytes(), k
        elif isinstance(v, tuple):
            assert g == list(v), k
        else:
            assert type(g) is type(v) and g == v, (k, g, v)


def mixed_samples(rng, n):
    out = []
    for i in range(n):
        out.append({
            "img": random_array(rng, np.uint8, (2, 3)),
            "var": random_array(rng, np.float32, (int(rng.integers(0, 5)),)),
            "raw": rng.bytes(int(rng.integers(0, 40))),
            "text": "é" * int(rng.integers(0, 4)) + str(i),
            "label": int(rng.integers(-(1 << 62), 1 << 62)),
            "score": float(rng.standard_normal()),
            "meta": {"i": i, "tags": ["a", "b"][: i % 3], "ok": bool(i % 2)},
        })
    return out


SCHEMA = {"img": ("uint8", (2, 3)), "var": ("f32", (None,)), "raw": "bytes", "text": "str", "label": "int",
          "score": "float", "meta": "json"}


def test_round_trip_every_kind(tmp_path, rng):
    samples = mixed_samples(rng, 57)
    w = write(tmp_path / "ds", samples, schema=SCHEMA, shard_samples=10)
    assert w.result == {"samples": 57, "shards": 6, "schema": w.result["schema"]}
    ds = tds.Dataset(tmp_path / "ds")
    assert len(ds) == 57 and len(ds.shards) == 6
    assert [f["name"] for f in ds.schema] == list(SCHEMA)
    for i, want in enumerate(samples):
        assert_sample_equal(ds[i], want)
    for got, want in zip(ds, samples):  # the fast iterator
        assert_sample_equal(got, want)
    assert_sample_equal(ds[-1], samples[-1])
    assert_sample_equal(ds[-57], samples[0])


@pytest.mark.parametrize("dname", sorted(NUMPY_DTYPES))
def test_round_trip_every_dtype(tmp_path, rng, dname):
    dt = NUMPY_DTYPES[dname]
    samples = [{"x": random_array(rng, dt, (3, 2)), "s": random_array(rng, dt, ())} for _ in range(5)]
    write(tmp_path / "ds", samples)
    ds = tds.Dataset(tmp_path / "ds")
    assert ds.schema[0] == {"name": "x", "kind": "tensor", "dtype": dname, "shape": [3, 2]}
    for got, want in zip(ds.iter([4, 0, 2]), [samples[4], samples[0], samples[2]]):
        assert_sample_equal(got, want)


def test_torch_tensors_written(tmp_path):
    samples = [{"a": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3) + i,
                "b": torch.full((4,), i, dtype=torch.float8_e4m3fn),
                "c": torch.arange(10, dtype=torch.int64)[::2]} for i in range(3)]  # c not contiguous
    write(tmp_path / "ds", samples)
    ds = tds.Dataset(tmp_path / "ds")
    assert [f["dtype"] for f in ds.schema] == ["bf16", "f8_e4m3fn", "i64"]
    for i, s in enumerate(samples):
        got = ds[i]
        assert got["a"].dtype == ml_dtypes.bfloat16
        assert torch.equal(torch.from_numpy(got["a"].view(np.int16).copy()).view(torch.bfloat16), s["a"])
        assert got["b"].dtype == ml_dtypes.float8_e4m3fn
        assert got["b"].view(np.uint8).tobytes() == s["b"].view(torch.uint8).numpy().tobytes()
        assert got["c"].tolist() == [0, 2, 4, 6, 8]


def test_arrays_are_readonly_views_that_outlive_the_dataset(tmp_path):
    write(tmp_path / "ds", [{"x": np.arange(1000, dtype=np.int32) + i} for i in range(4)])
    ds = tds.Dataset(tmp_path / "ds")
    a = ds[3]["x"]
    b = next(iter(ds))["x"]
    assert not a.flags.writeable and not b.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    assert type(a.base).__name__ == "ShardRef"
    del ds
    gc.collect()
    for f in (tmp_path / "ds").iterdir():
        f.unlink()
    assert a[999] == 1002 and b[5] == 5


def test_max_open_shards_bounds_the_shards_kept_mapped(tmp_path):
    """Indexing and iterating keep at most max_open_shards shards mapped (a
    few more while a sample's arrays are alive): before 2026-11-28 the
    Python sample converter held 64 and the iterator 16, whatever the
    option said, and a remote cache limit below that failed mid-epoch."""
    path = tmp_path / "ds"
    with tds.Writer(str(path), shard_samples=10) as w:
        for i in range(200):
            w.add({"x": np.full(4, i, np.int32)})

    def mapped():
        return len({line.split()[-1] for line in open("/proc/self/maps") if str(path) in line})

    ds = tds.Dataset(path, max_open_shards=2)
    assert [int(ds[i]["x"][0]) for i in range(0, 200, 7)] == list(range(0, 200, 7))
    gc.collect()
    assert mapped() <= 2, mapped()
    assert sum(int(s["x"][0]) for s in ds) == sum(range(200))
    gc.collect()
    assert mapped() <= 2, mapped()
    kept = ds[5]["x"]  # a live array keeps its shard, and only it, mapped
    del ds
    gc.collect()
    assert mapped() == 1 and int(kept[0]) == 5


def test_map_style_errors(tmp_path):
    write(tmp_path / "ds", [{"x": 1}, {"x": 2}])
    ds = tds.Dataset(tmp_path / "ds")
    with pytest.raises(IndexError, match="sample 2 is outside"):
        ds[2]
    with pytest.raises(ts.OutOfRangeError):
        ds[-3]
    with pytest.raises(TypeError):
        ds["x"]
    assert ds[np.int64(1)] == {"x": 2}
    with pytest.raises(ts.OutOfRangeError, match="sample id 7"):
        list(ds.iter([0, 7]))


def test_writer_schema_errors_keep_writer_usable(tmp_path):
    with tds.Writer(tmp_path / "ds", sync=False) as w:
        w.add({"x": np.zeros(3, np.float32), "y": "a"})
        with pytest.raises(ts.InvalidArgumentError, match='"x"'):
            w.add({"x": np.zeros(4, np.float32), "y": "b"})  # shape fixed by the first sample
        with pytest.raises(ts.InvalidArgumentError):
            w.add({"x": np.zeros(3, np.float32)})  # missing field
        with pytest.raises(ts.InvalidArgumentError, match="expected str"):
            w.add({"x": np.zeros(3, np.float32), "y": 5})
        with pytest.raises(ts.InvalidArgumentError, match="cannot store a object"):
            w.add({"x": np.zeros(3, np.float32), "y": "s", "z": object()})
        w.add({"x": np.ones(3, np.float32), "y": "c"})
    ds = tds.Dataset(tmp_path / "ds")
    assert [s["y"] for s in ds] == ["a", "c"]


def test_writer_declared_schema_coerces_and_rejects(tmp_path):
    with pytest.raises(ts.InvalidArgumentError, match="kind 'blob'"):
        tds.Writer(tmp_path / "bad", schema={"x": "blob"})
    with pytest.raises(ts.InvalidArgumentError, match="unknown dtype"):
        tds.Writer(tmp_path / "bad", schema={"x": ("nope", (1,))})
    with tds.Writer(tmp_path / "ds", schema={"j": "json", "f": "float", "t": (np.int16, (None, 2))},
                    sync=False) as w:
        w.add({"j": "text as json", "f": 3, "t": np.zeros((1, 2), np.int16)})
        w.add({"j": [1, 2], "f": 2.5, "t": np.ones((3, 2), np.int16)})
    ds = tds.Dataset(tmp_path / "ds")
    assert ds[0]["j"] == "text as json" and ds[0]["f"] == 3.0 and isinstance(ds[0]["f"], float)
    assert ds[1]["t"].shape == (3, 2)


def test_big_int_and_bool_go_to_json(tmp_path):
    write(tmp_path / "ds", [{"a": 1 << 70, "b": True, "c": None}])
    ds = tds.Dataset(tmp_path / "ds")
    assert [f["kind"] for f in ds.schema] == ["json"] * 3
    assert ds[0] == {"a": 1 << 70, "b": True, "c": None}


def test_writer_error_abandons(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with tds.Writer(tmp_path / "ds", shard_samples=2, sync=False) as w:
            for i in range(5):
                w.add({"x": i})
            raise RuntimeError("boom")
    left = list((tmp_path / "ds").rglob("*.tsafe")) if (tmp_path / "ds").exists() else []
    assert left == []
    assert not (tmp_path / "ds" / "index.json").exists()
    with pytest.raises(FileNotFoundError):
        tds.Dataset(tmp_path / "ds")


def test_existing_dataset_refused(tmp_path):
    write(tmp_path / "ds", [{"x": 1}])
    with pytest.raises(ts.FailedPreconditionError):
        tds.Writer(tmp_path / "ds")


def test_zstd_and_progress(tmp_path, rng):
    class Bar:
        n = 0
        closed = False

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True

    bar = Bar()
    samples = [{"x": np.full(100, i, np.int64)} for i in range(30)]
    write(tmp_path / "ds", samples, compression="zstd", shard_samples=7, progress=bar)
    assert bar.n == 30 and bar.closed
    ds = tds.Dataset(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert all(s["zstd"] is not None for s in ds.shards)
    assert [int(s["x"][0]) for s in ds] == list(range(30))
    with pytest.raises(ts.InvalidArgumentError):
        tds.Writer(tmp_path / "z", compression="gzip")


def test_progress_true_without_a_bar_prints(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_tqdm(name, *a, **k):
        if name.startswith("tqdm"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    write(tmp_path / "ds", [{"x": i} for i in range(3)], progress=True)
    assert "writing: 3 samples" in capsys.readouterr().err


def test_merge_parts(tmp_path):
    out = tmp_path / "all"
    for p in range(3):
        write(out / f"part{p}", [{"x": p * 10 + i} for i in range(p + 2)], shard_samples=2)
    r = tds.merge(out, [f"part{p}" for p in range(3)])
    assert r["samples"] == 2 + 3 + 4
    ds = tds.Dataset(out)
    assert [s["x"] for s in ds] == [0, 1, 10, 11, 12, 20, 21, 22, 23]
    assert tds.verify(out) == []
    write(out / "other", [{"y": "s"}])
    with pytest.raises(ts.FailedPreconditionError, match="other"):
        tds.merge(out, ["part0", "other"], overwrite=True)


def test_corrupted_shard_is_a_clear_error(tmp_path):
    write(tmp_path / "ds", [{"x": np.arange(64, dtype=np.uint8) + i} for i in range(8)], shard_samples=4)
    shard = tmp_path / "ds" / json.loads((tmp_path / "ds" / "index.json").read_text())["shards"][1]["name"]
    data = bytearray(shard.read_bytes())
    # A flipped data byte: layout intact, so only the hashes can tell.
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(ts.CorruptionError, match=shard.name):
        tds.verify(tmp_path / "ds")
    problems = tds.verify(tmp_path / "ds", all_problems=True)
    assert problems and all(isinstance(p, ts.CorruptionError) for p in problems)
    with pytest.raises(ts.CorruptionError, match=shard.name):
        tds.Dataset(tmp_path / "ds", verify_on_open=True)[5]
    # Truncated: caught when the shard is opened, on iteration too.
    shard.write_bytes(bytes(data[:100]))
    ds = tds.Dataset(tmp_path / "ds")
    assert ds[0]["x"][0] == 0
    with pytest.raises(ts.CorruptionError, match=shard.name):
        ds[4]
    it = iter(ds)
    with pytest.raises(ts.CorruptionError, match=shard.name):
        for _ in it:
            pass


def test_damaged_index(tmp_path):
    write(tmp_path / "ds", [{"x": 1}])
    (tmp_path / "ds" / "index.json").write_text("{not json")
    with pytest.raises(ts.CorruptionError, match="index.json"):
        tds.Dataset(tmp_path / "ds")


def test_iterators_on_threads(tmp_path):
    import threading

    write(tmp_path / "ds", [{"x": np.full(8, i, np.int64), "s": str(i)} for i in range(3000)], shard_samples=100)
    ds = tds.Dataset(tmp_path / "ds")
    results, errors = {}, []

    def run(k):
        try:
            order = np.random.default_rng(k).permutation(len(ds))
            results[k] = [(int(s["x"][3]), s["s"]) for s in ds.iter(order)] == [(int(i), str(i)) for i in order]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == {k: True for k in range(4)}
    # One iterator shared by threads: never a crash; a thread that finds it
    # refilling gets ValueError, as with a generator.
    it = iter(ds)
    seen, refused = [], []

    def share():
        while True:
            try:
                s = next(it)
            except StopIteration:
                return
            except ValueError:
                refused.append(1)
                continue
            seen.append(int(s["x"][0]))

    threads = [threading.Thread(target=share) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(3000))
