"""MosaicML MDS and WebDataset datasets over S3 and http (docs/REMOTE.md,
"Datasets"): written by the peers' own writers (streaming.MDSWriter,
webdataset.ShardWriter), uploaded to a real S3 server (moto_server) or served
by a real nginx, and read back equal to the local copy, by 2 ranks x 2
DataLoader workers exactly once per epoch, by the CLI, and with the errors a
damaged or missing object gives."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorsafe as ts
from tensorsafe import dataset as tds

from moto_s3 import BUCKET, MOTO, check_two_ranks_two_workers, moto, s3, upload, upload_dir  # noqa: F401

pytestmark = pytest.mark.skipif(MOTO is None, reason="moto_server (moto[server]) is not installed")


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def assert_equal_datasets(got, want):
    assert len(got) == len(want)
    for i in range(len(want)):
        g, w = got[i], want[i]
        assert set(g) == set(w), i
        for k in w:
            assert same(g[k], w[k]), (i, k, g[k], w[k])


def write_mds(out, n=300, compression=None, hashes=None, size_limit=2 << 10):
    streaming = pytest.importorskip("streaming")
    cols = {"x": "ndarray:int32:4", "dyn": "ndarray:int16", "label": "int", "text": "str"}
    with streaming.MDSWriter(out=str(out), columns=cols, compression=compression, hashes=hashes,
                             size_limit=size_limit) as w:
        for i in range(n):
            w.write({"x": np.full(4, 3 * i, np.int32), "dyn": np.arange(i % 5 + 1, dtype=np.int16) - i,
                     "label": i, "text": f"t{i}"})
    return out


def write_wds(out, n=300, per_shard=64):
    wds = pytest.importorskip("webdataset")
    out.mkdir()
    with wds.ShardWriter(str(out / "shard-%04d.tar"), maxcount=per_shard, verbose=0) as w:
        for i in range(n):
            w.write({"__key__": f"s{i:06d}", "x.npy": np.full(4, 3 * i, np.int32), "cls": i})
    return out


@pytest.mark.parametrize("compression,hashes", [(None, None), ("zstd", ["xxh3_64"]), ("zstd", None),
                                                ("gz", ["sha1", "xxh64"])])
def test_mds_over_s3_reads_like_the_local_copy(s3, tmp_path, compression, hashes):
    local = write_mds(tmp_path / "mds", compression=compression, hashes=hashes)
    url = upload_dir(s3, local, f"mds/{compression}-{'-'.join(hashes or [])}")
    cache = tmp_path / "cache"
    remote = tds.Dataset(url, cache_dir=cache)
    assert len(remote.shards) > 4
    assert_equal_datasets(remote, tds.Dataset(local, cache_dir=tmp_path / "local-cache"))
    # A second open finds every shard in the cache.
    assert_equal_datasets(tds.Dataset(url, cache_dir=cache), remote)
    assert tds.verify(url, cache_dir=cache) == []


def test_webdataset_over_s3_by_listing_and_by_brace_pattern(s3, tmp_path):
    local = write_wds(tmp_path / "wds")
    want = tds.Dataset(local)
    prefix = upload_dir(s3, local, "wds/list")
    shards = sorted(os.listdir(local))
    assert len(shards) == 5
    for url in (prefix, prefix + "/", prefix + "/shard-{0000..0004}.tar"):
        got = tds.Dataset(url, cache_dir=tmp_path / "cache")
        assert_equal_datasets(got, want)
        assert [s["name"] for s in got.shards] == [f"s3://{BUCKET}/wds/list/{n}" for n in shards]
    one = tds.Dataset(prefix + "/shard-0003.tar", cache_dir=tmp_path / "cache")
    assert len(one) == 64 and one[0]["cls"] == 192


def test_mds_and_webdataset_over_http(tmp_path, nginx):
    www, base = nginx
    write_mds(www / "mds", compression="zstd")
    write_wds(www / "wds")
    cache = tmp_path / "cache"
    assert_equal_datasets(tds.Dataset(base + "/mds", cache_dir=cache),
                          tds.Dataset(www / "mds", cache_dir=tmp_path / "local-cache"))
    assert_equal_datasets(tds.Dataset(base + "/wds/shard-{0000..0004}.tar", cache_dir=cache),
                          tds.Dataset(www / "wds"))
    # An http server has no listing: the error says how to name the shards.
    with pytest.raises(ts.NotFoundError, match=r"wds/index\.json.*brace pattern"):
        tds.Dataset(base + "/wds", cache_dir=cache)
    with pytest.raises(ts.NotFoundError, match=r"HEAD http://127\.0\.0\.1:\d+/data/wds/shard-0005\.tar: HTTP 404"):
        tds.Dataset(base + "/wds/shard-{0000..0009}.tar", cache_dir=cache)


@pytest.mark.parametrize("kind", ["mds", "wds"])
def test_two_ranks_two_workers_exactly_once(s3, tmp_path, kind):
    pytest.importorskip("torch")
    if kind == "mds":
        url, label, x = upload_dir(s3, write_mds(tmp_path / "ds", compression="zstd"), "ranks/mds"), "label", "x"
    else:
        url, label, x = upload_dir(s3, write_wds(tmp_path / "ds"), "ranks/wds"), "cls", "x.npy"
    # Lists of samples: the MDS "dyn" field has a shape per sample.
    check_two_ranks_two_workers(url, tmp_path / "cache", label, x, 300, collate="list")


def cli(*args):
    exe = os.path.join(os.path.dirname(sys.executable), "tensorsafe")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_dataset_cli_on_mds_and_webdataset_urls(s3, tmp_path):
    mds = upload_dir(s3, write_mds(tmp_path / "mds"), "cli/mds")
    wds = upload_dir(s3, write_wds(tmp_path / "wds"), "cli/wds")
    cache = tmp_path / "cache"
    for url, key in ((mds, "label"), (wds, "cls")):
        r = cli("dataset", "info", url, "--cache-dir", cache)
        assert r.returncode == 0 and "samples: 300" in r.stdout.replace("  ", " "), r.stdout + r.stderr
        r = cli("dataset", "verify", url, "--cache-dir", cache)
        assert r.returncode == 0 and "300 samples in" in r.stdout, r.stdout + r.stderr
        r = cli("dataset", "cat", url, "17", "--cache-dir", cache)
        assert r.returncode == 0 and json.loads(r.stdout)[key] == 17, r.stdout + r.stderr


def test_a_changed_mds_shard_is_caught_and_not_cached(s3, tmp_path):
    """With an xxh3_64 in the index a same-size change is caught by hash;
    without hashes, a change of size is. Either way the URL is named and the
    cache keeps nothing."""
    local = write_mds(tmp_path / "mds", hashes=["xxh3_64"])
    url = upload_dir(s3, local, "bad/hashed")
    data = bytearray((local / "shard.00001.mds").read_bytes())
    data[-1] ^= 0x40
    (tmp_path / "flipped").write_bytes(bytes(data))
    upload(s3, tmp_path / "flipped", "bad/hashed/shard.00001.mds")
    cache = tmp_path / "cache"
    # Every shard is opened at open here: the "dyn" column's dtype and rank
    # are read from each shard.
    with pytest.raises(ts.CorruptionError, match=r"GET s3://tensors/bad/hashed/shard\.00001\.mds: XXH3-64.*not cached"):
        tds.Dataset(url, cache_dir=cache)
    assert not any("shard.00001" in f for f in os.listdir(cache / "files"))
    assert not os.listdir(cache / "tmp")

    local = write_mds(tmp_path / "mds2")
    url = upload_dir(s3, local, "bad/plain")
    (tmp_path / "short").write_bytes((local / "shard.00002.mds").read_bytes()[:-3])
    upload(s3, tmp_path / "short", "bad/plain/shard.00002.mds")
    with pytest.raises(ts.CorruptionError, match=r"s3://tensors/bad/plain/shard\.00002\.mds.*the index says"):
        tds.Dataset(url, cache_dir=tmp_path / "cache2")
    cached = [f.split("-")[-1] for f in os.listdir(tmp_path / "cache2" / "files")]
    assert "shard.00000.mds" in cached and "shard.00002.mds" not in cached, cached


def test_no_dataset_at_the_prefix(s3, tmp_path):
    upload(s3, __file__, "empty/notes.py")
    with pytest.raises(ts.NotFoundError, match=r"s3://tensors/empty/index\.json.*no \.tar shards"):
        tds.Dataset(f"s3://{BUCKET}/empty", cache_dir=tmp_path / "cache")


# -- writing to S3 -----------------------------------------------------------------


def test_writer_to_s3_uploads_shards_then_the_index(s3, moto, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    url = f"s3://{BUCKET}/written/ds"
    with tds.Writer(url, shard_samples=100, compression="zstd", metadata={"source": "test"}) as w:
        for i in range(1000):
            w.add({"x": np.full(4, 3 * i, np.int32), "label": i})
        assert os.listdir(tmp_path / "tmp")  # the staging directory
    assert os.listdir(tmp_path / "tmp") == []  # removed: shards went one at a time
    ds = tds.Dataset(url, cache_dir=tmp_path / "cache")
    assert len(ds) == 1000 and len(ds.shards) == 10 and ds.metadata == {"source": "test"}
    assert all(int(s["x"][0]) == 3 * int(s["label"]) for s in ds)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="written/ds/")["Contents"]]
    assert sorted(keys) == ["written/ds/index.json"] + [f"written/ds/shard-{k:05d}.tsafe.zst" for k in range(10)]
    # The index was the last object stored: the commit.
    puts = [line for line in open(moto.log_path) if '"PUT /tensors/written/ds/' in line]
    assert len(puts) == 11 and "index.json" in puts[-1], puts
    # A prefix that holds a dataset is not written over.
    with pytest.raises(ts.FailedPreconditionError, match=r"s3://tensors/written/ds/index\.json exists"):
        tds.Writer(url)


def test_an_abandoned_s3_writer_deletes_its_shards(s3, tmp_path):
    url = f"s3://{BUCKET}/abandoned/ds"
    with pytest.raises(RuntimeError, match="stop"):
        with tds.Writer(url, shard_samples=10) as w:
            for i in range(55):
                w.add({"label": i})
            raise RuntimeError("stop")
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="abandoned/")
    with pytest.raises(ts.UnsupportedError, match="http"):
        tds.Writer("http://127.0.0.1:9/ds")


def test_dataset_create_to_s3_from_an_mds_dataset_on_s3(s3, tmp_path):
    src = upload_dir(s3, write_mds(tmp_path / "mds"), "copy/mds")
    dst = f"s3://{BUCKET}/copy/native"
    r = cli("dataset", "create", dst, src, "--cache-dir", tmp_path / "cache", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_equal_datasets(tds.Dataset(dst, cache_dir=tmp_path / "cache"),
                          tds.Dataset(src, cache_dir=tmp_path / "cache"))
