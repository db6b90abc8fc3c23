"""Writes vectors.json: golden vectors for tensorsafe's GGUF block codecs
(tests/formats/gguf_quants_golden_test.cc), made by the reference
implementation, gguf-py (the `gguf` package pinned in requirements-dev.txt),
with torch for the f16/bf16 rounding. See README.md.

Run from the repository root: .venv/bin/python tests/golden/gguf/quants/make_vectors.py
"""
import importlib.metadata
import json
import warnings
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import quants

OUT = Path(__file__).resolve().parent / "vectors.json"
SEED = 20261201

DEQUANTIZE = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q3_K, QT.Q4_K,
              QT.Q5_K, QT.Q6_K, QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S,
              QT.IQ4_NL, QT.IQ4_XS, QT.TQ1_0, QT.TQ2_0, QT.MXFP4, QT.NVFP4]
QUANTIZE = [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.TQ1_0, QT.TQ2_0, QT.MXFP4]


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def rounded(f32: np.ndarray, dtype) -> bytes:
    """torch's Tensor.to() of the f32 values, NaNs as one canonical pattern
    (torch's NaN bits depend on its code path; the C++ test canonicalises
    its own the same way)."""
    t = torch.from_numpy(f32.copy()).to(dtype)
    bits = t.view(torch.int16).numpy().view(np.uint16).copy()
    bits[np.isnan(f32)] = 0x7E00 if dtype == torch.float16 else 0x7FC0
    return bits.tobytes()


def dequantize_vectors(rng):
    out = []
    for qt in DEQUANTIZE:
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        n = 256 if be == 1 else 64 if be < 256 else 24
        blocks = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
        blocks[0] = 0xFF  # NaN scales (and NaN values for the plain types)
        blocks[1] = 0x00
        if qt == QT.F32:
            f32 = blocks.view(np.float32).reshape(-1)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f32 = np.asarray(quants.dequantize(blocks, qt), dtype=np.float32).reshape(-1)
        out.append({
            "type": qt.name,
            "blocks": blocks.tobytes().hex(),
            "elements": int(f32.size),
            "f32_fnv1a64": fnv1a64(f32.tobytes()),
            "f16_fnv1a64": fnv1a64(rounded(f32, torch.float16)),
            "bf16_fnv1a64": fnv1a64(rounded(f32, torch.bfloat16)),
            "first_f32_bits": [f"{int(v):08x}" for v in f32.view(np.uint32)[:8]],
        })
    return out


def special_values(rng, n):
    sp = [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, 65504.0,
          65520.0, 65519.996, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0 + 2**-8,
          1.0 + 2**-11]
    sp += [np.float32(2.0 ** k) * np.float32(1 - 2**-24) for k in range(-10, 12)]  # just below powers of two
    x = rng.standard_normal(n).astype(np.float32)
    idx = rng.random(n) < 0.25
    x[idx] = rng.choice(np.array(sp, dtype=np.float32), size=int(idx.sum()))
    return x


def quantize_vectors(rng):
    out = []
    for qt in QUANTIZE:
        be, _ = gguf.GGML_QUANT_SIZES[qt]
        be = 32 if be == 1 else be
        rows = 8 if be == 32 else 3
        cases = {
            "normal": rng.standard_normal((rows, be)).astype(np.float32),
            "wide": (rng.standard_normal((rows, be)) * 10.0 ** rng.integers(-40, 38, size=(rows, 1))).astype(np.float32),
            "special": special_values(rng, rows * be).reshape(rows, be),
            "constant": np.repeat(np.array([0.0, 1.0, -3.0, 1e30, -1e-30, np.inf, -np.inf, 7.0],
                                           np.float32)[:, None], be, axis=1),
        }
        for name, x in cases.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = np.asarray(quants.quantize(x, qt))
            out.append({"type": qt.name, "case": name, "values": x.tobytes().hex(), "bytes": q.tobytes().hex()})
    return out


def main():
    rng = np.random.default_rng(SEED)
    doc = {
        "made_by": f"gguf {importlib.metadata.version('gguf')}, numpy {np.__version__}, "
                   f"torch {torch.__version__}; seed {SEED}",
        "dequantize": dequantize_vectors(rng),
        "quantize": quantize_vectors(rng),
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
