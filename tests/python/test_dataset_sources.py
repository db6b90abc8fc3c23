"""tensorsafe.dataset.Dataset and StreamingDataset over every location kind
(docs/DATASET.md "Locations"): an MDS dataset written by mosaicml-streaming's
MDSWriter read sample for sample as streaming reads it, WebDataset shards
written by webdataset's ShardWriter, and a native dataset served by a real
nginx on 127.0.0.1, iterated shuffled."""

import numpy as np
import pytest

from tensorsafe.dataset import Dataset, StreamingDataset, Writer


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b)) and np.asarray(a).dtype == np.asarray(b).dtype
    return a == b


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_mds_written_by_streaming_reads_like_streaming(tmp_path, rng, compression):
    streaming = pytest.importorskip("streaming")
    out = tmp_path / "mds"
    cols = {"x": "ndarray:float32:3,2", "dyn": "ndarray:int16", "label": "int", "text": "str", "blob": "bytes"}
    with streaming.MDSWriter(out=str(out), columns=cols, compression=compression, size_limit=1 << 10) as w:
        for k in range(60):
            w.write({"x": rng.standard_normal((3, 2)).astype(np.float32),
                     "dyn": np.arange(k % 5 + 1, dtype=np.int16) - k,
                     "label": int(k * 1000 - 7), "text": f"t{k} é", "blob": bytes([k % 256]) * (k % 9)})
    ref = streaming.StreamingDataset(local=str(out), shuffle=False, batch_size=1)
    ds = Dataset(out, cache_dir=tmp_path / "cache")
    assert len(ds) == len(ref) == 60
    for i in range(60):
        want, got = ref[i], ds[i]
        assert set(got) == set(want), i
        for name in want:
            assert _same(got[name], want[name]), (i, name, got[name], want[name])


def test_webdataset_written_by_shardwriter(tmp_path, rng):
    wds = pytest.importorskip("webdataset")
    xs = [rng.standard_normal((2, k + 1)).astype(np.float32) for k in range(9)]
    with wds.ShardWriter(str(tmp_path / "ds-%06d.tar"), maxcount=4, verbose=0) as w:
        for k, x in enumerate(xs):
            w.write({"__key__": f"s{k:05d}", "x.npy": x, "cls": k, "txt": f"text {k}"})
    for location in (str(tmp_path / "ds-{000000..000002}.tar"), tmp_path):
        ds = Dataset(location)
        assert len(ds) == 9
        for k in range(9):
            s = ds[k]
            assert s["__key__"] == f"s{k:05d}"
            assert _same(s["x.npy"], xs[k])
            assert s["cls"] == k
            assert s["txt"] == f"text {k}"


def test_native_dataset_over_http_streams_shuffled(tmp_path, rng, nginx):
    www, base = nginx
    with Writer(www / "ds", shard_samples=8, sync=False) as w:
        for k in range(50):
            w.add({"id": k, "v": rng.standard_normal(3).astype(np.float64)})
    local = Dataset(www / "ds")
    url = base + "/ds/"
    remote = Dataset(url, cache_dir=tmp_path / "cache")
    assert len(remote) == 50
    for k in range(50):
        assert _same(remote[k]["v"], local[k]["v"]) and remote[k]["id"] == k
    seen = [s["id"] for s in StreamingDataset(url, shuffle=True, seed=7, cache_dir=tmp_path / "cache2")]
    assert sorted(seen) == list(range(50))
    assert seen != list(range(50))  # shuffled
