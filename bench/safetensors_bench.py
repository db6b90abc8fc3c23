#!/usr/bin/env python3
"""Times tensorsafe's safetensors header parse against the reference crate
on the same many-tensor file, in the same run.

    .venv/bin/python bench/safetensors_bench.py --binary build/bin/safetensors_bench \
        [--tensors 100000] [--reps 15]

The C++ driver writes the file and times ParseHeader (best of N, warm).
Here the reference is timed as `safe_open(path, "np")` + `keys()`: the Rust
crate's header parse and validation, plus opening/mapping the file and
building the sorted key list; safe_open alone (no key list) is printed too. Both sides are
timed alternately in rounds, so machine load hits them alike; the ratio of
the best times is printed.
"""
import argparse
import re
import subprocess
import sys
import time

from safetensors import __version__ as st_version
from safetensors import safe_open


def run_ours(binary, tensors, reps, path):
    out = subprocess.run([binary, "--tensors", str(tensors), "--reps", str(reps), "--file", path],
                         check=True, capture_output=True, text=True).stdout
    results = {}
    for line in out.splitlines():
        m = re.match(r"(\S+) (.*)", line)
        if m:
            results[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split())
    return results


def time_reference(path, reps, with_keys=True):
    ms, nkeys = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        with safe_open(path, framework="np") as f:
            if with_keys:
                nkeys = len(f.keys())
        ms.append((time.perf_counter() - t0) * 1000)
    return sorted(ms), nkeys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True, help="build/bin/safetensors_bench")
    ap.add_argument("--tensors", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--file", default="")
    args = ap.parse_args()
    path = args.file or f"/tmp/tensorsafe_bench_{args.tensors}.safetensors"

    ours_best, ref_best, ref_medians, our_medians, open_best, read_best = [], [], [], [], [], []
    info = None
    for _ in range(args.rounds):
        r = run_ours(args.binary, args.tensors, args.reps, path)
        info = r["file"]
        ours_best.append(float(r["tensorsafe_parse_header"]["best_ms"]))
        our_medians.append(float(r["tensorsafe_parse_header"]["median_ms"]))
        read_best.append(float(r["tensorsafe_read_file"]["best_ms"]))
        ms, nkeys = time_reference(path, args.reps)
        assert nkeys == args.tensors, nkeys
        ref_best.append(ms[0])
        ref_medians.append(ms[len(ms) // 2])
        open_best.append(time_reference(path, args.reps, with_keys=False)[0][0])
    ours, ref = min(ours_best), min(ref_best)
    print(f"file: {info['path']}: {info['tensors']} tensors, header {int(info['header_bytes']):,} bytes")
    print(f"tensorsafe ParseHeader            best {ours:8.2f} ms   median {min(our_medians):8.2f} ms")
    print(f"tensorsafe ReadFile (mmap+decode) best {min(read_best):8.2f} ms")
    print(f"safetensors {st_version} safe_open+keys best {ref:8.2f} ms   median {min(ref_medians):8.2f} ms")
    print(f"safetensors {st_version} safe_open only best {min(open_best):8.2f} ms   (no key list)")
    print(f"ratio (reference / tensorsafe, best): {ref / ours:.1f}x; "
          f"against safe_open alone {min(open_best) / ours:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
