#!/usr/bin/env python3
"""Makes the GGUF golden files with the real `gguf` package (gguf-py).

Run from the repository root:  .venv/bin/python tests/golden/gguf/make_golden.py
Needs: pip install gguf 'numpy<2.2' (gguf 0.19.0 made the committed files).

Writes next to this script:
  plain.gguf    every KV value type (incl. nested arrays, NaN/inf, a non-UTF-8
                string) and a tensor of every plain ggml type, default alignment
  quant.gguf    one tensor of every block-quantized type the package knows,
                written as raw bytes (deterministic pseudo-random)
  align64.gguf  general.alignment = 64 and odd-sized tensors (padding matters)
  empty.gguf    general.architecture only, no tensors
  no_kv.gguf    no KV pairs at all, one tensor
  v2.gguf       plain.gguf with the version field patched to 2: the package
                writes only v3, and v2 differs from v3 only in that field
  expected.json what tensorsafe must decode from each file, in the mapping of
                docs/formats/gguf.md (values + "tensorsafe.gguf_types")
"""
import json
import math
import os
import struct

import numpy as np
import gguf
from gguf import GGUFValueType as VT, GGMLQuantizationType as QT

HERE = os.path.dirname(os.path.abspath(__file__))

SCALAR_NAMES = {
    VT.UINT8: "uint8", VT.INT8: "int8", VT.UINT16: "uint16", VT.INT16: "int16",
    VT.UINT32: "uint32", VT.INT32: "int32", VT.FLOAT32: "float32", VT.BOOL: "bool",
    VT.STRING: "string", VT.UINT64: "uint64", VT.INT64: "int64", VT.FLOAT64: "float64",
}

# GGML type -> tensorsafe dtype name for the plain types.
PLAIN = {QT.F32: "f32", QT.F16: "f16", QT.BF16: "bf16", QT.F64: "f64",
         QT.I8: "i8", QT.I16: "i16", QT.I32: "i32", QT.I64: "i64"}


def json_float(v, vtype):
    """A float as the mapping writes it: finite -> number, else a string."""
    if vtype == VT.FLOAT32:
        v = float(np.float32(v))
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def json_value(v, vtype):
    if vtype in (VT.FLOAT32, VT.FLOAT64):
        return json_float(v, vtype)
    if vtype == VT.STRING:
        if isinstance(v, bytes):
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return {"hex": v.hex()}
        return v
    if vtype == VT.BOOL:
        return bool(v)
    return int(v)


def infer(v):
    """The element type gguf-py infers for a nested array item."""
    return VT.get_type(v)


def nested(v):
    """JSON value and type descriptor of a list written without sub_type
    below the top level (gguf-py infers each inner array's type from its first
    item)."""
    t = infer(v[0])
    if t == VT.ARRAY:
        parts = [nested(x) for x in v]
        descs = [d for _, d in parts]
        if all(isinstance(d, str) and d == descs[0] for d in descs):
            desc = "array<" + descs[0] + ">"
        else:
            desc = ["array"] + descs
        return [j for j, _ in parts], desc
    return [json_value(x, t) for x in v], "array<" + SCALAR_NAMES[t] + ">"


class Doc:
    """Collects KV pairs for a writer and the expected JSON metadata."""

    def __init__(self):
        self.kv = []  # (key, value, vtype, sub_type)
        self.meta = {}
        self.types = {}

    def add(self, key, value, vtype, sub_type=None):
        self.kv.append((key, value, vtype, sub_type))
        if vtype == VT.ARRAY:
            if sub_type is not None:
                self.meta[key] = [json_value(x, sub_type) for x in value]
                self.types[key] = "array<" + SCALAR_NAMES[sub_type] + ">"
            else:
                self.meta[key], self.types[key] = nested(value)
        else:
            self.meta[key] = json_value(value, vtype)
            self.types[key] = SCALAR_NAMES[vtype]

    def apply(self, w):
        for key, value, vtype, sub_type in self.kv:
            w.add_key_value(key, value, vtype, sub_type=sub_type)

    def metadata(self):
        if not self.meta:
            return ""
        m = dict(self.meta)
        m["tensorsafe.gguf_types"] = self.types
        return m


def write(name, doc, tensors, arch="test", alignment=None):
    """tensors: list of (name, array, raw_dtype or None). Returns the manifest
    entry. `arch` is recorded in `doc` first, as the package writes it first."""
    path = os.path.join(HERE, name)
    w = gguf.GGUFWriter(path, arch="")  # "" = no automatic architecture key
    if alignment is not None:
        w.data_alignment = alignment
    doc.apply(w)
    expected_tensors = []
    for tname, arr, raw in tensors:
        if isinstance(raw, tuple):
            code, qname, be, bb, shape = raw
            # An int8 view with the logical shape stops the package from
            # converting the shape with its own block table (see Q8_1 above).
            w.add_tensor(tname, arr.view(np.int8), raw_shape=shape, raw_dtype=code)
            expected_tensors.append({"name": tname, "dtype": "u8", "shape": [arr.nbytes],
                                     "metadata": {"gguf.type": qname, "gguf.shape": shape,
                                                  "block_elems": be, "block_bytes": bb},
                                     "hex": arr.tobytes().hex()})
            continue
        w.add_tensor(tname, arr, raw_dtype=raw)
        if raw is None or raw in PLAIN:
            qt = raw if raw is not None else {
                np.dtype(np.float32): QT.F32, np.dtype(np.float16): QT.F16,
                np.dtype(np.float64): QT.F64, np.dtype(np.int8): QT.I8,
                np.dtype(np.int16): QT.I16, np.dtype(np.int32): QT.I32,
                np.dtype(np.int64): QT.I64}[arr.dtype]
            expected_tensors.append({"name": tname, "dtype": PLAIN[qt],
                                     "shape": list(arr.shape), "metadata": "",
                                     "hex": arr.tobytes().hex()})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"file": name, "metadata": doc.metadata(), "tensors": expected_tensors}


def plain():
    d = Doc()
    d.add("general.architecture", "test", VT.STRING)
    d.add("general.name", "golden plain", VT.STRING)
    d.add("x.u8", 255, VT.UINT8)
    d.add("x.i8", -128, VT.INT8)
    d.add("x.u16", 65535, VT.UINT16)
    d.add("x.i16", -32768, VT.INT16)
    d.add("x.u32", 4294967295, VT.UINT32)
    d.add("x.i32", -2147483648, VT.INT32)
    d.add("x.f32", 0.1, VT.FLOAT32)
    d.add("x.f32_neg_zero", -0.0, VT.FLOAT32)
    d.add("x.f32_nan", float("nan"), VT.FLOAT32)
    d.add("x.f32_inf", float("inf"), VT.FLOAT32)
    d.add("x.bool_t", True, VT.BOOL)
    d.add("x.bool_f", False, VT.BOOL)
    d.add("x.str_empty", "", VT.STRING)
    d.add("x.str_utf8", "h\u00e9llo \u2603 \"q\" \\ \n\t\x01", VT.STRING)
    d.add("x.str_bad_utf8", b"ok\xff\xfe", VT.STRING)
    d.add("x.u64", 18446744073709551615, VT.UINT64)
    d.add("x.i64", -9223372036854775808, VT.INT64)
    d.add("x.f64", 2.718281828459045, VT.FLOAT64)
    d.add("x.f64_ninf", float("-inf"), VT.FLOAT64)
    d.add("x.f64_tiny", 5e-324, VT.FLOAT64)
    for t in (VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32,
              VT.UINT64, VT.INT64):
        signed = t in (VT.INT8, VT.INT16, VT.INT32, VT.INT64)
        d.add("arr." + SCALAR_NAMES[t], [0, 1, -1 if signed else 2, 100], VT.ARRAY, sub_type=t)
    d.add("arr.float32", [1.5, -0.0, float("inf"), 3.4028234663852886e38], VT.ARRAY, sub_type=VT.FLOAT32)
    d.add("arr.float64", [1e-300, float("nan")], VT.ARRAY, sub_type=VT.FLOAT64)
    d.add("arr.bool", [True, False, True], VT.ARRAY, sub_type=VT.BOOL)
    d.add("arr.string", ["a", "", "\u00fc", b"\xc3"], VT.ARRAY, sub_type=VT.STRING)
    d.add("arr.nested", [[1, 2], [3]], VT.ARRAY)
    d.add("arr.nested_mixed", [[1], ["a", "b"], [[True]]], VT.ARRAY)
    tensors = [
        ("t.scalar", np.array(1.5, dtype=np.float32), None),
        ("t.f32", np.arange(6, dtype=np.float32).reshape(2, 3), None),
        ("t.f16", np.array([1.0, -2.0, 0.5], dtype=np.float16), None),
        ("t.bf16", np.array([[0x3f80, 0xc000], [0x3f00, 0x7f80]], dtype=np.uint16), QT.BF16),
        ("t.f64", np.arange(4, dtype=np.float64).reshape(1, 2, 1, 2), None),
        ("t.i8", np.array([-1, 2, -3, 4, -5], dtype=np.int8), None),
        ("t.i16", np.arange(6, dtype=np.int16).reshape(2, 3, 1), None),
        ("t.i32", np.arange(-3, 4, dtype=np.int32), None),
        ("t.i64", np.array([2**62, -1, 0], dtype=np.int64), None),
        ("t.empty", np.zeros((0, 4), dtype=np.float32), None),
    ]
    return write("plain.gguf", d, tensors)


# Block geometry (elements, bytes) of the block-quantized ggml types, from
# ggml's own type traits (docs/formats/gguf.md). gguf-py 0.19 agrees except for
# Q8_1, which it lists as 40 bytes (a stale f32 d+s layout); ggml's block is
# two f16 + 32 int8 = 36 bytes. Q2_0 (code 42) is newer than the package.
BLOCK_TYPES = [
    ("Q4_0", 2, 32, 18), ("Q4_1", 3, 32, 20), ("Q5_0", 6, 32, 22), ("Q5_1", 7, 32, 24),
    ("Q8_0", 8, 32, 34), ("Q8_1", 9, 32, 36), ("Q2_K", 10, 256, 84), ("Q3_K", 11, 256, 110),
    ("Q4_K", 12, 256, 144), ("Q5_K", 13, 256, 176), ("Q6_K", 14, 256, 210),
    ("Q8_K", 15, 256, 292), ("IQ2_XXS", 16, 256, 66), ("IQ2_XS", 17, 256, 74),
    ("IQ3_XXS", 18, 256, 98), ("IQ1_S", 19, 256, 50), ("IQ4_NL", 20, 32, 18),
    ("IQ3_S", 21, 256, 110), ("IQ2_S", 22, 256, 82), ("IQ4_XS", 23, 256, 136),
    ("IQ1_M", 29, 256, 56), ("TQ1_0", 34, 256, 54), ("TQ2_0", 35, 256, 66),
    ("MXFP4", 39, 32, 17), ("NVFP4", 40, 64, 36), ("Q1_0", 41, 128, 18), ("Q2_0", 42, 64, 18),
]


def quant():
    d = Doc()
    d.add("general.architecture", "test", VT.STRING)
    d.add("general.quantization_version", 2, VT.UINT32)
    rng = np.random.default_rng(1234)
    tensors = []
    for name, code, be, bb in BLOCK_TYPES:
        if name in QT.__members__ and name != "Q8_1":
            assert gguf.GGML_QUANT_SIZES[QT[name]] == (be, bb), name
        rows = 2 if be == 32 else 1
        cols = 64 if be < 64 else be  # logical elements per row
        raw = rng.integers(0, 256, size=(rows, cols // be * bb), dtype=np.uint8)
        tensors.append(("q." + name.lower(), raw, (code, name, be, bb, [rows, cols])))
    # A plain tensor after the quantized ones.
    tensors.append(("t.f32", np.array([1, 2, 3], dtype=np.float32), None))
    return write("quant.gguf", d, tensors)


def align64():
    d = Doc()
    d.add("general.architecture", "test", VT.STRING)
    d.add("general.alignment", 64, VT.UINT32)
    tensors = [
        ("a", np.array([1, 2, 3], dtype=np.int8), None),
        ("b", np.array([1, 2, 3, 4, 5], dtype=np.float16), None),
        ("c", np.array([7], dtype=np.int64), None),
    ]
    return write("align64.gguf", d, tensors, alignment=64)


def empty():
    d = Doc()
    d.add("general.architecture", "test", VT.STRING)
    return write("empty.gguf", d, [])


def no_kv():
    return write("no_kv.gguf", Doc(), [("only", np.array([[1, 2]], dtype=np.int32), None)])


def v2(plain_entry):
    with open(os.path.join(HERE, "plain.gguf"), "rb") as f:
        b = bytearray(f.read())
    assert struct.unpack_from("<I", b, 4)[0] == 3
    struct.pack_into("<I", b, 4, 2)
    with open(os.path.join(HERE, "v2.gguf"), "wb") as f:
        f.write(b)
    e = dict(plain_entry)
    e["file"] = "v2.gguf"
    return e


def main():
    entries = []
    p = plain()
    entries += [p, quant(), align64(), empty(), no_kv(), v2(p)]
    for e in entries:  # the package's own reader must accept every file...
        if e["file"] != "quant.gguf":  # ...but it does not know Q2_0
            gguf.GGUFReader(os.path.join(HERE, e["file"]))
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                   "files": entries}, f, indent=1, allow_nan=False)
        f.write("\n")


if __name__ == "__main__":
    main()
