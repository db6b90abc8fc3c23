"""Multi-process jobs for test_dcp.py: `python dcp_jobs.py JOB WORLD DIR PORT
[ARGS...]` spawns WORLD gloo ranks on 127.0.0.1 (torch.multiprocessing) and
runs JOB on each; a failing rank fails the job (non-zero exit).

Jobs:
  save     DTensors (Shard(0), Shard(1), row blocks), a replicated tensor and
           plain values from `expected()`, saved to DIR, loaded back on the
           same ranks.
  load     loads DIR on WORLD ranks into DTensors of this mesh, compares.
  savedcp  the save job's state through DCP's own FileSystemWriter (pickled
           .metadata, .distcp files), for test_dcp_default.py.
  train    FSDP2 model + Adam, 3 steps, saved to DIR (ARGS: steps).
  resume   loads DIR into FSDP2 on WORLD ranks, prints the next two losses.
  killsave saves step 1 to DIR, where step 0 is committed; rank 1 SIGKILLs
           itself after ARGS[0] seconds.
"""

import json
import os
import signal
import sys
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

from tensorsafe.dcp import StorageReader, StorageWriter

BLOCK = 4096  # small row blocks, so that resharded loads span several


def expected():
    """The full tensors and plain values of the save/load jobs."""
    g = torch.Generator().manual_seed(1234)
    return {
        "dt": torch.randn(13, 7, generator=g),
        "dt1": torch.randn(6, 10, generator=g).to(torch.bfloat16),
        "big": torch.randn(301, 64, generator=g),
        "rep": torch.arange(5, dtype=torch.int64) * 3,
        "flags": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }


PLACE = {"dt": 0, "dt1": 1, "big": 0}  # sharded dim of each DTensor
VALUES = {"step": 7, "name": "run-a", "cfg": {"lr": 0.1, "betas": [0.9, 0.99]}}


def state(mesh, fill=True):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    exp = expected()
    sd = {}
    for k, v in exp.items():
        src = v if fill else torch.zeros_like(v)
        if k in PLACE:
            sd[k] = distribute_tensor(src, mesh, [Shard(PLACE[k])]) if mesh is not None else src
        elif k == "scalar" and mesh is not None:
            sd[k] = distribute_tensor(src, mesh, [Replicate()])
        else:
            sd[k] = src.clone()
    sd["values"] = dict(VALUES) if fill else {"step": 0, "name": "", "cfg": {"lr": 0.0, "betas": []}}
    return sd


def check(sd):
    exp = expected()
    for k, v in exp.items():
        got = sd[k].full_tensor() if hasattr(sd[k], "full_tensor") else sd[k]
        assert got.dtype == v.dtype and torch.equal(got, v), f"{k}: {got} != {v}"
    assert sd["values"] == VALUES, sd["values"]


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(12, 8, generator=g), torch.randn(12, 4, generator=g)


def global_loss(m, step, rank, world):
    """The mean loss over the global batch of `step`; this rank computes its rows."""
    x, y = batch(step)
    rows = torch.arange(12).tensor_split(world)[rank]
    loss = torch.nn.functional.mse_loss(m(x[rows]), y[rows], reduction="sum") / (12 * 4)
    return loss


def fsdp(world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    m = model()
    fully_shard(m, mesh=init_device_mesh("cpu", (world,)))
    return m, torch.optim.Adam(m.parameters(), lr=0.05)


def step(m, opt, i, rank, world):
    loss = global_loss(m, i, rank, world)
    # FSDP2 averages gradients over ranks: scale so that the sum of this
    # rank's rows makes the global mean.
    (loss * world).backward()
    opt.step()
    opt.zero_grad()
    out = loss.detach().clone()
    dist.all_reduce(out)
    return out.item()


def run(rank, world, job, path, port, args):
    import faulthandler

    # A hung collective shows where, instead of eating the test's timeout.
    faulthandler.dump_traceback_later(int(os.environ.get("DCP_JOB_HANG_S", "200")), exit=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.device_mesh import init_device_mesh

        if job == "savedcp":
            dcp.save(state(init_device_mesh("cpu", (world,))), storage_writer=dcp.FileSystemWriter(path))
        elif job in ("save", "load"):
            mesh = init_device_mesh("cpu", (world,))
            if job == "save":
                dcp.save(state(mesh), storage_writer=StorageWriter(path, block_bytes=BLOCK))
            sd = state(mesh, fill=False)
            dcp.load(sd, storage_reader=StorageReader(path))
            check(sd)
        elif job == "train":
            m, opt = fsdp(world)
            losses = [step(m, opt, i, rank, world) for i in range(int(args[0]))]
            msd, osd = get_state_dict(m, opt)
            dcp.save({"model": msd, "optim": osd, "losses": losses}, storage_writer=StorageWriter(path))
        elif job == "resume":
            m, opt = fsdp(world)
            msd, osd = get_state_dict(m, opt)
            sd = {"model": msd, "optim": osd, "losses": []}
            dcp.load(sd, storage_reader=StorageReader(path))
            set_state_dict(m, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
            n = len(sd["losses"])
            nxt = [step(m, opt, n + i, rank, world) for i in range(2)]
            if rank == 0:
                print("RESULT " + json.dumps({"saved": sd["losses"], "next": nxt}), flush=True)
        elif job == "killsave":
            if rank == 1:
                threading.Timer(float(args[0]), lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
            dcp.save(crash_state(1, world, rank), storage_writer=StorageWriter(path))
        else:
            raise SystemExit(f"unknown job {job}")
        if job != "killsave":
            # Every rank done with its collectives before any tears gloo down:
            # a rank destroying the group while another's work was still
            # alive aborted that rank ("terminate called without an active
            # exception", seen once on 2026-11-30 in resume on 3 ranks).
            dist.barrier()
    finally:
        if job != "killsave":
            dist.destroy_process_group()
    if job != "killsave":
        # Done, and without an exception: leave before the interpreter's
        # finalization, where gloo's worker threads can still hold tensors
        # whose release takes the GIL (pytorch/pytorch#179291). A rank of
        # resume on 3 aborted after its work twice on 2026-11-30 ("terminate
        # called without an active exception"), once before the barrier
        # above was added and once after it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def crash_state(step, world=1, rank=0, tensors=16):
    """A state whose every value says its step: a load mixing two saves shows."""
    sd = {f"w{i}": torch.full((64, 1024), float(step)) for i in range(tensors)}
    sd[f"r{rank}"] = torch.full((world, 8), float(step))  # one item per rank
    sd["step"] = {"n": step}
    return sd


def load_crash_state(path, world=1):
    """Loads a crash-test checkpoint; returns its step after checking that
    every value has that step."""
    sd = crash_state(-1, world, 0)
    for r in range(1, world):
        sd[f"r{r}"] = torch.zeros(world, 8)
    dcp.load(sd, storage_reader=StorageReader(path))
    n = sd["step"]["n"]
    for k, v in sd.items():
        if k != "step":
            assert torch.all(v == float(n)), f"{k} holds a mix of saves (step {n})"
    return n


def crash_loop(base, rounds, seed):
    """Single-rank saves SIGKILLed at random moments (fork + kill), each
    followed by a load: prints a JSON summary, exits non-zero on a failure."""
    import random
    import shutil
    import time

    from tensorsafe.errors import NotFoundError

    rng = random.Random(seed)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dcp.save(crash_state(0), storage_writer=StorageWriter(os.path.join(base, "probe")))
    t_save = time.perf_counter() - t0
    shutil.rmtree(os.path.join(base, "probe"))
    summary = {"rounds": 0, "committed": 0, "old_kept": 0, "refused": 0, "t_save": t_save}
    path, last = None, None
    for i in range(1, rounds + 1):
        if path is None or rng.random() < 0.15:  # sometimes a fresh directory: nothing to fall back on
            path, last = os.path.join(base, f"c{i}"), None
        pid = os.fork()
        if pid == 0:
            try:
                dcp.save(crash_state(i), storage_writer=StorageWriter(path))
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, t_save * 2))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        summary["rounds"] += 1
        try:
            n = load_crash_state(path)
        except BaseException as e:  # DCP's CheckpointException carries the reader's error
            if last is not None or "interrupted save" not in str(e) and "does not exist" not in str(e) \
                    and "no committed metadata" not in str(e):
                raise
            assert isinstance(e, NotFoundError) or "NotFoundError" in repr(e) or "not a tensorsafe" in str(e), e
            summary["refused"] += 1
            # Commit one here, so that the next kills have a previous checkpoint to keep.
            dcp.save(crash_state(i), storage_writer=StorageWriter(path))
            last = i
            continue
        assert n == i or n == last, f"round {i}: loaded step {n}, last committed {last}"
        summary["committed" if n == i else "old_kept"] += 1
        last = n
    print("RESULT " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    job, world, path, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    if job == "crashloop":
        crash_loop(path, int(sys.argv[5]), int(sys.argv[6]))
        sys.exit(0)
    mp.spawn(run, args=(world, job, path, port, sys.argv[5:]), nprocs=world)
