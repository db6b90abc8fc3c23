"""StreamingDataset checkpoints as training jobs take them: the Stateful
protocol (state_dict() with no argument), torch.distributed.checkpoint
save and load in a fresh process, torchdata's StatefulDataLoader mid-epoch,
a real `torchrun --nproc-per-node 2` gloo job, and a default DataLoader run
under `-W error`."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import SEED

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import tensorsafe  # noqa: E402
from tensorsafe import dataset as tds  # noqa: E402

N, BS = 200, 4


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "ds"
    with tds.Writer(path, shard_samples=16, sync=False) as w:
        for i in range(N):
            w.add({"id": i, "x": np.full(3, i, np.float32)})
    return str(path)


@pytest.fixture(autouse=True)
def single_process_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)


def ids(loader, limit=None):
    out = []
    for b in loader:
        out.append(b["id"].tolist())
        if limit is not None and len(out) == limit:
            break
    return out


def run_python(code, *args, timeout=300, flags=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_state_dict_is_stateful_and_counted(ds_path):
    from torch.distributed.checkpoint.stateful import Stateful

    ds = tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=BS)
    assert isinstance(ds, Stateful)
    assert ds.state_dict()["sample_in_epoch"] == 0  # before iterating: the start
    ds.set_epoch(2)
    head = ids(DataLoader(ds, batch_size=BS), limit=7)
    st = ds.state_dict()  # counted by the iterator of this process
    assert (st["epoch"], st["sample_in_epoch"]) == (2, 7 * BS)
    fresh = tds.StreamingDataset(ds_path, batch_size=BS)
    fresh.load_state_dict(st)
    rest = ids(DataLoader(fresh, batch_size=BS))
    whole = ds.epoch_order(2).tolist()
    assert [i for b in head + rest for i in b] == whole
    assert whole != ds.epoch_order(0).tolist()
    # The end of the epoch rolls over.
    assert (fresh.state_dict()["epoch"], fresh.state_dict()["sample_in_epoch"]) == (3, 0)


def test_workers_without_a_count_refuse_to_guess(ds_path):
    ds = tds.StreamingDataset(ds_path, batch_size=BS)
    assert len(ids(DataLoader(ds, batch_size=BS, num_workers=2), limit=3)) == 3
    with pytest.raises(tensorsafe.FailedPreconditionError, match="read by DataLoader workers"):
        ds.state_dict()
    assert ds.state_dict(batches_consumed=3)["sample_in_epoch"] == 3 * BS
    ds.set_epoch(1)  # a new epoch that no worker has read yet
    assert ds.state_dict()["epoch"] == 1


def test_dcp_save_then_load_in_a_fresh_process(ds_path, tmp_path):
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(SEED)
    model = torch.nn.Linear(3, 2)
    ds = tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=BS, shuffle_block_size=40)
    ds.set_epoch(1)
    head = ids(DataLoader(ds, batch_size=BS), limit=9)
    dcp.save({"dataset": ds, "model": model.state_dict()}, checkpoint_id=str(tmp_path / "ckpt"))
    r = run_python("""
        import json, sys
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.utils.data import DataLoader
        from tensorsafe import dataset as tds
        ds = tds.StreamingDataset(sys.argv[1], batch_size=4)     # another seed and no shuffle: the state decides
        model = torch.nn.Linear(3, 2)
        state = {"dataset": ds, "model": model.state_dict()}
        dcp.load(state, checkpoint_id=sys.argv[2])
        model.load_state_dict(state["model"])
        rest = [b["id"].tolist() for b in DataLoader(ds, batch_size=4, num_workers=2)]
        print(json.dumps({"rest": rest, "epoch": ds.epoch, "w": model.weight.tolist()}))
    """, ds_path, tmp_path / "ckpt")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["epoch"] == 1
    assert [i for b in head + out["rest"] for i in b] == ds.epoch_order(1).tolist()
    assert np.allclose(out["w"], model.weight.tolist())


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_stateful_dataloader_mid_epoch(ds_path, workers, persistent):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    kw = dict(batch_size=BS, num_workers=workers)
    if workers:
        kw.update(persistent_workers=persistent, multiprocessing_context="fork")

    def make():
        return tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=BS, shuffle_block_size=30)

    ds = make()
    ds.set_epoch(2)
    whole = ids(sdl.StatefulDataLoader(ds, **kw))
    assert sorted(i for b in whole for i in b) == list(range(N))

    ds = make()
    ds.set_epoch(2)
    loader = sdl.StatefulDataLoader(ds, **kw)
    it = iter(loader)
    head = [next(it)["id"].tolist() for _ in range(11)]
    state = loader.state_dict()
    del it

    ds2 = make()
    ds2.set_epoch(2)
    loader2 = sdl.StatefulDataLoader(ds2, **kw)
    loader2.load_state_dict(state)
    rest = ids(loader2)
    assert head + rest == whole
    # The next epoch after a resumed one is whole and new.
    ds2.set_epoch(3)
    nxt = ids(loader2)
    assert sorted(i for b in nxt for i in b) == list(range(N))
    assert [i for b in nxt for i in b] == ds2.epoch_order(3).tolist()


def test_default_dataloader_prints_no_warning(ds_path):
    r = run_python("""
        import sys
        from torch.utils.data import DataLoader
        from tensorsafe import dataset as tds
        path = sys.argv[1]
        for ds in (tds.StreamingDataset(path, batch_size=8), tds.Dataset(path)):
            for workers in (0, 2):
                n = sum(len(b["id"]) for b in DataLoader(ds, batch_size=8, num_workers=workers))
                assert n == 200, n
        print("ok")
    """, ds_path, flags=("-W", "error"))
    assert r.stdout.strip() == "ok" and r.stderr == "", r.stderr


TORCHRUN_SCRIPT = """
import json, os, sys
import torch.distributed as dist
from torch.utils.data import DataLoader
from tensorsafe import dataset as tds

path, out, bs = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ds = tds.StreamingDataset(path, shuffle=True, seed=int(sys.argv[4]), batch_size=bs, num_canonical_nodes=2,
                          shuffle_block_size=32)
loader = DataLoader(ds, batch_size=bs, num_workers=2, persistent_workers=True)
result = {"epochs": [], "len": len(loader)}
for epoch in range(2):
    ds.set_epoch(epoch)
    result["epochs"].append([b["id"].tolist() for b in loader])
ds.set_epoch(2)
head = []
for b in loader:
    head.append(b["id"].tolist())
    if len(head) == 6:
        break
state = ds.state_dict(batches_consumed=6)
fresh = tds.StreamingDataset(path, batch_size=bs)
fresh.load_state_dict(state)
result["head"], result["rest"] = head, [b["id"].tolist() for b in DataLoader(fresh, batch_size=bs, num_workers=2)]
result["state"] = state
gathered = [None] * world
dist.all_gather_object(gathered, result)
if rank == 0:
    with open(out, "w") as f:
        json.dump(gathered, f)
dist.destroy_process_group()
"""


def test_torchrun_two_ranks_gloo(ds_path, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    out = tmp_path / "out.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", str(script), ds_path, str(out), str(BS),
                        str(SEED)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    ranks = json.loads(out.read_text())
    assert len(ranks) == 2
    # The same job on one rank with the global batch: global batch k is the
    # union of the ranks' k-th batches (PARTITION.md §3).
    ref = tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=2 * BS, num_canonical_nodes=2,
                               shuffle_block_size=32)
    for epoch in range(2):
        per_rank = [r["epochs"][epoch] for r in ranks]
        assert sorted(i for b in per_rank[0] + per_rank[1] for i in b) == list(range(N)), epoch
        order = ref.epoch_order(epoch).tolist()
        want = [sorted(order[k:k + 2 * BS]) for k in range(0, N, 2 * BS)]
        assert [sorted(a + b) for a, b in zip(*per_rank)] == want, epoch
    assert ranks[0]["epochs"][0] != ranks[0]["epochs"][1]
    assert ranks[0]["state"] == ranks[1]["state"]  # every rank computes the same state
    assert ranks[0]["len"] == N // (2 * BS)
    order = ref.epoch_order(2).tolist()
    want = [sorted(order[k:k + 2 * BS]) for k in range(0, N, 2 * BS)]
    heads_rests = [r["head"] + r["rest"] for r in ranks]
    assert [sorted(a + b) for a, b in zip(*heads_rests)] == want
