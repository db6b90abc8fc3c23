"""DCP save and load through tensorsafe.dcp against torch's own back-ends,
in the same run: FileSystemWriter/Reader (.distcp + pickled .metadata) and
HuggingFaceStorageWriter/Reader (safetensors). 4 gloo ranks on 127.0.0.1,
CPU; a model of --gib GiB (default 2) of float32 tensors sharded as
DTensors (Shard(0)); every back-end fsyncs its files (their defaults).

    .venv/bin/python bench/dcp_bench.py [--gib 2] [--ranks 4] [--rounds 2] [--dir DIR]

Times are the slowest rank's, best of --rounds, files deleted between
rounds; loads follow their save, so they read from the page cache (as a
restart on the same node does). Prints one line per back-end and the ratios
(>1: tensorsafe faster).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

TENSOR_MIB = 16  # 128 tensors in 2 GiB: one changed is ~1% (incremental)


def backends(path):
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader, HuggingFaceStorageWriter

    from tensorsafe.dcp import StorageReader, StorageWriter

    return {
        "tensorsafe": (lambda: StorageWriter(path), lambda: StorageReader(path)),
        "tensorsafe(verify=False)": (None, lambda: StorageReader(path, verify=False)),
        "FileSystem": (lambda: FileSystemWriter(path), lambda: FileSystemReader(path)),
        "HuggingFace": (lambda: HuggingFaceStorageWriter(path, save_distributed=True),
                        lambda: HuggingFaceStorageReader(path)),
    }


def state(mesh, n, rank, world, fill):
    from torch.distributed.tensor import DTensor, Shard

    rows = TENSOR_MIB * (1 << 20) // 4 // 1024
    local_rows = rows // world
    sd = {}
    for i in range(n):
        local = torch.full((local_rows, 1024), float(i + rank) if fill else 0.0)
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                      shape=torch.Size([local_rows * world, 1024]),
                                                      stride=(1024, 1))
    return sd


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    t = torch.tensor(time.perf_counter() - t0, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(rank, world, port, args, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(minutes=30))
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    n = max(1, int(args.gib * 1024) // TENSOR_MIB)
    sd = state(mesh, n, rank, world, True)
    res = {}
    for rnd in range(args.rounds):
        for name, (mk_w, mk_r) in backends(os.path.join(args.dir, "ckpt")).items():
            if mk_w is None:
                continue
            path = os.path.join(args.dir, "ckpt")
            if rank == 0 and os.path.exists(path):
                shutil.rmtree(path)
            dist.barrier()
            try:
                ts = timed(lambda: dcp.save(sd, storage_writer=mk_w()))
                loaders = [(name, mk_r)] + ([("tensorsafe(verify=False)", backends(path)["tensorsafe(verify=False)"][1])]
                                            if name == "tensorsafe" else [])
                for lname, mk in loaders:
                    dst = state(mesh, n, rank, world, False)
                    tl = timed(lambda: dcp.load(dst, storage_reader=mk()))
                    ok = all(torch.equal(dst[k].to_local(), sd[k].to_local()) for k in sd)
                    r = res.setdefault(lname, {"save": float("inf"), "load": float("inf"), "ok": True})
                    r["load"] = min(r["load"], tl)
                    r["ok"] &= ok
                res[name]["save"] = min(res[name]["save"], ts)
            except Exception as e:  # a back-end that cannot do this job: recorded, not fatal
                res.setdefault(name, {})["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            dist.barrier()
    # Incremental: one tensor in 100 changed since a committed full save.
    from tensorsafe.dcp import StorageWriter

    base, inc = os.path.join(args.dir, "base"), os.path.join(args.dir, "inc")
    dcp.save(sd, storage_writer=StorageWriter(base))
    changed = max(1, n // 100)
    for i in range(changed):
        sd[f"layers.{i}.weight"].to_local().add_(1)
    best = float("inf")
    for rnd in range(args.rounds):
        if rank == 0 and os.path.exists(inc):
            shutil.rmtree(inc)
        dist.barrier()
        best = min(best, timed(lambda: dcp.save(sd, storage_writer=StorageWriter(inc, incremental_from=base))))
    res["incremental"] = {"save": best, "changed": changed}
    # async_save: the time the training loop is blocked, then the whole save;
    # DCP's thread-based executor, then its process-based one (a background
    # process per rank, with a process group of its own).
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    # The thread's collectives run beside this thread's barriers: on a group
    # of their own, or they interleave (a hang).
    async_pg = dist.new_group(backend="gloo")
    for kind in ("thread", "process"):
        if kind == "process":
            # DCP keeps one background process per rank: its start (spawn,
            # imports, a process group) is paid once, by a small warm-up save.
            dcp.async_save({"warm": torch.zeros(1)}, storage_writer=FileSystemWriter(os.path.join(args.dir, "warm")),
                           async_checkpointer_type=AsyncCheckpointerType.PROCESS).result()
            dist.barrier()
        for name, mk in (("tensorsafe", lambda p: StorageWriter(p)), ("FileSystem", lambda p: FileSystemWriter(p))):
            path = os.path.join(args.dir, f"async_{name}_{kind}")
            fut = None

            def start():
                nonlocal fut
                if kind == "thread":
                    fut = dcp.async_save(sd, storage_writer=mk(path), process_group=async_pg)
                else:
                    fut = dcp.async_save(sd, storage_writer=mk(path),
                                         async_checkpointer_type=AsyncCheckpointerType.PROCESS)

            try:
                blocked = timed(start)
                total = blocked + timed(lambda: fut.result())
                res.setdefault("async", {})[f"{name} ({kind})"] = {"blocked": blocked, "total": total}
            except Exception as e:  # recorded, not fatal
                res.setdefault("async", {})[f"{name} ({kind})"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"gib": n * TENSOR_MIB / 1024, "ranks": world, "tensors": n, "results": res}, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir under $TMPDIR)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dcp_bench_", dir=args.dir)
    args.dir = tmp
    out = os.path.join(tmp, "result.json")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(run, args=(args.ranks, port, args, out), nprocs=args.ranks)
        with open(out) as f:
            r = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    gib = r["gib"]
    print(f"DCP, {r['ranks']} ranks (gloo, CPU), {gib:.2f} GiB in {r['tensors']} DTensors, best of {args.rounds}")
    for name, v in r["results"].items():
        if name in ("incremental", "async"):
            continue
        if "error" in v and "save" not in v:
            print(f"  {name:26s} failed: {v['error']}")
            continue
        save = f"save {v['save']:7.3f} s ({gib / v['save']:5.2f} GiB/s)" if v.get("save", float("inf")) < 1e9 else \
            "save      -"
        load = f"load {v['load']:7.3f} s ({gib / v['load']:5.2f} GiB/s)" if "load" in v else "load      -"
        print(f"  {name:26s} {save}   {load}"
              f"{'' if v.get('ok', True) else '  WRONG DATA'}{'  ' + v['error'] if 'error' in v else ''}")
    ts = r["results"].get("tensorsafe", {})
    inc = r["results"].get("incremental")
    if inc and "save" in ts:
        print(f"  incremental save, {inc['changed']} of {r['tensors']} tensors changed: {inc['save']:.3f} s, "
              f"{ts['save'] / inc['save']:.1f}x faster than the full save")
    for name, a in r["results"].get("async", {}).items():
        if "error" in a:
            print(f"  async_save {name:22s} failed: {a['error']}")
        else:
            print(f"  async_save {name:22s} blocked {a['blocked']:.3f} s, done after {a['total']:.3f} s")
    for peer in ("FileSystem", "HuggingFace"):
        p = r["results"].get(peer, {})
        if "save" in p and "save" in ts and "load" in p:
            print(f"  tensorsafe vs {peer:12s} save {p['save'] / ts['save']:.2f}x   load {p['load'] / ts['load']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
