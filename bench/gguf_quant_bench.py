#!/usr/bin/env python3
"""Times tensorsafe's GGUF dequantisation against gguf-py's on the same
blocks, in the same run, and checks the results are bit-identical.

    .venv/bin/python bench/gguf_quant_bench.py [--gib 1] [--type Q4_K] [--reps 3] [--threads 0]

The tensor is `--gib` GiB once dequantised to f32 (1 GiB: 2^28 elements,
[16384, 16384]; its Q4_K blocks are 144 MiB). Blocks are random bytes with
f16 scales drawn from a model-like range (no NaN scales). Timed, from
Python, each the best of --reps:
- gguf-py 0.19.0: gguf.quants.dequantize(blocks, type), numpy, one thread;
- tensorsafe.gguf.dequantize(blocks, type) to f32, with --threads threads
  (0: one per core, at most 8) and with 1;
- the same to f16 and bf16 (gguf-py has no such output; the reference
  there would be gguf-py + torch's .to(), also timed).
Each result includes allocating and first touching the output, as both
libraries return a new array. Ratios are gguf-py time / tensorsafe time.
The machine's other load hits both sides: the two are timed alternately.
"""
import argparse
import os
import time

import numpy as np

import gguf
from gguf import quants

import tensorsafe.gguf as tg


def blocks_for(qtype, elements, rng):
    be, bb = gguf.GGML_QUANT_SIZES[qtype]
    n = elements // be
    raw = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
    # f16 scales in [2^-14, 2^-6): what trained weights carry; never NaN/inf.
    scales = {gguf.GGMLQuantizationType.Q4_K: [0, 2], gguf.GGMLQuantizationType.Q5_K: [0, 2],
              gguf.GGMLQuantizationType.Q8_0: [0], gguf.GGMLQuantizationType.Q4_0: [0],
              gguf.GGMLQuantizationType.Q6_K: [208], gguf.GGMLQuantizationType.Q2_K: [80, 82],
              gguf.GGMLQuantizationType.Q3_K: [108]}.get(qtype, [])
    for off in scales:
        raw[:, off:off + 2] = (rng.integers(0x0400, 0x1800, size=n, dtype=np.uint16)).view(np.uint8).reshape(n, 2)
    rows = 16384 if elements % (16384 * be) == 0 else 1
    return raw.reshape(rows, -1)


def best(fn, reps):
    times, out = [], None
    for _ in range(reps):
        out = None
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of the f32 result in GiB")
    ap.add_argument("--type", default="Q4_K")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    qt = gguf.GGMLQuantizationType[args.type]
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    elements = int(args.gib * (1 << 30)) // 4 // (16384 * be) * (16384 * be)
    rng = np.random.default_rng(1)
    raw = blocks_for(qt, elements, rng)
    print(f"{args.type}: {elements} elements ({elements * 4 / 2**30:.2f} GiB as f32, "
          f"{raw.nbytes / 2**20:.0f} MiB of blocks), best of {args.reps}, cpus {os.cpu_count()}")

    ref_t, ours_t, ours1_t = [], [], []
    ref = ours = None
    for _ in range(args.reps):  # alternated, so load spikes hit both
        t0 = time.perf_counter()
        ref = quants.dequantize(raw, qt)
        ref_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ours = tg.dequantize(raw, qt, threads=args.threads)
        ours_t.append(time.perf_counter() - t0)
        del ours
        t0 = time.perf_counter()
        ours = tg.dequantize(raw, qt, threads=1)
        ours1_t.append(time.perf_counter() - t0)
    same = np.array_equal(np.asarray(ours).view(np.uint32), np.asarray(ref).view(np.uint32))
    del ours
    r, o, o1 = min(ref_t), min(ours_t), min(ours1_t)
    print(f"gguf-py dequantize -> f32         {r:8.3f} s  {elements * 4 / r / 1e9:6.2f} GB/s")
    print(f"tensorsafe -> f32 (threads={args.threads or 'auto'})  {o:8.3f} s  {elements * 4 / o / 1e9:6.2f} GB/s"
          f"  ratio {r / o:6.1f}x")
    print(f"tensorsafe -> f32 (1 thread)       {o1:8.3f} s  {elements * 4 / o1 / 1e9:6.2f} GB/s  ratio {r / o1:6.1f}x")
    print(f"bit-identical f32: {same}")

    import torch
    ref_t16 = float("inf")
    for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        t0 = time.perf_counter()
        ref16 = torch.from_numpy(np.asarray(ref)).to(tdt)
        t_torch = time.perf_counter() - t0 + r
        del ref16
        o16, _ = best(lambda: tg.dequantize(raw, qt, dtype=dt, threads=args.threads), args.reps)
        print(f"tensorsafe -> {dt:4} vs gguf-py + torch .to(): {o16:8.3f} s vs {t_torch:8.3f} s  ratio "
              f"{t_torch / o16:6.1f}x")
    del ref
    if not same:
        raise SystemExit("results differ")


if __name__ == "__main__":
    main()
