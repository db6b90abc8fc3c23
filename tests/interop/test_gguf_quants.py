"""GGUF block codecs and dtype casts against their references, live:

- tensorsafe.gguf.dequantize / read_gguf(dequantize=...) against
  gguf.quants.dequantize (gguf-py 0.19.0) over random blocks of every type it
  dequantises: f32 bit for bit (NaN payloads included); f16/bf16 equal to
  torch's rounding of gguf-py's f32 values (NaN compared as NaN: torch's NaN
  bits depend on its code path);
- tensorsafe.gguf.quantize against gguf.quants.quantize over random values
  (normal, wide-range, random bits, specials) of every type it quantises;
  blocks holding a NaN may differ only in the payload of their NaN scale;
- tensorsafe.cast against torch's Tensor.to() over every f16/bf16 value and
  random f32/f64 bits;
- `tensorsafe convert --dtype` against gguf-py + torch.
"""
import warnings

import gguf
import ml_dtypes
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from gguf import quants

import tensorsafe
import tensorsafe.gguf as tg

DEQUANTIZE = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q3_K, QT.Q4_K,
              QT.Q5_K, QT.Q6_K, QT.IQ1_S, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S,
              QT.IQ4_NL, QT.IQ4_XS, QT.TQ1_0, QT.TQ2_0, QT.MXFP4, QT.NVFP4]
QUANTIZE = [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.TQ1_0, QT.TQ2_0, QT.MXFP4]
# Byte offset of the f16 scales of each quantised block type (numpy's NaN
# reductions leave the payload of a NaN scale to its SIMD path).
SCALES = {QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0], QT.TQ1_0: [52],
          QT.TQ2_0: [64]}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def gguf_py_dequantize(blocks, qt):
    if qt == QT.F32:
        return blocks.view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(quants.dequantize(blocks, qt), dtype=np.float32)


def torch_round(f32, dtype):
    return torch.from_numpy(np.array(f32, dtype=np.float32)).to(TORCH[dtype])


def assert_same_values(got, want_torch):
    """Equal bits where torch's value is not NaN, NaN where it is."""
    w = want_torch.view(torch.int16).numpy().view(np.uint16).reshape(-1)
    g = np.asarray(got).reshape(-1).view(np.uint16)
    nan = torch.isnan(want_torch).numpy().reshape(-1)
    gnan = np.isnan(np.asarray(got, dtype=np.float32).reshape(-1))
    assert np.array_equal(nan, gnan)
    bad = np.nonzero((g != w) & ~nan)[0]
    assert bad.size == 0, f"{bad.size} values differ, first at {bad[:5]}: got {g[bad[:5]]}, torch {w[bad[:5]]}"


@pytest.mark.parametrize("qt", DEQUANTIZE, ids=lambda q: q.name)
def test_dequantize_matches_gguf_py(qt, rng):
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    rows = int(rng.integers(1, 6))
    per_row = int(rng.integers(1, 40 if be > 1 else 400))
    blocks = rng.integers(0, 256, size=(rows, per_row * bb), dtype=np.uint8)
    want = gguf_py_dequantize(blocks, qt)
    got = tg.dequantize(blocks, qt)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), qt.name
    for dt in ("f16", "bf16"):
        assert_same_values(tg.dequantize(blocks, qt.name, dtype=dt, threads=2), torch_round(want, dt))


def quantize_inputs(rng, be):
    rows = 16
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, 65504, 65520, 2.0**-24,
                   0.5, 1.5, 2.5], np.float32)
    special = rng.standard_normal((rows, be)).astype(np.float32)
    m = rng.random(special.shape) < 0.05
    special[m] = rng.choice(sp, size=int(m.sum()))
    return {
        "normal": rng.standard_normal((rows, be)).astype(np.float32),
        "wide": (rng.standard_normal((rows, be)) * 10.0 ** rng.integers(-40, 38, size=(rows, 1))).astype(np.float32),
        "bits": rng.integers(0, 2**32, size=(rows, be), dtype=np.uint32).view(np.float32),
        "special": special,
        "f64": rng.standard_normal((rows, be)) * 1e3,
    }


@pytest.mark.parametrize("qt", QUANTIZE, ids=lambda q: q.name)
def test_quantize_matches_gguf_py(qt, rng):
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    be = 32 if be == 1 else be
    for case, x in quantize_inputs(rng, be).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.asarray(quants.quantize(x, qt))
        got = tg.quantize(x, qt)
        w = want.reshape(len(x), -1).view(np.uint8)
        g = np.asarray(got).reshape(len(x), -1).view(np.uint8)
        assert g.shape == w.shape, case
        diff = g != w
        nan_rows = np.isnan(np.asarray(x, np.float32)).any(axis=1)
        for off in SCALES.get(qt, []):
            scale_w = w[:, off:off + 2].copy().view(np.float16)[:, 0]
            scale_g = g[:, off:off + 2].copy().view(np.float16)[:, 0]
            both_nan = nan_rows & np.isnan(scale_w) & np.isnan(scale_g)
            diff[both_nan, off:off + 2] = False
        bad = np.nonzero(diff.any(axis=1))[0]
        assert bad.size == 0, f"{qt.name} {case}: rows {bad[:5]} differ"


def test_read_gguf_dequantizes_like_gguf_py(rng, tmp_path):
    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(path, "llama")
    expected = {}
    for i, qt in enumerate(DEQUANTIZE):
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(2, 2 * bb), dtype=np.uint8)
        if qt in (QT.F32, QT.F16, QT.BF16):
            raw = rng.standard_normal((2, 8)).astype({QT.F32: np.float32, QT.F16: np.float16,
                                                      QT.BF16: ml_dtypes.bfloat16}[qt])
            w.add_tensor(f"t{i}", raw.view(np.uint8) if qt == QT.BF16 else raw,
                         raw_dtype=qt if qt == QT.BF16 else None)
        else:
            w.add_tensor(f"t{i}", raw, raw_dtype=qt)
    w.add_tensor("ints", np.arange(6, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        if t.tensor_type == QT.I32:
            continue
        expected[t.name] = gguf_py_dequantize(np.asarray(t.data), t.tensor_type)
    for dt in ("f32", "f16", "bf16"):
        tensors, meta = tensorsafe.read_gguf(path, dequantize=dt)
        assert meta["general.architecture"] == "llama"
        assert tensors["ints"].dtype == np.int32
        for name, want in expected.items():
            got = tensors[name]
            assert got.shape == want.shape, name
            if dt == "f32":
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
            else:
                assert_same_values(got, torch_round(want, dt))
    raw, _ = tensorsafe.read_gguf(path)
    assert raw["t3"].dtype == np.uint8  # as stored without dequantize


def test_convert_dtype_matches_gguf_py_and_torch(rng, ts, tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(path, "llama")
    for qt in (QT.Q4_K, QT.Q6_K, QT.IQ4_XS, QT.Q8_0):
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        w.add_tensor(qt.name, rng.integers(0, 256, size=(3, 2 * bb), dtype=np.uint8), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from safetensors.numpy import load_file
    ts("convert", "-q", "--dtype", "bf16", "--stringify-metadata", path, tmp_path / "out.safetensors")
    out = load_file(tmp_path / "out.safetensors")
    for t in gguf.GGUFReader(path).tensors:
        want = torch_round(gguf_py_dequantize(np.asarray(t.data), t.tensor_type), "bf16")
        assert out[t.name].shape == tuple(want.shape)
        assert_same_values(out[t.name], want)
    # The Python API gives the same bytes.
    tensorsafe.convert(path, tmp_path / "py.safetensors", dtype="bf16", stringify_metadata=True)
    assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "out.safetensors").read_bytes()


# ---- casts ----

def torch_bits(t):
    return t.view({torch.float32: torch.int32, torch.float64: torch.int64}.get(t.dtype, torch.int16)).numpy()


@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_cast_every_16_bit_value_as_torch(src):
    bits = np.arange(65536, dtype=np.uint16)
    arr = bits.view(np.float16 if src == "f16" else ml_dtypes.bfloat16)
    t = torch.from_numpy(bits.view(np.int16).copy()).view(TORCH[src])
    for dst in ("f32", "f16", "bf16"):
        if dst == src:
            continue
        got = tensorsafe.cast(arr, dst)
        want = t.to(torch.float32 if dst == "f32" else TORCH[dst])
        nan = torch.isnan(want).numpy()
        g = got.view(np.uint32 if dst == "f32" else np.uint16)
        w = torch_bits(want).view(np.uint32 if dst == "f32" else np.uint16)
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
        assert np.array_equal(g[~nan], w[~nan]), f"{src} -> {dst}"


@pytest.mark.parametrize("src", ["f32", "f64"])
def test_cast_random_bits_as_torch(src, rng):
    n = 1 << 20
    if src == "f32":
        arr = rng.integers(0, 2**32, size=n, dtype=np.uint32).view(np.float32)
    else:
        arr = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False).view(np.float64)
        arr[: n // 2] = (rng.standard_normal(n // 2) * 10.0 ** rng.integers(-45, 39, n // 2))  # in f32's range
    t = torch.from_numpy(arr.copy())
    for dst in ("f32", "f16", "bf16"):
        if dst == src:
            continue
        got = tensorsafe.cast(arr, dst, threads=2)
        want = t.to(torch.float32 if dst == "f32" else TORCH[dst])
        w = torch_bits(want).view(np.uint32 if dst == "f32" else np.uint16)
        g = got.view(np.uint32 if dst == "f32" else np.uint16)
        nan = torch.isnan(want).numpy()
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
        bad = np.nonzero((g != w) & ~nan)[0]
        assert bad.size == 0, f"{src} -> {dst}: {bad.size} differ, e.g. input {arr[bad[:3]]!r}"


def test_cast_refuses_other_dtypes():
    with pytest.raises(tensorsafe.UnsupportedError, match="cannot convert i32 to f16"):
        tensorsafe.cast(np.arange(3, dtype=np.int32), "f16")
    with pytest.raises(tensorsafe.InvalidArgumentError, match="expected f32, f16 or bf16"):
        tensorsafe.cast(np.zeros(3, np.float32), "f64")
    same = tensorsafe.cast(np.array([1.5], np.float32), "float32")
    assert same.dtype == np.float32 and same[0] == 1.5
