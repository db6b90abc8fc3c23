"""StreamingDataset in torch DataLoaders as training scripts configure them:
num_workers {0, 1, 3} x persistent_workers x multiprocessing_context {fork,
spawn, forkserver} x pin_memory (26 valid combinations: num_workers=0 takes
neither persistent workers nor a context). Each case runs 3 epochs, each
checked against the documented order for (seed, epoch), then stops an epoch
mid-way, restores the state on the same dataset (so persistent workers must
pick it up) and reads the rest.

Kept lean for CI: one small dataset for every case; forkserver workers fork
from a server that preloaded torch and tensorsafe (as a user would set it
up), so only spawn pays an interpreter start per worker; persistent-worker
cases start their workers once. On a machine without an accelerator torch
turns pin_memory off (with a warning): those cases then check that it
changes nothing.
"""

import multiprocessing
import warnings

import numpy as np
import pytest

from conftest import SEED

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from tensorsafe import dataset as tds  # noqa: E402

N, BS, BLOCK = 61, 4, 16  # 61: not a multiple of the batch, so the last batch is partial
multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "tensorsafe.dataset"])

CASES = [(0, False, None, pin) for pin in (False, True)] + [
    (workers, persistent, ctx, pin)
    for workers in (1, 3)
    for persistent in (False, True)
    for ctx in ("fork", "spawn", "forkserver")
    for pin in (False, True)
]


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("matrix") / "ds"
    with tds.Writer(path, shard_samples=8, sync=False) as w:
        for i in range(N):
            w.add({"id": i, "x": np.full(2, i, np.int32)})
    return str(path)


@pytest.fixture(autouse=True)
def single_process_env(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)


def batches_of(loader, limit=None):
    out = []
    for b in loader:
        ids = b["id"].tolist()
        assert b["x"].tolist() == [[i, i] for i in ids]  # the tensor field travelled with its sample
        out.append(ids)
        if limit is not None and len(out) == limit:
            break
    return out


def documented(ds, epoch):
    order = ds.epoch_order(epoch).tolist()
    return [order[k:k + BS] for k in range(0, len(order), BS)]


@pytest.mark.parametrize("workers,persistent,ctx,pin", CASES,
                         ids=[f"w{w}-{'pers' if p else 'once'}-{c or 'main'}-{'pin' if m else 'nopin'}"
                              for w, p, c, m in CASES])
def test_epochs_and_mid_epoch_resume(ds_path, workers, persistent, ctx, pin):
    print(f"seed {SEED}")
    ds = tds.StreamingDataset(ds_path, shuffle=True, seed=SEED, batch_size=BS, shuffle_block_size=BLOCK)
    kwargs = dict(batch_size=BS, num_workers=workers, pin_memory=pin)
    if workers:
        kwargs.update(persistent_workers=persistent, multiprocessing_context=ctx)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "'pin_memory' argument is set as true but no accelerator")
        loader = DataLoader(ds, **kwargs)
        epochs = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            got = batches_of(loader)
            assert got == documented(ds, epoch), f"epoch {epoch}"
            assert sorted(i for b in got for i in b) == list(range(N)), f"epoch {epoch}: each sample once"
            epochs.append(got)
        assert epochs[0] != epochs[1] != epochs[2] != epochs[0]

        # Stop epoch 3 after 5 steps; save; restore into the same dataset
        # (persistent workers must see it) after moving it elsewhere.
        ds.set_epoch(3)
        head = batches_of(loader, limit=5)
        state = ds.state_dict() if workers == 0 else ds.state_dict(batches_consumed=5)
        assert (state["epoch"], state["sample_in_epoch"]) == (3, 5 * BS)
        ds.set_epoch(0)
        ds.load_state_dict(state)
        ds.set_epoch(3)  # the usual loop header keeps the resume point
        rest = batches_of(loader)
        assert head + rest == documented(ds, 3)
        assert len(loader) == len(rest)
