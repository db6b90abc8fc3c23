"""Tensor files and sharded checkpoints written to s3:// URLs (docs/REMOTE.md,
"Writing tensor files to S3"), against moto_server: each object holds the
bytes the same call writes to a local file, appears whole or not at all,
and leaves nothing behind locally; what cannot be written says so."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from tensorsafe import _native

torch = pytest.importorskip("torch")
pytest.importorskip("boto3")
import tensorsafe.torch as tst  # noqa: E402

from moto_s3 import BUCKET, MOTO, moto, s3  # noqa: E402,F401

pytestmark = pytest.mark.skipif(MOTO is None, reason="moto_server (moto[server]) is not installed")


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """$TMPDIR, where files bound for URLs wait: checked empty afterwards."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    return d


def arrays():
    rng = np.random.default_rng(7)
    return {"emb": rng.standard_normal((64, 48)).astype(np.float32),
            "ids": rng.integers(-1000, 1000, size=(37,), dtype=np.int64),
            "half": rng.standard_normal((5, 3, 2)).astype(np.float16)}


def obj(s3, url):
    return s3.get_object(Bucket=BUCKET, Key=url.split(f"s3://{BUCKET}/", 1)[1])["Body"].read()


def keys(s3, prefix):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


@pytest.mark.parametrize("fmt", ["tsafe", "safetensors", "gguf", "npz"])
def test_write_stores_the_bytes_of_a_local_write(s3, tmp_path, tmpdir_env, fmt):
    want = arrays()
    url = f"s3://{BUCKET}/write/{fmt}/m.{fmt}"
    ts.write(url, want)
    ts.write(str(tmp_path / f"m.{fmt}"), want)
    assert obj(s3, url) == (tmp_path / f"m.{fmt}").read_bytes()
    got = ts.read(url)[0]
    assert all(np.array_equal(got[k], v) for k, v in want.items())
    assert os.listdir(tmpdir_env) == []


def test_save_file_and_writer_store_their_files(s3, tmp_path, tmpdir_env):
    sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(4, dtype=torch.bfloat16)}
    tst.save_file(sd, f"s3://{BUCKET}/save/pt.safetensors", metadata={"format": "pt"})
    tst.save_file(sd, str(tmp_path / "pt.safetensors"), metadata={"format": "pt"})
    assert obj(s3, f"s3://{BUCKET}/save/pt.safetensors") == (tmp_path / "pt.safetensors").read_bytes()
    tsn.save_file(arrays(), f"s3://{BUCKET}/save/np.safetensors")
    assert set(tsn.load_file(f"s3://{BUCKET}/save/np.safetensors")) == set(arrays())
    with ts.Writer(f"s3://{BUCKET}/save/w.tsafe") as w:
        w.add("x", np.arange(10, dtype=np.int32))
        assert keys(s3, "save/w") == []  # stored only when finished
    assert np.array_equal(ts.read(f"s3://{BUCKET}/save/w.tsafe")[0]["x"], np.arange(10, dtype=np.int32))
    with pytest.raises(RuntimeError):
        with ts.Writer(f"s3://{BUCKET}/save/never.tsafe") as w:
            w.add("x", np.arange(10, dtype=np.int32))
            raise RuntimeError("abandoned")
    assert keys(s3, "save/never") == []
    assert os.listdir(tmpdir_env) == []


def test_save_sharded_to_a_prefix_as_to_a_directory(s3, tmp_path, tmpdir_env):
    sd = {f"layers.{i}.weight": torch.full((256, 64), float(i)) for i in range(6)}
    url = f"s3://{BUCKET}/sharded/model/"
    stats = tst.save_sharded(sd, url, max_shard_size="150KB")
    local = tst.save_sharded(sd, str(tmp_path / "model"), max_shard_size="150KB")
    assert stats["files"] == local["files"] and len(stats["files"]) == 3
    names = sorted(os.listdir(tmp_path / "model"))
    assert keys(s3, "sharded/model/") == [f"sharded/model/{n}" for n in names]
    for n in names:
        assert obj(s3, url + n) == (tmp_path / "model" / n).read_bytes(), n
    with ts.safe_open(url, framework="pt") as f:
        assert all(torch.equal(f.get_tensor(k), v) for k, v in sd.items())
    # Saved again in 2 shards: the third shard and the old index go.
    tst.save_sharded(sd, url, max_shard_size="250KB")
    assert keys(s3, "sharded/model/") == ["sharded/model/model-00001-of-00002.safetensors",
                                          "sharded/model/model-00002-of-00002.safetensors",
                                          "sharded/model/model.safetensors.index.json"]
    assert set(ts.load(url)) == set(sd)
    assert os.listdir(tmpdir_env) == []


def test_convert_into_urls(s3, tmp_path, tmpdir_env):
    want = {f"w{i}": np.full((512, 256), i, np.float32) for i in range(4)}
    tsn.save_sharded(want, str(tmp_path / "ck"), max_shard_size=1_100_000)
    r = ts.convert(str(tmp_path / "ck"), f"s3://{BUCKET}/conv/one.tsafe")
    ts.convert(str(tmp_path / "ck"), tmp_path / "one.tsafe")
    assert obj(s3, f"s3://{BUCKET}/conv/one.tsafe") == (tmp_path / "one.tsafe").read_bytes()
    assert r["file_size"] == (tmp_path / "one.tsafe").stat().st_size
    # URL to URL, into a sharded checkpoint; then --dtype, whose casts wait in $TMPDIR.
    ts.convert(f"s3://{BUCKET}/conv/one.tsafe", f"s3://{BUCKET}/conv/ck/model.safetensors.index.json",
               max_shard_size=1_100_000)
    assert keys(s3, "conv/ck/") == [f"conv/ck/model-0000{i}-of-00002.safetensors" for i in (1, 2)] + [
        "conv/ck/model.safetensors.index.json"]
    for n in os.listdir(tmp_path / "ck"):
        assert obj(s3, f"s3://{BUCKET}/conv/ck/{n}") == (tmp_path / "ck" / n).read_bytes(), n
    ts.convert(f"s3://{BUCKET}/conv/one.tsafe", f"s3://{BUCKET}/conv/half.safetensors", dtype="f16")
    got = tsn.load_file(f"s3://{BUCKET}/conv/half.safetensors")
    assert all(got[k].dtype == np.float16 and np.array_equal(got[k], v) for k, v in want.items())
    assert os.listdir(tmpdir_env) == []


def test_a_large_file_is_stored_as_a_multipart_upload(s3, moto, tmp_path, tmpdir_env):
    big = {"w": np.arange(20 << 20, dtype=np.float32)}  # 80 MiB: parts of 16 MiB
    url = f"s3://{BUCKET}/big/w.safetensors"
    tsn.save_file(big, url)
    tsn.save_file(big, str(tmp_path / "w.safetensors"))
    assert obj(s3, url) == (tmp_path / "w.safetensors").read_bytes()
    assert moto.requests("big/w.safetensors?uploads") >= 1
    assert os.listdir(tmpdir_env) == []


def test_what_cannot_be_written_says_so(s3, tmp_path, tmpdir_env):
    a = {"x": np.ones(3, np.float32)}
    with pytest.raises(ts.UnsupportedError, match=r"http://127\.0\.0\.1:9/m\.safetensors: .*http\(s\) server takes no"):
        tsn.save_file(a, "http://127.0.0.1:9/m.safetensors")
    with pytest.raises(ts.Error, match="s3://no-such-bucket/m.safetensors") as e:
        tsn.save_file(a, "s3://no-such-bucket/m.safetensors")
    assert not isinstance(e.value, ts.UnsupportedError)
    ts.write(f"s3://{BUCKET}/cannot/m.tsafe", a)
    with pytest.raises(ts.UnsupportedError, match="replaced whole, not updated in place"):
        ts.Updater(f"s3://{BUCKET}/cannot/m.tsafe")
    exe = shutil.which("tensorsafe", path=os.path.dirname(sys.executable))
    r = subprocess.run([exe, "meta", f"s3://{BUCKET}/cannot/m.tsafe", "--set", 'k="v"'], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "replaced whole, not updated in place" in r.stderr, r.stdout + r.stderr
    assert os.listdir(tmpdir_env) == []
    assert _native.remote_requests() > 0


def test_fsspec_urls_are_written_through_the_handler(tmp_path, tmpdir_env):
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    ts.write("memory://w/m.tsafe", arrays())
    ts.write(str(tmp_path / "m.tsafe"), arrays())
    assert mem.cat("/w/m.tsafe") == (tmp_path / "m.tsafe").read_bytes()
    assert set(ts.read("memory://w/m.tsafe")[0]) == set(arrays())
    sd = {f"w{i}": torch.full((1000,), float(i)) for i in range(4)}
    tst.save_sharded(sd, "memory://w/ck/", max_shard_size=8000)
    assert sorted(mem.ls("/w/ck", detail=False)) == ["/w/ck/model-00001-of-00002.safetensors",
                                                    "/w/ck/model-00002-of-00002.safetensors",
                                                    "/w/ck/model.safetensors.index.json"]
    tst.save_sharded(sd, "memory://w/ck/", max_shard_size=16000)  # one file now: the shards and index go
    assert mem.ls("/w/ck", detail=False) == ["/w/ck/model.safetensors"]
    assert all(torch.equal(v, sd[k]) for k, v in ts.load("memory://w/ck/").items())
    assert os.listdir(tmpdir_env) == []


def test_a_long_key_is_written(s3, tmpdir_env):
    url = f"s3://{BUCKET}/long/" + "k" * 400 + ".safetensors"  # past a file name's 255 bytes
    tsn.save_file(arrays(), url)
    assert set(tsn.load_file(url)) == set(arrays())
    assert os.listdir(tmpdir_env) == []
