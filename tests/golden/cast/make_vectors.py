"""Writes vectors.json: what torch 2.13.0's Tensor.to() gives for casts
between f64, f32, f16 and bf16, the reference for tensorsafe's cast kernel
(tests/util/cast_test.cc; include/tensorsafe/cast.h). See README.md.

NaN outputs are written as one canonical pattern per dtype: torch's NaN bits
depend on its code path and the tensor's length (0x7FC0 or 0xFFFF for
f32 -> bf16, ...), so only NaN-ness is compared.

Run from the repository root: .venv/bin/python tests/golden/cast/make_vectors.py
"""
import json
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent / "vectors.json"
SEED = 20261202
CANON = {torch.float32: 0x7FC00000, torch.float16: 0x7E00, torch.bfloat16: 0x7FC0}
INT = {torch.float32: (torch.int32, np.uint32), torch.float16: (torch.int16, np.uint16),
       torch.bfloat16: (torch.int16, np.uint16), torch.float64: (torch.int64, np.uint64)}


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def to(t: torch.Tensor, dtype) -> bytes:
    out = t.to(dtype)
    ti, npi = INT[dtype]
    bits = out.view(ti).numpy().view(npi).copy()
    bits[torch.isnan(out).numpy()] = CANON[dtype]
    return bits.tobytes()


def f32_values(rng):
    u = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 1,
         0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000]
    specials = [65504.0, 65519.99, 65520.0, 65536.0, 6.1035156e-05, 6.097555e-05, 5.9604645e-08, 2.9802322e-08,
                2.9802326e-08, 8.940697e-08, 3.3895314e38, 3.3961776e38, 3.4028235e38]
    u += [int(np.float32(v).view(np.uint32)) for v in specials]
    u += [int(np.float32(-v).view(np.uint32)) for v in specials]
    # Ties and near-ties of both targets: low bits 0x8000 / 0x1000 (+-1).
    base = rng.integers(0, 2**32, size=512, dtype=np.uint64)
    for low, mask in ((0x8000, 0xFFFF), (0x1000, 0x1FFF)):
        for d in (-1, 0, 1):
            u += [(int(b) & ~mask & 0xFFFFFFFF) | (low + d) for b in base[:64]]
    u += [int(x) for x in rng.integers(0, 2**32, size=4096, dtype=np.uint64)]
    # Every f16 subnormal boundary region, as f32.
    u += [int(x) for x in rng.integers(0x33000000, 0x38800000, size=512, dtype=np.uint64)]
    return np.array(u, dtype=np.uint32)


def f64_values(rng):
    u = [0, 1 << 63, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0x7FF0000000000001,
         0xFFF8000000000001, 1, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF]
    vals = [1.0 + 2.0**-11 + 2.0**-40, 1.0 + 2.0**-8 + 2.0**-40, 1.0 + 2.0**-24, 1.0 + 2.0**-24 + 2.0**-50,
            65519.999999, 65520.0, 3.4028235677973366e38, 3.4028235677973366e38 * 1.0000001, 1e-40, 1e-46,
            1.401298464324817e-45, 7e-46, 5.960464477539063e-08]
    u += [int(np.float64(v).view(np.uint64)) for v in vals]
    u += [int(np.float64(-v).view(np.uint64)) for v in vals]
    # Values whose f32 rounding lands on an f16 or bf16 tie (double rounding).
    f = rng.standard_normal(256).astype(np.float32).view(np.uint32)
    for low in (0x8000, 0x1000):
        tie = (f & np.uint32(0xFFFF0000 if low == 0x8000 else 0xFFFFE000)) | np.uint32(low)
        d = tie.view(np.float32).astype(np.float64)
        u += [int(x) for x in (d.view(np.uint64) + np.uint64(1))]
        u += [int(x) for x in (d.view(np.uint64) - np.uint64(1))]
    u += [int(x) for x in rng.integers(0, 2**63, size=2048, dtype=np.uint64) * 2 + rng.integers(0, 2, size=2048)]
    u += [int(np.float64(x).view(np.uint64)) for x in rng.standard_normal(1024) * 10.0 ** rng.integers(-50, 50, 1024)]
    return np.array(u, dtype=np.uint64)


def main():
    rng = np.random.default_rng(SEED)
    doc = {"made_by": f"torch {torch.__version__}, numpy {np.__version__}; seed {SEED}"}
    all16 = np.arange(65536, dtype=np.uint16)
    h = torch.from_numpy(all16.view(np.int16).copy()).view(torch.float16)
    b = torch.from_numpy(all16.view(np.int16).copy()).view(torch.bfloat16)
    doc["all_f16"] = {"f32_fnv1a64": fnv1a64(to(h, torch.float32)), "bf16_fnv1a64": fnv1a64(to(h, torch.bfloat16))}
    doc["all_bf16"] = {"f32_fnv1a64": fnv1a64(to(b, torch.float32)), "f16_fnv1a64": fnv1a64(to(b, torch.float16))}
    f32 = f32_values(rng)
    t = torch.from_numpy(f32.view(np.int32).copy()).view(torch.float32)
    doc["f32"] = {"values": f32.tobytes().hex(), "f16": to(t, torch.float16).hex(), "bf16": to(t, torch.bfloat16).hex()}
    f64 = f64_values(rng)
    t = torch.from_numpy(f64.view(np.int64).copy()).view(torch.float64)
    doc["f64"] = {"values": f64.tobytes().hex(), "f32": to(t, torch.float32).hex(),
                  "f16": to(t, torch.float16).hex(), "bf16": to(t, torch.bfloat16).hex()}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}: {len(f32)} f32 and {len(f64)} f64 values")


if __name__ == "__main__":
    main()
