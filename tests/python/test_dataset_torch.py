"""tensorsafe.dataset with PyTorch: map-style and iterable datasets in a
DataLoader, partitioning over workers and ranks (torch.distributed, gloo,
loopback), shuffling per epoch, and mid-epoch resumption."""

import os
import pickle
import socket
import warnings

import numpy as np
import pytest

from tensorsafe import dataset as tds

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N = 203  # not a multiple of any batch or world size used here



@pytest.fixture(scope="module")
def ds200(tmp_path_factory):
    """200 samples: divisible by every global batch used, so no padding."""
    path = tmp_path_factory.mktemp("tds") / "ds200"
    with tds.Writer(path, shard_samples=16, sync=False) as w:
        for i in range(200):
            w.add({"id": i})
    return str(path)


@pytest.fixture(scope="module")
def dspath(tmp_path_factory):
    path = tmp_path_factory.mktemp("tds") / "ds"
    with tds.Writer(path, shard_samples=16, sync=False) as w:
        for i in range(N):
            w.add({"id": i, "x": np.full(3, i, np.int32)})
    return str(path)


@pytest.fixture(autouse=True)
def single_process_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)


def ids_of(loader):
    return [b["id"].tolist() for b in loader]


def flat(batches):
    return [i for b in batches for i in b]


def test_map_style_in_dataloader(dspath):
    ds = tds.Dataset(dspath)
    got = flat(ids_of(DataLoader(ds, batch_size=10, shuffle=True, num_workers=2)))
    assert sorted(got) == list(range(N))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_sample_once_per_epoch(dspath, workers, shuffle):
    ds = tds.StreamingDataset(dspath, shuffle=shuffle, batch_size=8, shuffle_block_size=50)
    got = flat(ids_of(DataLoader(ds, batch_size=8, num_workers=workers)))
    assert sorted(got) == list(range(N))
    assert (got == list(range(N))) != shuffle


def test_order_independent_of_worker_count(dspath):
    orders = []
    for workers in (0, 1, 2, 3):
        ds = tds.StreamingDataset(dspath, shuffle=True, seed=5, batch_size=4, shuffle_block_size=40)
        orders.append(flat(ids_of(DataLoader(ds, batch_size=4, num_workers=workers))))
    assert all(o == orders[0] for o in orders)


def test_shuffle_per_epoch_and_seed(dspath):
    def epoch_ids(seed, epoch):
        ds = tds.StreamingDataset(dspath, shuffle=True, seed=seed, shuffle_block_size=64)
        ds.set_epoch(epoch)
        return [s["id"] for s in ds]

    e0, e1 = epoch_ids(1, 0), epoch_ids(1, 1)
    assert sorted(e0) == sorted(e1) == list(range(N))
    assert e0 != e1
    assert epoch_ids(1, 1) == e1
    assert epoch_ids(2, 1) != e1
    # The ids the native iterator reads are those the sampler plans.
    ds = tds.StreamingDataset(dspath, shuffle=True, seed=1, shuffle_block_size=64)
    assert ds.worker_ids().tolist() == e0


@pytest.mark.parametrize("workers_before,workers_after", [(2, 1), (0, 3), (2, 2)])
def test_resume_mid_epoch(dspath, workers_before, workers_after):
    bs, steps = 4, 9
    full_ds = tds.StreamingDataset(dspath, shuffle=True, seed=11, batch_size=bs, shuffle_block_size=30)
    full_ds.set_epoch(3)
    full = ids_of(DataLoader(full_ds, batch_size=bs, num_workers=0))

    ds = tds.StreamingDataset(dspath, shuffle=True, seed=11, batch_size=bs, shuffle_block_size=30)
    ds.set_epoch(3)
    seen = []
    for step, b in enumerate(DataLoader(ds, batch_size=bs, num_workers=workers_before)):
        seen.append(b["id"].tolist())
        if step + 1 == steps:
            break
    state = ds.state_dict(batches_consumed=steps)
    assert state["epoch"] == 3 and state["sample_in_epoch"] == steps * bs

    fresh = tds.StreamingDataset(dspath, batch_size=bs)  # config comes from the state
    fresh.load_state_dict(pickle.loads(pickle.dumps(state)))
    fresh.set_epoch(3)  # the usual loop header keeps the resume point
    rest = ids_of(DataLoader(fresh, batch_size=bs, num_workers=workers_after))
    assert seen + rest == full
    # Twice resumed: the count since the resume point adds up.
    state2 = fresh.state_dict(batches_consumed=5)
    assert state2["sample_in_epoch"] == (steps + 5) * bs
    # The end of the epoch rolls over.
    state3 = fresh.state_dict(num_samples_consumed=N)
    assert (state3["epoch"], state3["sample_in_epoch"]) == (4, 0)


def test_bad_state_rejected(dspath):
    ds = tds.StreamingDataset(dspath)
    good = ds.state_dict(num_samples_consumed=0)
    with pytest.raises(ValueError, match='key "seed": is missing'):
        ds.load_state_dict({k: v for k, v in good.items() if k != "seed"})
    with pytest.raises(ValueError, match='key "mode": unknown partition mode "chaos"'):
        ds.load_state_dict(dict(good, mode="chaos"))
    with pytest.raises(ValueError, match='key "epoch": expected an integer, got float 1.5'):
        ds.load_state_dict(dict(good, epoch=1.5))
    with pytest.raises(ValueError, match='key "epochs": is not a sampler state key'):
        ds.load_state_dict(dict(good, epochs=1))
    with pytest.raises(ValueError, match="at most one"):
        ds.state_dict(num_samples_consumed=1, batches_consumed=1)


def test_seed_mode_is_composer_get_partition(dspath):
    # 203 samples, 3 workers: contiguous ranges, as Composer's get_partition.
    ds = tds.StreamingDataset(dspath, mode="seed", batch_size=2)
    parts = [ds.worker_ids((1, 1, 3, 0, 0, w)).tolist() for w in range(3)]
    assert flat(parts) == list(range(N))
    assert all(p == list(range(p[0], p[-1] + 1)) for p in parts)
    got = flat(ids_of(DataLoader(ds, batch_size=2, num_workers=3)))
    assert sorted(got) == list(range(N))
    with pytest.raises(ValueError, match="does not shuffle"):
        tds.StreamingDataset(dspath, mode="seed", shuffle=True)


def test_env_world_without_process_group(dspath, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    ds = tds.StreamingDataset(dspath, batch_size=3)
    mine = [s["id"] for s in ds]
    monkeypatch.setenv("RANK", "0")
    other = [s["id"] for s in ds]
    # 203 samples over 2 ranks: one sample repeated so the ranks get equal
    # shares (MosaicML's padding; DDP needs equal step counts).
    assert len(mine) == len(other) == len(ds) == 102
    assert ds.num_samples == N
    assert sorted(set(mine + other)) == list(range(N))
    assert not torch.distributed.is_initialized()  # never initialised for us (MosaicML #307)
    # A copy made for a spawned DataLoader worker keeps the world it was
    # pickled in (the worker may see no process group and no RANK).
    monkeypatch.setenv("RANK", "1")
    copy = pickle.loads(pickle.dumps(ds))
    monkeypatch.setenv("RANK", "0")
    assert [s["id"] for s in copy] == mine
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match="LOCAL_RANK=1"):
        list(ds)


# ---- torch.distributed: 2 and 4 processes, gloo on 127.0.0.1 -----------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, path, global_bs, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    try:
        warnings.filterwarnings("ignore")
        bs = global_bs // world
        ds = tds.StreamingDataset(path, shuffle=True, seed=3, batch_size=bs, num_canonical_nodes=2,
                                  shuffle_block_size=32)
        ds.set_epoch(1)
        batches = ids_of(DataLoader(ds, batch_size=bs, num_workers=2 if rank == 1 else 0))
        allb = [None] * world
        dist.all_gather_object(allb, batches)
        if rank == 0:
            with open(out, "wb") as f:
                pickle.dump(allb, f)
    finally:
        dist.destroy_process_group()


def global_batches(per_rank):
    """Global batch k = the k-th batch of every rank, as a set."""
    n = max(len(b) for b in per_rank)
    return [sorted(i for r in per_rank if k < len(r) for i in r[k]) for k in range(n)]


def test_distributed_elastic_global_batches(ds200, tmp_path):
    dspath, n = ds200, 200
    import torch.multiprocessing as mp

    gbs = 8
    ds = tds.StreamingDataset(dspath, shuffle=True, seed=3, batch_size=gbs, num_canonical_nodes=2,
                              shuffle_block_size=32)
    ds.set_epoch(1)
    ref = global_batches([ids_of(DataLoader(ds, batch_size=gbs))])
    assert sorted(flat(ref)) == list(range(n))
    for world in (2, 4):
        out = tmp_path / f"w{world}.pkl"
        # fork: the ranks start in milliseconds instead of importing torch
        # again each (seconds apiece on a busy 2-core machine).
        mp.start_processes(_rank_main, args=(world, free_port(), dspath, gbs, str(out)), nprocs=world,
                           join=True, start_method="fork")
        per_rank = pickle.loads(out.read_bytes())
        assert sorted(flat(flat(per_rank))) == list(range(n)), world  # exactly once across ranks
        assert global_batches(per_rank) == ref, world


def test_default_shuffle_block_is_the_cpp_default(dspath):
    """An unset block size is C++'s DefaultShuffleBlockSize for the canonical
    nodes (MosaicML's max(4_000_000 // ncn, 1 << 18)), for Python and C++
    callers alike: 300,000 samples, where the default (2,000,000 for 2 nodes)
    and the 1 << 18 floor give different epochs."""
    from tensorsafe import _native

    assert [_native.default_shuffle_block_size(n) for n in (1, 2, 15, 16, 64)] == [
        4_000_000, 2_000_000, 266_666, 262_144, 262_144]
    ds = tds.StreamingDataset(dspath, shuffle=True, num_canonical_nodes=2)
    st = ds._start_state(ds._world())
    assert st.shuffle_block_size is None and st.block_size == 2_000_000
    shards = [150_000, 150_000]
    unset = _native.SamplerState(shuffle=True, num_canonical_nodes=2)  # C++ defaults otherwise
    ids = _native.epoch_worker_ids(shards, unset, 1, 1, 1, 0, 0, 0)
    named = _native.epoch_worker_ids(shards, unset.replace(shuffle_block_size=2_000_000), 1, 1, 1, 0, 0, 0)
    floor = _native.epoch_worker_ids(shards, unset.replace(shuffle_block_size=1 << 18), 1, 1, 1, 0, 0, 0)
    assert ids.tolist() == named.tolist()
    assert ids.tolist() != floor.tolist()
    assert sorted(ids.tolist()) == list(range(300_000))
