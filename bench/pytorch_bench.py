#!/usr/bin/env python3
"""Times reading and converting a PyTorch checkpoint with tensorsafe against
torch 2.13.0 and safetensors, in the same run.

    .venv/bin/python bench/pytorch_bench.py [--size-mib 1024] [--rounds 3] [--legacy]

The checkpoint is a model-like state dict written by torch.save (zip archive;
--legacy for the pre-1.6 stream): a few large matrices, many small vectors,
tied embeddings (two names, one storage), f32 and bf16, SIZE MiB in all. Its
pages are warm in the page cache before anything is timed, and each round
times every contender once (so machine load hits them alike); the best time
of each is reported, with ratios. Each timing starts after os.sync(), so no
contender pays for the write-back of another's output.

Read (a): the state dict as torch tensors.
  - torch.load(weights_only=True)          the baseline: reads every byte into fresh memory
  - torch.load(weights_only=True, mmap=True)
  - tensorsafe.torch.load_file             zero-copy views of the mapping (pages read when touched)
  - tensorsafe.torch.load_file + clone     materialised: every tensor copied into fresh memory
Convert (b): the checkpoint to model.safetensors.
  - torch.load + safetensors.torch.save_file (the baseline; no fsync), and
    safetensors' convert.py's steps (shared names removed first)
  - tensorsafe.convert, sync=False (no fsync, as the baseline) and sync=True
"""
import argparse
import gc
import os
import sys
import tempfile
import time
from collections import OrderedDict

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop"))
import pytorch_reference as ref  # noqa: E402

import tensorsafe  # noqa: E402
import tensorsafe.torch as tst  # noqa: E402


def make_state(size_mib):
    """~size_mib MiB: 8 square matrices take half, an embedding tied to the
    head a quarter, the rest bf16 matrices and small f32 vectors."""
    g = torch.Generator().manual_seed(0)
    total = size_mib << 20
    sd = OrderedDict()
    side = int(((total // 2) // 8 // 4) ** 0.5)
    for i in range(8):
        sd[f"layers.{i}.mlp.weight"] = torch.randn(side, side, generator=g)
        for j in range(16):
            sd[f"layers.{i}.norm{j}.bias"] = torch.randn(side, generator=g)
    emb = torch.randn((total // 4) // 4 // 1024, 1024, generator=g)
    sd["embed.weight"] = emb
    sd["lm_head.weight"] = emb
    rest = total - sum(t.numel() * t.element_size() for k, t in sd.items() if k != "lm_head.weight")
    rows = max(1, rest // 2 // 1024 // 4)
    for i in range(4):
        sd[f"proj.{i}.weight"] = torch.randn(rows, 1024, generator=g).to(torch.bfloat16)
    return sd


def timed(fn):
    gc.collect()
    # Dirty pages of the previous contender's 1 GiB write would throttle the
    # next one's: every contender starts with them written back.
    os.sync()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--legacy", action="store_true", help="the legacy stream instead of the zip archive")
    ap.add_argument("--dir", default=None, help="where to write the files (default: a temp dir)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        src = os.path.join(d, "pytorch_model.bin")
        sd = make_state(args.size_mib)
        torch.save(sd, src, _use_new_zipfile_serialization=not args.legacy)
        del sd
        size = os.path.getsize(src)
        warm(src)
        print(f"file: {src}: {size / 2**20:.0f} MiB, torch {torch.__version__}, "
              f"{'legacy stream' if args.legacy else 'zip archive'}")

        # The results agree before anything is timed.
        want = torch.load(src, weights_only=True)
        got = tst.load_file(src)
        assert list(got) == list(want), "names differ"
        for k in want:
            assert torch.equal(got[k], want[k]), k
        del got, want

        reads = {
            "torch.load(weights_only=True)": lambda: torch.load(src, weights_only=True),
            "torch.load(weights_only=True, mmap=True)": lambda: torch.load(src, weights_only=True, mmap=True),
            "tensorsafe.torch.load_file (zero-copy)": lambda: tst.load_file(src),
            "tensorsafe.torch.load_file + clone (materialised)":
                lambda: {k: v.clone() for k, v in tst.load_file(src).items()},
        }
        if args.legacy:
            del reads["torch.load(weights_only=True, mmap=True)"]  # zip archives only
        sf_ref = os.path.join(d, "ref.safetensors")
        sf_ours = os.path.join(d, "model.safetensors")

        def torch_then_save_file():
            state = torch.load(src, weights_only=True)
            # save_file refuses shared tensors: drop the tied head as a user would.
            state = {k: v for k, v in state.items() if k != "lm_head.weight"}
            save_file(state, sf_ref, metadata={"format": "pt"})

        converts = {
            "torch.load + safetensors save_file": torch_then_save_file,
            "convert.py's steps (torch.load, dedup, save_file)": lambda: ref.convert_reference(src, sf_ref),
            "tensorsafe.convert (no fsync)": lambda: tensorsafe.convert(src, sf_ours, sync=False),
            "tensorsafe.convert (fsync)": lambda: tensorsafe.convert(src, sf_ours, sync=True),
        }
        best = {}
        for r in range(args.rounds):
            for name, fn in list(reads.items()) + list(converts.items()):
                t, out = timed(fn)
                del out
                best[name] = min(best.get(name, float("inf")), t)
        # The conversion gives what convert.py gives.
        ref.convert_reference(src, sf_ref)
        tensorsafe.convert(src, sf_ours)
        a = ref.safetensors_parts(open(sf_ours, "rb").read())
        b = ref.safetensors_parts(open(sf_ref, "rb").read())
        assert (a[0], a[1], a[3]) == (b[0], b[1], b[3]), "converted files differ"

    gib = size / 2**30
    print(f"\n{'operation':<52} {'best ms':>10} {'GiB/s':>8}")
    for name, t in best.items():
        print(f"{name:<52} {t * 1000:10.1f} {gib / t:8.2f}")
    base_read = best["torch.load(weights_only=True)"]
    base_conv = best["torch.load + safetensors save_file"]
    print("\nratios (baseline time / ours, best of", args.rounds, "rounds):")
    print(f"  (a) read, zero-copy:   {base_read / best['tensorsafe.torch.load_file (zero-copy)']:8.1f}x  (target >= 2x)")
    print(f"  (a) read, materialised: {base_read / best['tensorsafe.torch.load_file + clone (materialised)']:7.2f}x")
    print(f"  (b) convert, no fsync: {base_conv / best['tensorsafe.convert (no fsync)']:8.2f}x  (target >= 3x)")
    print(f"  (b) convert, fsync:    {base_conv / best['tensorsafe.convert (fsync)']:8.2f}x")
    print(f"  (b) against convert.py's steps, no fsync: "
          f"{best[list(converts)[1]] / best['tensorsafe.convert (no fsync)']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
