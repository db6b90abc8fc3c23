"""tensorsafe.dcp with the checkpoint at a URL: a real 2-rank gloo job
saving to and loading from moto_server's S3, then loads on 1 and 3 ranks,
re-saves, damaged and missing objects, the dcp tool, and an fsspec URL
through the handler."""

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from moto_s3 import BUCKET, moto, s3  # noqa: E402,F401  (fixtures)
from test_dcp import ASYNC_PROCESS_SCRIPT, FAILED, free_port, job, small_state  # noqa: E402

import dcp_jobs  # noqa: E402
import tensorsafe  # noqa: E402
from tensorsafe.dcp import METADATA_NAME, StorageReader, StorageWriter, load_metadata  # noqa: E402
from tensorsafe.errors import NotFoundError  # noqa: E402


def keys(s3, prefix):
    out = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix):] for o in out)


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """$TMPDIR of this process and of the jobs it starts, checked after for
    staged files left behind (torch keeps its own caches there)."""
    d = tmp_path / "staging"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    yield d
    assert [n for n in os.listdir(d) if n.startswith("tensorsafe")] == []


def test_two_ranks_save_to_s3_and_load_on_1_and_3(s3, tmpdir_env):
    url = f"s3://{BUCKET}/dcp/two"
    job("save", 2, url)  # saves, then loads back on the same 2 ranks
    files = keys(s3, "dcp/two/")
    ranks = [f for f in files if f.endswith(".tsafe")]
    assert files == sorted([METADATA_NAME] + ranks) and len(ranks) == 2
    assert [f[:3] for f in ranks] == ["__0", "__1"]
    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=f"dcp/two/{METADATA_NAME}")["Body"].read())
    assert doc["format"] == "tensorsafe-dcp" and set(doc["files"]) == set(ranks)
    for f in ranks:  # sizes recorded as stored; every rank file verifies where it lies
        assert doc["files"][f]["size"] == s3.head_object(Bucket=BUCKET, Key=f"dcp/two/{f}")["ContentLength"]
        tensorsafe.verify(f"{url}/{f}")
    sd = dcp_jobs.state(None, fill=False)
    dcp.load(sd, storage_reader=StorageReader(url))
    dcp_jobs.check(sd)
    job("load", 3, url)
    assert load_metadata(url).state_dict_metadata["big"].size == torch.Size([301, 64])


def test_resave_replaces_the_checkpoint_and_removes_old_objects(s3, moto, tmpdir_env):
    url = f"s3://{BUCKET}/dcp/resave/"  # a trailing slash names the same prefix
    dcp.save(small_state(1.0), storage_writer=StorageWriter(url))
    # The metadata's file sizes come from the ranks that wrote the files: the
    # coordinator asks the store for none.
    assert moto.requests("dcp/resave/__", "HEAD") == 0
    first = keys(s3, "dcp/resave/")
    dcp.save(small_state(2.0), storage_writer=StorageWriter(url))
    second = keys(s3, "dcp/resave/")
    assert len(first) == len(second) == 2 and first != second and METADATA_NAME in second
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(url))
    assert torch.all(sd["a"] == 2.0) and torch.all(sd["c"]["x"] == 2.0)
    # Another checkpoint beside it, whose name this one's prefix is the start of, is left alone.
    other = f"s3://{BUCKET}/dcp/resave2"
    dcp.save(small_state(3.0), storage_writer=StorageWriter(other))
    dcp.save(small_state(4.0), storage_writer=StorageWriter(url))
    assert len(keys(s3, "dcp/resave2/")) == 2


def test_a_damaged_object_is_named_and_a_missing_commit_is_no_checkpoint(s3, tmpdir_env):
    url = f"s3://{BUCKET}/dcp/bad"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(url, block_bytes=1024))
    rank = next(k for k in keys(s3, "dcp/bad/") if k.endswith(".tsafe"))
    body = bytearray(s3.get_object(Bucket=BUCKET, Key=f"dcp/bad/{rank}")["Body"].read())
    body[200] ^= 0x01  # in the first tensor's data ("a", 40 x 16 f32 from offset 128)
    s3.put_object(Bucket=BUCKET, Key=f"dcp/bad/{rank}", Body=bytes(body))
    with pytest.raises(FAILED, match=rf"checkpoint file {url}/{rank}: tensor 'a#0' .*checksum"):
        dcp.load(small_state(0.0), storage_reader=StorageReader(url))
    s3.delete_object(Bucket=BUCKET, Key=f"dcp/bad/{METADATA_NAME}")
    with pytest.raises(NotFoundError, match=rf"{url}: not a tensorsafe checkpoint: {METADATA_NAME} is missing; "
                                            "the prefix holds rank files but no committed metadata"):
        load_metadata(url)
    with pytest.raises(NotFoundError, match="the prefix holds no checkpoint"):
        load_metadata(f"s3://{BUCKET}/dcp/nothing")


def test_async_save_to_s3_in_dcps_background_process(s3, tmpdir_env):
    """DCP's process-based async save uploads from its background process
    (which inherits the credentials and $TMPDIR); the load reads it back."""
    import subprocess

    url = f"s3://{BUCKET}/dcp/async"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    r = subprocess.run([sys.executable, "-c", ASYNC_PROCESS_SCRIPT, url], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["equal"]
    assert METADATA_NAME in keys(s3, "dcp/async/")


def test_incremental_save_copies_unchanged_rank_files_on_the_server(s3, moto, tmpdir_env, tmp_path):
    first, second = f"s3://{BUCKET}/dcp/inc1", f"s3://{BUCKET}/dcp/inc2"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(first))
    old = next(k for k in keys(s3, "dcp/inc1/") if k.endswith(".tsafe"))
    gets = moto.requests(f"dcp/inc1/{old}", "GET")
    assert gets > 0  # the save read its file's index back: the count sees such reads
    dcp.save(small_state(2.0), storage_writer=StorageWriter(second, incremental_from=first))  # "b" is unchanged
    # The old rank file was copied on the server: this process read none of it.
    assert moto.requests(f"dcp/inc1/{old}", "GET") == gets
    assert old in keys(s3, "dcp/inc2/") and len(keys(s3, "dcp/inc2/")) == 3
    doc = json.loads(s3.get_object(Bucket=BUCKET, Key=f"dcp/inc2/{METADATA_NAME}")["Body"].read())
    assert {s["file"] for s in doc["storage"] if s["fqn"] == "b"} == {old}
    for obj in keys(s3, "dcp/inc1/"):  # the first checkpoint gone: the second still loads
        s3.delete_object(Bucket=BUCKET, Key=f"dcp/inc1/{obj}")
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(second))
    want = small_state(2.0)
    assert all(torch.equal(sd[k], want[k]) for k in ("a", "b")) and torch.equal(sd["c"]["x"], want["c"]["x"])
    # From a URL into a directory: the file is copied through a local file.
    local = tmp_path / "inc3"
    dcp.save(small_state(3.0), storage_writer=StorageWriter(local, incremental_from=second))
    assert old in os.listdir(local)
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(local))
    assert torch.equal(sd["b"], want["b"]) and torch.all(sd["a"] == 3.0)


def test_dcp_tool_reads_a_checkpoint_at_a_url(s3, tmpdir_env, tmp_path):
    import subprocess

    url = f"s3://{BUCKET}/dcp/tool"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(url))
    for cmd, want in (("info", f"{url}: tensorsafe-dcp schema 1"), ("verify", "ok")):
        r = subprocess.run([sys.executable, "-m", "tensorsafe.dcp", cmd, url], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr
    out = tmp_path / "model.safetensors"
    r = subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "consolidate", url, str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    from tensorsafe.torch import load_file

    assert torch.equal(load_file(out)["a"], small_state(1.0)["a"])


def test_an_fsspec_url_through_the_handler(tmpdir_env):
    fsspec = pytest.importorskip("fsspec")
    url = "memory://dcp/ckpt"
    dcp.save(small_state(5.0), storage_writer=StorageWriter(url))
    assert sorted(fsspec.filesystem("memory").ls("/dcp/ckpt", detail=False))[-1].endswith(METADATA_NAME)
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(url))
    assert torch.all(sd["a"] == 5.0)


def test_a_failed_upload_leaves_the_previous_checkpoint(s3, tmpdir_env, monkeypatch):
    """The metadata upload fails: the save raises, the earlier checkpoint
    still loads, and nothing is left in $TMPDIR."""
    from tensorsafe.dcp import _writer

    url = f"s3://{BUCKET}/dcp/fail"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(url))
    before = keys(s3, "dcp/fail/")
    real = _writer._native.publish_bytes

    def failing(path, data, sync=True):
        return real(f"http://127.0.0.1:1/{METADATA_NAME}", data, sync)  # http takes no uploads

    monkeypatch.setattr(_writer._native, "publish_bytes", failing)
    with pytest.raises(FAILED, match="takes no uploads"):
        dcp.save(small_state(2.0), storage_writer=StorageWriter(url))
    monkeypatch.setattr(_writer._native, "publish_bytes", real)
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(url))
    assert torch.all(sd["a"] == 1.0)
    # The new rank file was stored before the failed commit; the next save's collection removes it.
    assert set(before) < set(keys(s3, "dcp/fail/"))
    dcp.save(small_state(3.0), storage_writer=StorageWriter(url))
    assert len(keys(s3, "dcp/fail/")) == 2
