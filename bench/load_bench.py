"""tensorsafe.load against its peers and the disk's ceiling (docs/LOAD.md).

2 GiB (--gib) as (a) 64 tensors and (b) 20,000 small ones, in three states:
warm (page cache full), evicted (fdatasync + posix_fadvise(DONTNEED) on
that file only, checked with mincore), and, with --idle, evicted then 40 s
of idle (the VM hands free memory back to its host; first touches get
slow). Each load runs in a fresh process and touches every page of what it
loaded; the parent prints GB/s (10^9) and CPU seconds (user + system of the
loading process) per method, and ratios to the ceilings measured in the
same run by bench/load_ceiling.c (compiled here with cc):

  c_prefault  O_DIRECT, 4 MiB, 8 in flight, into a pre-faulted buffer: the
              ceiling for loads into existing buffers (ts_into, and
              ts_into_noverify: the same without verification)
  c_fresh     the same into fresh memory faulted by a helper thread just
              ahead of the reads, in 2 MiB pages (c_fresh) or 4 KiB pages
  c_fresh_4k  (c_fresh_4k): the faster is the ceiling for fresh memory
              (ts_load)
  memcpy      the warm ceiling, measured in each case's rounds

    python bench/load_bench.py [--gib 2] [--cases a,b] [--idle] [--rounds 1]
                               [--methods ts_load,...] [--dir DIR] [--json OUT] [--plot OUT.png]
    python bench/load_bench.py --replot RUN.json... --plot OUT.png

The peers, each on the same tensors: safetensors' load_file (mapped, and
backend="pread": its materialised load), torch.load(mmap=True), numpy.fromfile,
runai-model-streamer's SafetensorsStreamer (tensors it owns) and zTensor's
numpy load_file (zero-copy views, and copy=True); the last two are installed
with --no-deps by scripts/install-deps.sh (requirements-streaming.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ["ts_load", "ts_load_noverify", "ts_load_4k", "ts_load_thp", "ts_into", "ts_into_noverify", "ts_mapped",
           "ts_pread", "st_load", "st_pread", "torch_mmap", "np_fromfile", "runai", "zt_mapped", "zt_copy", "c_prefault",
           "c_fresh", "c_fresh_4k"]
# Methods that read the .safetensors copy (the rest read the .tsafe one).
SAFETENSORS_METHODS = ("st_load", "st_pread", "runai", "zt_mapped", "zt_copy")


def cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def touch(tensors):
    """Reads one byte of every 4 KiB page of every tensor (faults mapped pages
    in), in C (ts_touch in load_ceiling.c, through ctypes): about 1 us a
    tensor, where a NumPy stride sum per tensor costs 20 us and would
    weigh on 20,000 tensors more than the load."""
    import ctypes

    import numpy as np
    import torch

    lib = ctypes.CDLL(os.environ["LOAD_BENCH_TOUCH_LIB"])
    fn = lib.ts_touch
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_uint64], ctypes.c_uint64
    s = 0
    for t in tensors.values():
        if isinstance(t, torch.Tensor):
            s += fn(t.data_ptr(), t.nbytes)
        else:
            a = np.asarray(t)
            s += fn(a.__array_interface__["data"][0], a.nbytes)
    return s


def child(method, path, prime="no"):
    """Runs in a fresh process: one load, printed as JSON. With ``prime``,
    memory of the file's size is faulted in and freed just before the clock
    starts (run_one says why)."""
    import numpy as np
    import torch

    import tensorsafe
    from tensorsafe._arrays import torch_dtype
    from tensorsafe.torch import load_file

    into = None
    if method in ("ts_into", "ts_into_noverify"):
        # A model's parameters, allocated and faulted before the clock starts.
        into = {}
        with tensorsafe.open(path) as r:
            for name in r.names():
                i = r.info(name)
                into[name] = torch.empty(tuple(i["shape"]), dtype=torch_dtype(i["dtype"]))
        for t in into.values():
            t.zero_()
    if prime == "prime":
        np.ones(os.path.getsize(path), np.uint8)  # faulted in, then freed at once
    c0, t0 = cpu_now(), time.perf_counter()
    rep = {}
    if method == "ts_load":
        out, rep = tensorsafe.load(path, return_report=True)
    elif method == "ts_load_noverify":
        out, rep = tensorsafe.load(path, verify=False, return_report=True)
    elif method in ("ts_load_4k", "ts_load_thp"):  # the arena's pages, either way, whatever the default
        out, rep = tensorsafe.load(path, huge_pages=method == "ts_load_thp", return_report=True)
    elif method == "ts_into":
        out = tensorsafe.load(path, into=into)
    elif method == "ts_into_noverify":  # the copy alone: what verification costs into buffers
        out = tensorsafe.load(path, into=into, verify=False)
    elif method == "ts_mapped":
        out = load_file(path)
    elif method == "ts_pread":
        out = load_file(path, backend="pread")
    elif method == "st_load":
        import safetensors.torch

        out = safetensors.torch.load_file(path)
    elif method == "st_pread":
        import safetensors.torch

        out = safetensors.torch.load_file(path, backend="pread")
    elif method == "runai":
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as streamer:
            streamer.stream_files([path])  # owned=True: tensors of their own
            out = dict(streamer.get_tensors())
    elif method in ("zt_mapped", "zt_copy"):
        import ztensor.numpy

        out = ztensor.numpy.load_file(path, copy=method == "zt_copy")
    elif method == "torch_mmap":
        out = torch.load(path, mmap=True, weights_only=True)
    elif method == "np_fromfile":
        out = {"all": np.fromfile(path, dtype=np.uint8)}
    else:
        raise SystemExit(f"unknown method {method}")
    touch(out)
    t = time.perf_counter() - t0
    print(json.dumps({"seconds": t, "cpu": cpu_now() - c0, **({"pages": rep["pages"]} if "pages" in rep else {})}))


def make_files(d, gib, case):
    """The same tensors as .tsafe, .safetensors and torch.save .pt."""
    import torch

    from tensorsafe.torch import save_file

    total = int(gib * (1 << 30))
    count = 64 if case == "a" else 20000
    per = total // count // 2 * 2
    paths = {ext: os.path.join(d, f"{case}.{ext}") for ext in ("tsafe", "safetensors", "pt")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    g = torch.Generator().manual_seed(27)
    tensors = {f"layer.{i}.weight": torch.randint(-30000, 30000, (per // 2,), generator=g, dtype=torch.int16)
               .view(torch.float16) for i in range(count)}
    save_file(tensors, paths["tsafe"])
    import safetensors.torch

    safetensors.torch.save_file(tensors, paths["safetensors"])
    torch.save(tensors, paths["pt"])
    for p in paths.values():
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return paths


def ceiling_binary(d):
    exe = os.path.join(d, "load_ceiling")
    src = os.path.join(HERE, "load_ceiling.c")
    subprocess.run(["cc", "-O2", "-pthread", "-o", exe, src], check=True)
    lib = os.path.join(d, "load_touch.so")
    subprocess.run(["cc", "-O2", "-pthread", "-shared", "-fPIC", "-o", lib, src], check=True)
    os.environ["LOAD_BENCH_TOUCH_LIB"] = lib
    return exe


def run_one(exe, method, paths, state, idle_s):
    src = "safetensors" if method in SAFETENSORS_METHODS else "pt" if method == "torch_mmap" else "tsafe"
    path = paths[src]
    if state == "warm":
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        resident = json.loads(subprocess.run([exe, "resident", path], capture_output=True, text=True).stdout)
    else:
        resident = json.loads(subprocess.run([exe, "evict", path], capture_output=True, text=True).stdout)
        if state == "idle":
            time.sleep(idle_s)
    # The VM hands memory freed by a process back to its host within
    # seconds, and faulting it in again costs several times a warm fault
    # (the same warm load measured 1.2 and 4.7 GB/s, after a mapped load or
    # after one that freed 2 GiB). So every warm and evicted run starts with
    # memory of the file's size faulted in and freed just before: by a
    # memcpy process for the C readers, which start ms later; inside the
    # Python process, after its imports, for the others. Until 2026-12-02
    # the memcpy process served both, and a Python load, 2-3 s of imports
    # later, found the memory handed back (2 MiB pages faulting at 0.3 GB/s
    # against 2 GB/s primed in process). A C reader primed in process
    # instead ran slower on this VM (c_fresh 2.0 s against 1.2), unexplained.
    # The idle state is that cost, on purpose.
    c_mode = {"c_prefault": "prefault", "c_fresh": "fresh", "c_fresh_4k": "fresh4k", "memcpy": "memcpy"}.get(method)
    if state != "idle" and c_mode:
        subprocess.run([exe, "memcpy", path], capture_output=True, check=True)
    if c_mode:
        out = subprocess.run([exe, c_mode, path], capture_output=True, text=True, check=True).stdout
    else:
        prime = ["prime"] if state != "idle" else []
        out = subprocess.run([sys.executable, __file__, "--child", method, path, *prime], capture_output=True,
                             text=True)
        if out.returncode:
            return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
        out = out.stdout
    r = json.loads(out.strip().splitlines()[-1])
    r["bytes"] = os.path.getsize(path)
    r["resident_before"] = resident["resident"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs="+", metavar="METHOD PATH [prime]")
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--cases", default="a,b")
    ap.add_argument("--states", default="warm,evicted")
    ap.add_argument("--idle", action="store_true", help="add the evicted + 40 s idle state")
    ap.add_argument("--idle-seconds", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--dir", default=None, help="on the disk to measure (not tmpfs)")
    ap.add_argument("--keep", action="store_true", help="keep the files for another run")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None, help="write a bar chart of GB/s and CPU s to this .png")
    ap.add_argument("--replot", nargs="+", default=None, metavar="JSON",
                    help="only draw --plot from the --json files of earlier runs")
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    if a.replot:
        results = {}
        for path in a.replot:
            with open(path) as f:
                results.update({tuple(k.split("|")): v for k, v in json.load(f).items()})
        return plot(results, a.plot or "load_bench.png")
    d = a.dir or tempfile.mkdtemp(prefix="tensorsafe_load_bench_", dir="/var/tmp")
    os.makedirs(d, exist_ok=True)
    states = a.states.split(",") + (["idle"] if a.idle else [])
    methods = a.methods.split(",")
    exe = ceiling_binary(d)
    results = {}
    try:
        for case in a.cases.split(","):
            paths = make_files(d, a.gib, case)
            for state in states:
                # Warm ratios are to a memcpy of the file's size measured in
                # the same rounds as the case, not in another case's: the
                # shared machine's pace drifts between the two.
                ms = methods + (["memcpy"] if state == "warm" and "memcpy" not in methods else [])
                # Rounds go through every method in turn, so that drift of
                # the shared machine falls on all of them alike.
                runs = {m: [] for m in ms}
                for _ in range(a.rounds):
                    for m in ms:
                        runs[m].append(run_one(exe, m, paths, state, a.idle_seconds))
                for m in ms:
                    ok = [r for r in runs[m] if "error" not in r]
                    if not ok:
                        results[(case, state, m)] = {"error": runs[m][0]["error"]}
                        print(f"{case} {state:8} {m:17} error: {runs[m][0]['error']}", flush=True)
                        continue
                    sec = statistics.median(r["seconds"] for r in ok)
                    cpu = statistics.median(r["cpu"] for r in ok)
                    gbs = ok[0]["bytes"] / sec / 1e9
                    results[(case, state, m)] = {"gbps": gbs, "cpu": cpu, "seconds": sec,
                                                 "resident_before": ok[0]["resident_before"]}
                    pages = "; ".join(r["pages"] for r in ok if "pages" in r)  # the arena's (auto: switched?)
                    if pages:
                        results[(case, state, m)]["pages"] = pages
                    print(f"{case} {state:8} {m:17} {gbs:6.2f} GB/s  cpu {cpu:6.2f} s  "
                          f"(resident before {ok[0]['resident_before']:.2f})" + (f"  pages {pages}" if pages else ""),
                          flush=True)
        report(results)
        if a.plot:
            plot(results, a.plot)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"|".join(k): v for k, v in results.items()}, f, indent=1)
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(d, ignore_errors=True)


def plot(results, out):
    """One panel per (case, state): GB/s per method (capped at 4x the
    fresh-memory ceiling, so that mapped loads of a warm cache, which read
    nothing, do not flatten the rest), CPU seconds beside each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(c, s) for c, s, _ in results}, key=lambda p: (p[0], ["warm", "evicted", "idle"].index(p[1])))
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.2 * len(panels)), squeeze=False)
    for ax, (case, state) in zip(axes[:, 0], panels):
        rows = [(m, r) for (c, s, m), r in results.items() if (c, s) == (case, state) and "gbps" in r]
        ceil = _fresh_ceiling(results, case, state)[1] or max(r["gbps"] for _, r in rows)
        cap = 4 * ceil
        names = [m for m, _ in rows]
        vals = [min(r["gbps"], cap) for _, r in rows]
        colors = ["tab:blue" if m.startswith("ts_") else "tab:gray" if m.startswith("c_") or m == "memcpy"
                  else "tab:orange" for m in names]
        bars = ax.barh(names, vals, color=colors)
        for b, (m, r) in zip(bars, rows):
            label = f"{r['gbps']:.2f} GB/s, {r['cpu']:.2f} s CPU" + (" (off scale)" if r["gbps"] > cap else "")
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2, " " + label, va="center", fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, cap * 1.35)
        count = "64 tensors" if case == "a" else "20,000 tensors"
        ax.set_title(f"({case}) {count}, {state}: GB/s (blue tensorsafe, orange peers, grey ceilings)", fontsize=9)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"plot: {out}")


def _fresh_ceiling(results, case, state):
    """(method, GB/s) of the faster fresh-memory ceiling measured, c_fresh
    (2 MiB pages) or c_fresh_4k; (None, None) when neither ran."""
    got = [(results[(case, state, m)]["gbps"], m) for m in ("c_fresh", "c_fresh_4k")
           if "gbps" in results.get((case, state, m), {})]
    if not got:
        return None, None
    gbps, m = max(got)
    return m, gbps


def report(results):
    print("\n| case | state | method | GB/s | CPU s | vs ceiling |")
    print("|---|---|---|---|---|---|")
    for (case, state, m), r in results.items():
        if "error" in r:
            print(f"| {case} | {state} | {m} | error | | |")
            continue
        if state == "warm":
            ceil_m, ceil = "memcpy", results.get((case, state, "memcpy"))
        elif m in ("ts_into", "ts_into_noverify"):
            ceil_m, ceil = "c_prefault", results.get((case, state, "c_prefault"))
        else:
            ceil_m = _fresh_ceiling(results, case, state)[0]
            ceil = results.get((case, state, ceil_m))
        if m == "ts_mapped":  # the mapped target is safetensors' mapped load
            ceil_m, ceil = "st_load", results.get((case, state, "st_load"))
        if m == "ts_pread":  # and the pread one its materialised load
            ceil_m, ceil = "st_pread", results.get((case, state, "st_pread"))
        ratio = f"{r['gbps'] / ceil['gbps']:.2f}x {ceil_m}" if ceil and "gbps" in ceil else ""
        print(f"| {case} | {state} | {m} | {r['gbps']:.2f} | {r['cpu']:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
