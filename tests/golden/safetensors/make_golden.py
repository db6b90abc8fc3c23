#!/usr/bin/env python3
"""Writes the golden safetensors files of this folder with the reference
implementation (the `safetensors` package), and expected.json describing what
each holds, independently of our reader.

Run from the worktree root after
    python3 -m venv .venv && .venv/bin/pip install safetensors 'numpy<2.2'
as
    .venv/bin/python tests/golden/safetensors/make_golden.py

Deterministic for a given safetensors/numpy version (the seed is fixed); the
versions used are recorded in expected.json. Metadata is recorded in the order
the reference writer put it in the file: with several keys that order comes
from a Rust HashMap and is not stable between runs, so regenerate all files
together with expected.json.
"""
import json
import os
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec, serialize_file
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20240917
rng = np.random.default_rng(SEED)

# numpy dtype -> safetensors name: every dtype numpy itself can express.
NUMPY_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "int32": "I32", "uint32": "U32", "float32": "F32",
    "complex64": "C64", "float64": "F64", "int64": "I64", "uint64": "U64",
}
# Dtypes numpy lacks, written as raw bytes through TensorSpec: name ->
# (safetensors name, bits per element).
SPEC_DTYPES = {
    "bfloat16": ("BF16", 16), "float8_e4m3fn": ("F8_E4M3", 8),
    "float8_e5m2": ("F8_E5M2", 8), "float8_e8m0fnu": ("F8_E8M0", 8),
    "float8_e4m3fnuz": ("F8_E4M3FNUZ", 8), "float8_e5m2fnuz": ("F8_E5M2FNUZ", 8),
    "float4_e2m1fn_x2": ("F4", 4),
}
NAMES = ["w", "model.layers.0.weight", "", "quote\"d", "back\\slash", "tab\there",
         "ctrl\x01\x1f", "del\x7f", "ünïcödé", "emoji \U0001F600", "a/b", "Z", "a", "aa"]

expected = {
    "generator": "tests/golden/safetensors/make_golden.py",
    "safetensors_version": safetensors.__version__,
    "numpy_version": np.__version__,
    "seed": SEED,
    "files": {},
}


def random_array(dtype, shape):
    return np.ascontiguousarray(np.asarray(_random(dtype, shape), dtype=dtype).reshape(shape))


def _random(dtype, shape):
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype == "complex64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return rng.standard_normal(shape).astype(dtype)


def random_shape():
    rank = int(rng.integers(0, 4))
    return tuple(int(rng.integers(0, 5)) for _ in range(rank))


def file_metadata(path):
    """The metadata as ordered pairs, in file order, or None."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    m = header.get("__metadata__")
    return None if m is None else [[k, v] for k, v in m.items()]


def describe(name, dtype, shape, data):
    return {"name": name, "dtype": dtype, "shape": list(shape), "data_hex": bytes(data).hex()}


def write_numpy(fname, arrays, metadata=None):
    path = os.path.join(HERE, fname)
    save_file(arrays, path, metadata=metadata)
    tensors = [describe(k, NUMPY_DTYPES[v.dtype.name], v.shape, v.astype(v.dtype.newbyteorder("<")).tobytes())
               for k, v in arrays.items()]
    expected["files"][fname] = {"api": "safetensors.numpy.save_file",
                                "metadata": file_metadata(path), "tensors": tensors}


def write_spec(fname, specs, metadata=None):
    """specs: name -> (torch-style dtype, storage shape, raw bytes)."""
    path = os.path.join(HERE, fname)
    keep = []
    tensor_dict = {}
    tensors = []
    for name, (dtype, shape, raw) in specs.items():
        buf = np.frombuffer(raw, dtype=np.uint8).copy() if raw else np.zeros(1, np.uint8)
        keep.append(buf)
        spec = TensorSpec(dtype=dtype, shape=list(shape), data_ptr=buf.ctypes.data, data_len=len(raw))
        tensor_dict[name] = spec
        tensors.append(describe(name, spec.dtype, spec.shape, raw))
    serialize_file(tensor_dict, path, metadata=metadata)
    expected["files"][fname] = {"api": "safetensors.serialize_file",
                                "metadata": file_metadata(path), "tensors": tensors}


# The vectors of docs/formats/safetensors.md, made by the reference writer.
write_numpy("vec_empty.safetensors", {})
write_numpy("vec_metadata.safetensors", {}, metadata={"framework": "pt"})
write_numpy("vec_attn_0.safetensors", {"attn.0": np.arange(6, dtype=np.float32).reshape(1, 2, 3)})
write_numpy("vec_forced_alignment.safetensors",
            {"attn0": np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)})
write_numpy("vec_i32_test.safetensors", {"test": np.zeros((2, 2), np.int32)})
# float4_e2m1fn_x2 storage shape [1, 1] is the logical shape [1, 2].
write_spec("vec_f4.safetensors", {"weight": ("float4_e2m1fn_x2", (1, 1), b"\x21")})

# Every numpy dtype, random contents, with metadata.
write_numpy("numpy_all_dtypes.safetensors",
            {f"t_{d}": random_array(d, (2, 3)) for d in NUMPY_DTYPES},
            metadata={"format": "np", "note": "every numpy dtype"})

# Random sets: dtypes, shapes (scalars, zero dims), awkward names.
for k in range(6):
    count = int(rng.integers(1, 9))
    names = rng.choice(NAMES, size=count, replace=False)
    arrays = {str(n): random_array(str(rng.choice(list(NUMPY_DTYPES))), random_shape()) for n in names}
    meta = None if k % 2 else {"k": "v\"\\\n", "ünï": "cödé"}
    write_numpy(f"numpy_random_{k}.safetensors", arrays, metadata=meta)

# Dtypes numpy lacks, through the raw TensorSpec API.
specs = {}
for d, (st, bits) in SPEC_DTYPES.items():
    shape = (3, 2) if bits == 4 else (2, 3)  # F4 storage (3, 2) holds 3x4 elements
    nbytes = 6 * bits // 8 if bits >= 8 else 6
    specs[f"t_{st}"] = (d, shape, rng.integers(0, 256, size=nbytes, dtype=np.uint8).tobytes())
write_spec("spec_other_dtypes.safetensors", specs, metadata={"format": "raw"})

with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
    json.dump(expected, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(f"wrote {len(expected['files'])} files with safetensors {safetensors.__version__}", file=sys.stderr)
