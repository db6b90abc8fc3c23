"""Writes the WebDataset golden shards with the real webdataset (1.0.2) and
expected.jsonl: every sample as webdataset's own reader decodes it, in
compat_dump's value format (tests/dataset/sources/wds_test.cc compares with it).
Also two tars made with Python's tarfile for the tar reader: gnu.tar (GNU
format, a 'L' long name) and pax.tar (a pax 'x' path record), both holding a
sample whose key is longer than ustar's 100-byte name field.

Run from the repository root: .venv/bin/python tests/golden/wds/make.py
"""
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import webdataset as wds

HERE = Path(__file__).resolve().parent
TS_DTYPE = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int8": "i8", "int16": "i16",
            "int32": "i32", "int64": "i64", "float16": "f16", "float32": "f32", "float64": "f64", "bool": "bool"}


def sample(k):
    return {
        "__key__": f"sample{k:05d}",
        "x.ten": (np.arange(6, dtype=np.float32) + k).reshape(2, 3),
        "pair.ten": [np.full((k + 1,), k, dtype=np.int64), np.eye(2, dtype=np.float64) * k],
        "y.npy": np.arange(k + 1, dtype=np.int16) * -3,
        "meta.json": {"k": k, "name": f"n{k}"},
        "cls": k % 3,
        "txt": f"text {k} ü",
        "bin": bytes([k]) * (k + 2),
    }


def tensor(a):
    a = np.asarray(a)
    return {"kind": "tensor", "dtype": TS_DTYPE[a.dtype.name], "shape": list(a.shape), "hex": a.tobytes().hex()}


def value(name, v):
    if name.endswith(".ten"):
        return {name: tensor(v[0])} if len(v) == 1 else {f"{name}[{j}]": tensor(a) for j, a in enumerate(v)}
    if name.endswith(".npy"):
        return {name: tensor(v)}
    if name.endswith(".json"):
        return {name: {"kind": "json", "json": v}}
    if name == "cls":
        return {name: {"kind": "int", "value": v}}
    if name == "txt":
        return {name: {"kind": "str", "text": v}}
    return {name: {"kind": "bytes", "hex": v.hex()}}


for old in HERE.glob("*.tar"):
    old.unlink()
with wds.ShardWriter(str(HERE / "ds-%06d.tar"), maxcount=3, verbose=0) as w:
    for k in range(7):
        w.write(sample(k))
urls = [str(p) for p in sorted(HERE.glob("ds-*.tar"))]
with open(HERE / "expected.jsonl", "w") as f:
    for s in wds.WebDataset(urls, shardshuffle=False).decode():
        fields = {"__key__": {"kind": "str", "text": s["__key__"]}}
        for name in sorted(k for k in s if not k.startswith("__")):
            fields.update(value(name, s[name]))
        f.write(json.dumps({"fields": fields}, sort_keys=True) + "\n")

LONG = "d" * 60 + "/" + "k" * 80  # 141 bytes: beyond ustar's 100-byte name field
for fmt, name in ((tarfile.GNU_FORMAT, "gnu.tar"), (tarfile.PAX_FORMAT, "pax.tar")):
    with tarfile.open(HERE / name, "w", format=fmt) as t:
        for member, data in ((LONG + ".txt", "long".encode()), (LONG + ".cls", b"7"), ("short.txt", b"s"), ("short.cls", b" 8\n")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mtime = 0
            t.addfile(info, io.BytesIO(data))
