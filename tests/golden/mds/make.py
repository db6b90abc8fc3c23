"""Writes the MDS golden datasets with the real mosaicml-streaming (0.13.0)
and, beside each, expected.jsonl: every sample as MosaicML's StreamingDataset
reads it back, in compat_dump's value format (tests/dataset/sources/mds_test.cc
compares tensorsafe's reading with it).

Run from the repository root: .venv/bin/python tests/golden/mds/make.py
Deterministic: sample k's values are functions of k.
"""
import contextlib
import decimal
import gzip
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from streaming import MDSWriter, StreamingDataset

HERE = Path(__file__).resolve().parent
TS_DTYPE = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int8": "i8", "int16": "i16",
            "int32": "i32", "int64": "i64", "float16": "f16", "float32": "f32", "float64": "f64"}
SCALARS = list(TS_DTYPE)

COLUMNS = {
    "blob": "bytes", "name": "str", "id": "int", "js": "json",
    "si": "str_int", "sf": "str_float", "sd": "str_decimal",
    "fixed": "ndarray:float32:2,3",      # dtype and shape in the index
    "vec": "ndarray:int16",              # dtype fixed, shape encoded (uint16 dims when > 255)
    "any": "ndarray",                    # dtype and shape encoded
    "img": "png",                        # kept as bytes
}
COLUMNS.update({f"s_{t}": t for t in SCALARS})


def png(k):
    buf = io.BytesIO()
    Image.new("L", (2, 1 + k % 2), color=k).save(buf, format="PNG")
    return Image.open(io.BytesIO(buf.getvalue()))


def sample(k):
    s = {
        "blob": bytes(range(k % 7)) * 3,
        "name": f"sample-{k}-é",
        "id": (k - 3) * 1_000_000_007,
        "js": {"k": k, "l": [1, 2.5, None], "s": "x"},
        "si": k * 11,
        "sf": k / 4,
        "sd": decimal.Decimal(f"{k}.25"),
        "fixed": (np.arange(6, dtype=np.float32) * (k + 1)).reshape(2, 3),
        "vec": np.arange(300 if k == 1 else k + 1, dtype=np.int16) - 5,
        "any": np.full((k % 3 + 1, 2), k, dtype=np.float64),
        "img": png(k),
    }
    for i, t in enumerate(SCALARS):
        s[f"s_{t}"] = getattr(np, t)(k + i)
    return s


def value(encoding, v):
    if encoding in ("str", "str_int", "str_float", "str_decimal"):
        return {"kind": "str", "text": str(v)}
    if encoding == "int":
        return {"kind": "int", "value": int(v)}
    if encoding == "json":
        return {"kind": "json", "json": v}
    if encoding == "bytes":
        return {"kind": "bytes", "hex": v.hex()}
    if encoding == "png":
        return {"kind": "bytes"}  # re-encoded by PIL on read: not compared byte for byte
    a = np.asarray(v)
    return {"kind": "tensor", "dtype": TS_DTYPE[a.dtype.name], "shape": list(a.shape),
            "hex": a.astype(a.dtype.newbyteorder("<")).tobytes().hex()}


def write(out, n, **kw):
    shutil.rmtree(out, ignore_errors=True)
    with MDSWriter(out=str(out), columns=COLUMNS, **kw) as w:
        for k in range(n):
            w.write(sample(k))
    with tempfile.TemporaryDirectory() as local:
        # StreamingDataset reads from `remote` into `local` (decompressing there).
        ds = StreamingDataset(remote=str(out), local=local, batch_size=1, shuffle=False)
        with open(out / "expected.jsonl", "w") as f:
            for i in range(len(ds)):
                s = ds[i]
                f.write(json.dumps({"index": i, "fields": {c: value(COLUMNS[c], s[c]) for c in sorted(COLUMNS)}},
                                   sort_keys=True) + "\n")
    assert not any(out.glob("*.mds")) or not kw.get("compression"), "raw shards left beside zstd ones"


@contextlib.contextmanager
def gzip_mtime(seconds):
    """gzip.compress (compression.py's gz) stamps each member with time.time();
    pinned here so that gz/ comes out the same on every run."""
    real = gzip.time
    gzip.time = type("PinnedTime", (), {"time": staticmethod(lambda: seconds)})
    try:
        yield
    finally:
        gzip.time = real


write(HERE / "plain", 7, size_limit=2500)
write(HERE / "zstd", 7, size_limit=2500, compression="zstd:7", hashes=["sha1", "xxh3_64", "xxh64"])
# The other codecs of compression.py, each with the same samples, spelled and
# hashed differently so every cache-name rule (mds.md) has a dataset.
with gzip_mtime(1_700_000_000):
    write(HERE / "gz", 7, size_limit=2500, compression="gz", hashes=["xxh64"])
write(HERE / "bz2", 7, size_limit=2500, compression="bz2:3")
write(HERE / "br", 7, size_limit=2500, compression="br:0", hashes=["sha1", "xxh3_64"])
write(HERE / "snappy", 7, size_limit=2500, compression="snappy", hashes=["xxh128"])
# A pkl column (refused by tensorsafe, never unpickled).
shutil.rmtree(HERE / "pkl", ignore_errors=True)
with MDSWriter(out=str(HERE / "pkl"), columns={"obj": "pkl", "id": "int"}) as w:
    w.write({"obj": {"a": 1}, "id": 1})
print("wrote", *(p.name for p in HERE.iterdir() if p.is_dir()), file=sys.stderr)
