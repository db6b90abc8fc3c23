"""tensorsafe.dcp as torch.distributed.checkpoint's storage: real gloo jobs
on 127.0.0.1 (tests/python/dcp_jobs.py), resharding 4 -> 1, 2, 3, 4, FSDP2
training resumed on another world size, flipped bytes, files free of pickle,
SIGKILLed saves, StreamingDataset state in the same dcp.save/dcp.load."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import SEED

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

import tensorsafe  # noqa: E402
from tensorsafe.dcp import METADATA_NAME, StorageReader, StorageWriter, load_metadata  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dcp_jobs  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

# DCP raises CheckpointException (a BaseException) carrying each rank's error.
FAILED = (CheckpointException, Exception)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(name, world, path, *args, timeout=240, check=True):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "dcp_jobs.py"), name, str(world), str(path),
                        str(free_port()), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return r


def result(r):
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def rank_files(path):
    return sorted(n for n in os.listdir(path) if n.endswith(".tsafe"))


# -- save on 4 ranks, load on 1, 2, 3, 4 ---------------------------------------


@pytest.fixture(scope="module")
def saved4(tmp_path_factory):
    path = tmp_path_factory.mktemp("dcp") / "ckpt4"
    job("save", 4, path)  # also loads back on the same 4 ranks
    return path


def test_save_on_4_layout(saved4):
    files = rank_files(saved4)
    assert len(files) == 4 and all(f.startswith(f"__{r}_") for r, f in enumerate(files))
    md = load_metadata(saved4)
    doc = json.loads((saved4 / METADATA_NAME).read_bytes())
    assert doc["format"] == "tensorsafe-dcp" and doc["version"] == 1 and set(doc["files"]) == set(files)
    # 301 rows of 64 f32 in 4 shards of <= 76 rows, in blocks of 4096 bytes = 16 rows.
    big = [s for s in doc["storage"] if s["fqn"] == "big"]
    assert len(big) == 4 and all(s["rows"] == 16 and len(s["tensors"]) == -(-76 // 16) for s in big[:3])
    assert md.state_dict_metadata["big"].size == torch.Size([301, 64])
    for f in files:
        tensorsafe.verify(saved4 / f)


def test_load_on_1_rank_in_process(saved4):
    sd = dcp_jobs.state(None, fill=False)
    dcp.load(sd, storage_reader=StorageReader(saved4))
    dcp_jobs.check(sd)


@pytest.mark.parametrize("world", [2, 3])
def test_load_on_other_world_sizes(saved4, world):
    job("load", world, saved4)


def test_reads_only_needed_blocks(saved4, monkeypatch):
    """A rank loading a slice reads only the row blocks it overlaps."""
    from tensorsafe import _native

    reads = []
    real_open = _native.Reader.open

    class Spy:
        def __init__(self, r):
            self._r = r

        def read_into(self, name, out, verify=False):
            reads.append((name, verify))
            return self._r.read_into(name, out, verify)

        def __getattr__(self, k):
            return getattr(self._r, k)

    monkeypatch.setattr(_native.Reader, "open", staticmethod(lambda *a: Spy(real_open(*a))))
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import LoadPlan, ReadItem, LoadItemType
    from torch.distributed.checkpoint.metadata import MetadataIndex

    reader = StorageReader(saved4)
    md = reader.read_metadata()
    reader.set_up_storage_reader(md, True)
    # Rows 80..100 of "big" lie in shard 1 (rows 76..151), blocks 0 and 1.
    target = torch.zeros(20, 64)
    item = ReadItem(type=LoadItemType.TENSOR, dest_index=MetadataIndex("big", [0, 0]), dest_offsets=torch.Size([0, 0]),
                    storage_index=MetadataIndex("big", [76, 0]), storage_offsets=torch.Size([4, 0]),
                    lengths=torch.Size([20, 64]))

    class Planner(DefaultLoadPlanner):
        def resolve_tensor(self, req):
            return target

        def commit_tensor(self, req, t):
            pass

    reader.read_data(LoadPlan([item]), Planner()).wait()
    assert torch.equal(target, dcp_jobs.expected()["big"][80:100])
    assert sorted(n for n, _ in reads) == ["big[76,0]#0", "big[76,0]#1"] and all(v for _, v in reads)
    reads.clear()
    target.zero_()
    StorageReader(saved4, verify=False).read_data  # verify=False: exact ranges through read_slice
    r2 = StorageReader(saved4, verify=False)
    r2.set_up_storage_reader(md, True)
    r2.read_data(LoadPlan([item]), Planner()).wait()
    assert torch.equal(target, dcp_jobs.expected()["big"][80:100]) and reads == []


# -- training resumed on another world size ------------------------------------


def reference_losses(steps):
    m = dcp_jobs.model()
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    out = []
    for i in range(steps):
        x, y = dcp_jobs.batch(i)
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out


def test_fsdp2_train_2_ranks_resume_on_3(tmp_path):
    job("train", 2, tmp_path / "train", 3)
    r = result(job("resume", 3, tmp_path / "train"))
    ref = reference_losses(5)
    np.testing.assert_allclose(r["saved"], ref[:3], rtol=1e-5)
    # The next loss depends on the parameters, the one after on Adam's state too.
    np.testing.assert_allclose(r["next"], ref[3:5], rtol=1e-5)


# -- corruption -------------------------------------------------------------------


def small_state(step=1.0):
    return {"a": torch.full((40, 16), step), "b": torch.arange(24, dtype=torch.int32).reshape(4, 6),
            "c": {"x": torch.ones(3, dtype=torch.float16) * step}}


def test_flipped_bytes_in_each_file_caught(tmp_path, rng):
    path = tmp_path / "c"
    dcp.save(small_state(), storage_writer=StorageWriter(path, block_bytes=1024))
    files = rank_files(path)
    assert len(files) == 1
    fpath = path / files[0]
    infos = tensorsafe.open(fpath).summary(), {n: tensorsafe.open(fpath).info(n) for n in tensorsafe.open(fpath)}
    original = fpath.read_bytes()
    for name, info in infos[1].items():
        data = bytearray(original)
        pos = info["offset"] + int(rng.integers(info["nbytes"]))
        data[pos] ^= 1 << int(rng.integers(8))
        fpath.write_bytes(bytes(data))
        with pytest.raises(FAILED) as ei:
            dcp.load(small_state(0.0), storage_reader=StorageReader(path))
        msg = str(ei.value)
        assert "CorruptionError" in repr(ei.value) or "checksum" in msg.lower(), msg
        assert str(fpath) in msg and repr(name) in msg and f"file offset {info['offset']}" in msg, msg
        # verify=False skips the check and loads the damaged bytes.
        dcp.load(small_state(0.0), storage_reader=StorageReader(path, verify=False))
    # The file's index.
    data = bytearray(original)
    idx = infos[0]["index_offset"] + int(rng.integers(infos[0]["index_length"]))
    data[idx] ^= 0x10
    fpath.write_bytes(bytes(data))
    with pytest.raises(FAILED, match=files[0]):
        dcp.load(small_state(0.0), storage_reader=StorageReader(path))
    fpath.write_bytes(original)
    # The metadata document: every byte position is covered by the parse or the digest.
    meta = (path / METADATA_NAME).read_bytes()
    for pos in rng.choice(len(meta), 20, replace=False):
        bad = bytearray(meta)
        bad[pos] ^= 0x02
        (path / METADATA_NAME).write_bytes(bytes(bad))
        with pytest.raises(tensorsafe.Error, match=METADATA_NAME):
            load_metadata(path)
    (path / METADATA_NAME).write_bytes(meta)
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(path))
    assert torch.equal(sd["a"], small_state()["a"])


def test_missing_metadata_is_not_a_checkpoint(tmp_path):
    with pytest.raises(tensorsafe.NotFoundError, match="does not exist"):
        load_metadata(tmp_path / "nothing")
    path = tmp_path / "c"
    dcp.save(small_state(), storage_writer=StorageWriter(path))
    os.unlink(path / METADATA_NAME)
    with pytest.raises(FAILED, match="not a tensorsafe checkpoint.*interrupted save"):
        dcp.load(small_state(0.0), storage_reader=StorageReader(path))


# -- no pickle --------------------------------------------------------------------

PICKLE_PROTOCOLS = [b"\x80" + bytes([p]) for p in range(2, 6)]


def test_no_pickle_in_what_the_backends_write(tmp_path, monkeypatch):
    """Tensors only (integer-valued floats never hold 0x80 0x02..0x05): no
    pickle protocol header anywhere; the metadata is JSON; loading such a
    checkpoint never unpickles."""
    import pickle

    path = tmp_path / "np"
    sd = {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64) % 97,
          "i": torch.arange(100, dtype=torch.int64) % 100, "h": torch.ones(8, dtype=torch.bfloat16)}
    dcp.save(sd, storage_writer=StorageWriter(path))
    for name in os.listdir(path):
        data = (path / name).read_bytes()
        assert not any(p in data for p in PICKLE_PROTOCOLS), name
        if name == METADATA_NAME:
            json.loads(data)
        else:
            tensorsafe.verify(path / name)

    def no_unpickling(*a, **k):
        raise AssertionError("unpickling during load")

    monkeypatch.setattr(pickle, "load", no_unpickling)
    monkeypatch.setattr(pickle, "loads", no_unpickling)
    monkeypatch.setattr(pickle, "Unpickler", no_unpickling)
    monkeypatch.setattr(torch, "load", no_unpickling)
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=StorageReader(path))
    assert all(torch.equal(out[k], sd[k]) for k in sd)


# -- crashes ----------------------------------------------------------------------


def test_sigkill_single_rank_saves(tmp_path):
    r = result(job("crashloop", 1, tmp_path, 56, SEED, timeout=300))
    assert r["rounds"] == 56
    # Random delays over twice a save's time: most kills land before the
    # commit (the previous checkpoint loads), some after (the new one does).
    assert r["old_kept"] > 0 and r["refused"] > 0, r


@pytest.mark.parametrize("delay", [0.3, 0.9, 1.6])
def test_sigkill_one_rank_of_two(tmp_path, delay):
    path = tmp_path / "k"
    dcp.save(dcp_jobs.crash_state(0, 2, 0) | dcp_jobs.crash_state(0, 2, 1), storage_writer=StorageWriter(path))
    before = set(os.listdir(path))
    r = job("killsave", 2, path, delay, check=False)
    n = dcp_jobs.load_crash_state(str(path), world=2)
    assert n in (0, 1), n
    if r.returncode != 0:
        assert n == 0 or set(os.listdir(path)) != before
    if n == 0:
        assert before <= set(os.listdir(path))  # the committed files were never touched


def test_failed_commit_leaves_previous_checkpoint_and_no_temp_file(tmp_path, monkeypatch):
    """The metadata rename fails (a full disk, EIO): the save raises, the
    directory holds the earlier checkpoint's files plus nothing of the
    metadata's temp file, and the earlier checkpoint still loads."""
    from tensorsafe.dcp import _writer

    path = tmp_path / "c"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(path))
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith(METADATA_NAME):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(_writer.os, "replace", failing_replace)
    with pytest.raises(FAILED, match="No space left"):
        dcp.save(small_state(2.0), storage_writer=StorageWriter(path))
    monkeypatch.setattr(_writer.os, "replace", real_replace)
    assert not [n for n in os.listdir(path) if n.endswith(".tmp")], os.listdir(path)
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(path))
    assert torch.all(sd["a"] == 1.0)


def test_resave_in_place_removes_old_files_after_commit(tmp_path):
    path = tmp_path / "c"
    dcp.save(small_state(1.0), storage_writer=StorageWriter(path))
    first = rank_files(path)
    dcp.save(small_state(2.0), storage_writer=StorageWriter(path))
    second = rank_files(path)
    assert len(second) == 1 and second != first
    sd = small_state(0.0)
    dcp.load(sd, storage_reader=StorageReader(path))
    assert torch.all(sd["a"] == 2.0) and torch.all(sd["c"]["x"] == 2.0)


# -- plain values and StreamingDataset ----------------------------------------------


def test_plain_values_and_streaming_dataset_state(tmp_path):
    from tensorsafe import dataset as tds

    ds_path = tmp_path / "ds"
    with tds.Writer(ds_path, shard_samples=8, sync=False) as w:
        for i in range(64):
            w.add({"id": i, "x": np.full(2, i, np.float32)})
    ds = tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=4)
    ds.set_epoch(1)
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
    it = iter(loader)
    head = [next(it)["id"].tolist() for _ in range(5)]
    sd = {"model": small_state(3.0), "data": ds, "extra": {"note": "é", "n": [1, 2.5, None]}}
    dcp.save(sd, storage_writer=StorageWriter(tmp_path / "c"))
    fresh = tds.StreamingDataset(ds_path, batch_size=4)
    out = {"model": small_state(0.0), "data": fresh, "extra": {"note": "", "n": []}}
    dcp.load(out, storage_reader=StorageReader(tmp_path / "c"))
    assert out["extra"] == {"note": "é", "n": [1, 2.5, None]}
    assert torch.equal(out["model"]["a"], small_state(3.0)["a"])
    rest = [b["id"].tolist() for b in torch.utils.data.DataLoader(fresh, batch_size=4)]
    assert [i for b in head + rest for i in b] == ds.epoch_order(1).tolist()


# -- incremental saves, async_save, the dcp tool ------------------------------------


def test_incremental_save_links_unchanged_items(tmp_path):
    from tensorsafe import _native

    sd = {"frozen": torch.randn(64, 32), "emb": torch.randn(100, 16), "head": torch.randn(8, 8), "step": 1}
    dcp.save(sd, storage_writer=StorageWriter(tmp_path / "s1", block_bytes=2048))
    doc1 = json.loads((tmp_path / "s1" / METADATA_NAME).read_bytes())
    # The metadata's checksums are the files' own, and data_checksum computes them.
    f1 = tmp_path / "s1" / next(iter(doc1["files"]))
    infos = {n: tensorsafe.open(f1).info(n) for n in tensorsafe.open(f1)}
    assert _native.data_checksum(sd["head"].numpy()) == infos["head"]["checksum"]
    sd["head"] = sd["head"] + 1
    sd["emb"][50] += 1  # one row block of "emb" changes: the whole item is written again
    sd["step"] = 2
    dcp.save(sd, storage_writer=StorageWriter(tmp_path / "s2", block_bytes=2048, incremental_from=tmp_path / "s1"))
    doc2 = json.loads((tmp_path / "s2" / METADATA_NAME).read_bytes())
    where = {s["fqn"]: s["file"] for s in doc2["storage"]}
    assert where["frozen"] in doc1["files"] and where["head"] not in doc1["files"] and where["emb"] not in doc1["files"]
    old = tmp_path / "s2" / where["frozen"]
    assert os.stat(old).st_ino == os.stat(f1).st_ino  # hard-linked
    # Deleting the first checkpoint never breaks the second.
    import shutil

    shutil.rmtree(tmp_path / "s1")
    out = {"frozen": torch.zeros(64, 32), "emb": torch.zeros(100, 16), "head": torch.zeros(8, 8), "step": 0}
    dcp.load(out, storage_reader=StorageReader(tmp_path / "s2"))
    assert all(torch.equal(out[k], sd[k]) for k in ("frozen", "emb", "head")) and out["step"] == 2
    assert subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "verify", str(tmp_path / "s2")],
                          capture_output=True).returncode == 0


def test_async_save_thread(tmp_path):
    sd = small_state(4.0)
    fut = dcp.async_save(sd, storage_writer=StorageWriter(tmp_path / "a"))
    fut.result()
    out = small_state(0.0)
    dcp.load(out, storage_reader=StorageReader(tmp_path / "a"))
    assert torch.equal(out["a"], sd["a"])


def test_dcp_tool(saved4, tmp_path):
    def tool(*args):
        return subprocess.run([sys.executable, "-m", "tensorsafe.dcp", *map(str, args)], capture_output=True,
                              text=True)

    r = tool("ls", saved4)
    assert r.returncode == 0 and "big  float32  [301, 64]  4 chunks" in r.stdout and "values.step  bytes" in r.stdout
    r = tool("info", saved4)
    assert r.returncode == 0 and "files: 4" in r.stdout
    r = tool("verify", saved4)
    assert r.returncode == 0 and "4 of 4 files verified" in r.stdout, r.stdout + r.stderr
    r = tool("consolidate", saved4, tmp_path / "full.tsafe")
    assert r.returncode == 0, r.stderr
    with tensorsafe.open(tmp_path / "full.tsafe") as f:
        for k, v in dcp_jobs.expected().items():
            assert torch.equal(f.get(k, "pt"), v), k
    r = tool("info", tmp_path)
    assert r.returncode == 3 and "not a tensorsafe checkpoint" in r.stderr


CONSOLIDATE_SCRIPT = r"""
import json, os, sys
import torch
import torch.distributed.checkpoint as dcp
from transformers import LlamaConfig, LlamaForCausalLM, AutoModelForCausalLM
from tensorsafe.dcp import StorageWriter

ckpt, hf_dir = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                     max_position_embeddings=64, tie_word_embeddings=False)).eval()
dcp.save(model.state_dict(), storage_writer=StorageWriter(ckpt))
import subprocess
r = subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "consolidate", ckpt, hf_dir, "--max-shard-size", "150KB"],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stderr
model.config.save_pretrained(hf_dir)
loaded = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
ids = torch.randint(0, 1000, (2, 16))
with torch.no_grad():
    same = bool(torch.equal(model(ids).logits, loaded(ids).logits))
print(json.dumps({"same": same, "files": sorted(os.listdir(hf_dir))}))
"""


def test_consolidate_to_safetensors_and_an_hf_checkpoint(saved4, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    want = dcp_jobs.expected()
    r = subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "consolidate", saved4, tmp_path / "full.safetensors"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = st.load_file(str(tmp_path / "full.safetensors"))  # the real safetensors reads it
    assert set(got) == set(want) and all(torch.equal(got[k], v) for k, v in want.items())
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    r = subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "consolidate", saved4, tmp_path / "hf",
                        "--max-shard-size", "40KB"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards == sorted(f for f in os.listdir(tmp_path / "hf") if f.endswith(".safetensors"))
    got = {}
    for s in shards:
        got.update(st.load_file(str(tmp_path / "hf" / s)))
    assert set(got) == set(want) and all(torch.equal(got[k], v) for k, v in want.items())
    assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in want.values())


def test_a_transformers_model_from_a_dcp_checkpoint(tmp_path):
    pytest.importorskip("transformers")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("TENSORSAFE_AS_SAFETENSORS", None)
    r = subprocess.run([sys.executable, "-c", CONSOLIDATE_SCRIPT, str(tmp_path / "ckpt"), str(tmp_path / "hf")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same"], out
    assert "model.safetensors.index.json" in out["files"] and "model-00002-of-" in " ".join(out["files"])


ASYNC_PROCESS_SCRIPT = r"""
import json, os, sys, time, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from tensorsafe.dcp import StorageWriter, StorageReader
if __name__ == "__main__":
    dist.init_process_group("gloo")
    torch.manual_seed(1)
    sd = {"w": torch.randn(512, 256), "step": torch.tensor(7)}
    t = time.perf_counter()
    fut = dcp.async_save(sd, storage_writer=StorageWriter(sys.argv[1]),
                         async_checkpointer_type=AsyncCheckpointerType.PROCESS)
    blocked = time.perf_counter() - t
    fut.result()
    out = {"w": torch.zeros(512, 256), "step": torch.tensor(0)}
    dcp.load(out, storage_reader=StorageReader(sys.argv[1]))
    print(json.dumps({"blocked": blocked, "done": time.perf_counter() - t,
                      "equal": all(torch.equal(out[k], sd[k]) for k in sd)}))
    dist.destroy_process_group()
"""


def test_async_save_in_dcps_background_process(tmp_path):
    """DCP's process-based async save (a background process with its own
    process group) writes through StorageWriter; the caller blocks only for
    the staging."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    r = subprocess.run([sys.executable, "-c", ASYNC_PROCESS_SCRIPT, str(tmp_path / "ckpt")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["equal"] and out["blocked"] < out["done"], out
    assert subprocess.run([sys.executable, "-m", "tensorsafe.dcp", "verify", str(tmp_path / "ckpt")],
                          capture_output=True).returncode == 0
