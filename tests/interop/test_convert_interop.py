"""`tensorsafe convert` against the real reference implementations.

Over random tensors of every dtype both sides support (seed printed by
conftest.py): files tensorsafe writes are read by the reference and equal;
files the reference writes are converted by tensorsafe and equal; where both
writers are deterministic the bytes are identical; and native -> X -> native
gives back the original for every format X.

References: numpy (npy, npz), safetensors' numpy API, gguf-py's GGUFWriter
and GGUFReader, webdataset's tenbin module. BTF and ZIO have no runnable
reference package; their files from the references are checked in
tests/convert/convert_test.cc (../shared/fixtures), and here they take part
in the round trips.
"""
import numpy as np
import ml_dtypes
import pytest
import safetensors.numpy
import gguf
from gguf import GGMLQuantizationType as QT
from webdataset import tenbin

# tensorsafe dtype name -> numpy dtype, for the dtypes NumPy can hold.
NP = {
    "bool": np.dtype(np.bool_), "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64), "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16), "i32": np.dtype(np.int32), "i64": np.dtype(np.int64),
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
# (float8_e5m2 is left out: NumPy writes it to .npy as '<f1' but cannot read
# that back; tensorsafe can, see tests/convert/convert_test.cc.)
# What each format holds (docs/CONVERT.md §2), restricted to NP.
HOLDS = {
    "tsafe": list(NP),
    "npy": list(NP),
    "npz": list(NP),
    "safetensors": [d for d in NP if d not in ("c128",)],
    "gguf": ["f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64"],
    "tenbin": ["f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"],
    "btf": ["i8", "i16", "i32", "i64", "f32", "f64", "u8", "u16", "u32", "u64"],
    "zio": ["f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "c64", "c128"],
}
EXT = {"tenbin": "ten"}


def random_array(rng, dtype, min_rank=0, max_rank=3):
    """Random bytes viewed as `dtype` (NaNs and all: comparisons are bytewise)."""
    shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(min_rank, max_rank + 1))))
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = rng.integers(0, 256, size=n, dtype=np.uint8)
    if dtype == np.bool_:
        raw &= 1
    return raw.view(dtype).reshape(shape)


def random_arrays(rng, dtypes, names=None, **kw):
    names = names or [f"layer{i}.{d}" for i, d in enumerate(dtypes)]
    return {n: random_array(rng, NP[d], **kw) for n, d in zip(names, dtypes)}


def same(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    # NumPy reads bf16's '<V2' back as '|V2': the same two anonymous bytes.
    if a.dtype.kind == "V" and b.dtype.kind == "V":
        assert a.dtype.itemsize == b.dtype.itemsize, f"{what}: dtype {a.dtype} != {b.dtype}"
    else:
        assert a.dtype.str == b.dtype.str, f"{what}: dtype {a.dtype.str} != {b.dtype.str}"
    assert a.tobytes() == b.tobytes(), f"{what}: values differ"


def same_dicts(want, got):
    assert list(got) == list(want) or sorted(got) == sorted(want), f"names {list(got)} != {list(want)}"
    for k in want:
        same(want[k], got[k], k)


def load_npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


# ---- safetensors ----

ST = [d for d in HOLDS["safetensors"] if d not in ("bf16", "f8_e5m2")]  # safetensors.numpy's dtypes


def test_safetensors_reads_what_we_write_and_bytes_match(rng, ts, tmp_path):
    arrays = random_arrays(rng, ST)
    np.savez(tmp_path / "src.npz", **arrays)
    ts("convert", "--no-sync", tmp_path / "src.npz", tmp_path / "out.safetensors")
    same_dicts(arrays, safetensors.numpy.load_file(tmp_path / "out.safetensors"))
    safetensors.numpy.save_file(arrays, tmp_path / "ref.safetensors")
    assert (tmp_path / "out.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()


def test_we_read_what_safetensors_writes(rng, ts, tmp_path):
    arrays = random_arrays(rng, ST)
    ref = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(arrays, ref, metadata={"format": "np", "note": "é"})
    ts("convert", "--no-sync", ref, tmp_path / "out.npz", "--drop-metadata")
    same_dicts(arrays, load_npz(tmp_path / "out.npz"))
    # Without consent the metadata is not dropped.
    p = ts("convert", ref, tmp_path / "refused.npz", check=False)
    assert p.returncode == 5 and "--drop-metadata" in p.stderr, p.stderr
    # safetensors -> tsafe -> safetensors: the reference's bytes, metadata too.
    ts("convert", "--no-sync", ref, tmp_path / "t.tsafe")
    ts("convert", "--no-sync", tmp_path / "t.tsafe", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == ref.read_bytes()


# ---- npy / npz ----

def test_npy_both_ways_with_numpy(rng, ts, tmp_path):
    for name, dt in NP.items():
        a = random_array(rng, dt)
        ref = tmp_path / f"{name}.npy"
        np.save(ref, a)
        ts("convert", "--no-sync", ref, tmp_path / f"{name}.tsafe")
        out = tmp_path / f"{name}_out.npy"
        ts("convert", "--no-sync", tmp_path / f"{name}.tsafe", out)
        assert out.read_bytes() == ref.read_bytes(), name
        same(a, np.load(out), name)
    # Fortran order and big-endian data come out C-ordered little-endian, equal.
    a = random_array(rng, NP["f64"], min_rank=2)
    for variant in (np.asfortranarray(a), a.astype(">f8")):
        np.save(tmp_path / "v.npy", variant)
        ts("convert", "--no-sync", tmp_path / "v.npy", tmp_path / "v.npz")
        got = load_npz(tmp_path / "v.npz")["v"]
        assert got.dtype == np.dtype("<f8") and got.flags.c_contiguous
        np.testing.assert_array_equal(got, variant)


def test_npz_both_ways_with_numpy(rng, ts, tmp_path):
    arrays = random_arrays(rng, list(NP))
    for save, flags in ((np.savez, []), (np.savez_compressed, ["--compress"])):
        ref = tmp_path / "ref.npz"
        save(ref, **arrays)
        ts("convert", "--no-sync", ref, tmp_path / "t.tsafe")
        ts("convert", "--no-sync", *flags, tmp_path / "t.tsafe", tmp_path / "out.npz")
        same_dicts(arrays, load_npz(tmp_path / "out.npz"))
        assert (tmp_path / "out.npz").read_bytes() == ref.read_bytes(), save.__name__
    # One member out of an archive as .npy equals np.save of it.
    name = next(iter(arrays))
    ts("convert", "--no-sync", "--tensor", name, tmp_path / "t.tsafe", tmp_path / "one.npy")
    np.save(tmp_path / "ref_one.npy", arrays[name])
    assert (tmp_path / "one.npy").read_bytes() == (tmp_path / "ref_one.npy").read_bytes()


# ---- GGUF ----

def gguf_write(path, arrays, arch="", kv=()):
    w = gguf.GGUFWriter(str(path), arch=arch)
    for key, value in kv:
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, value)
    for name, a in arrays.items():
        if a.dtype == NP["bf16"]:
            w.add_tensor(name, a.view(np.uint16), raw_dtype=QT.BF16)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_reader_reads_what_we_write_and_bytes_match(rng, ts, tmp_path):
    arrays = random_arrays(rng, HOLDS["gguf"], min_rank=1, max_rank=4)
    np.savez(tmp_path / "src.npz", **arrays)
    ts("convert", "--no-sync", tmp_path / "src.npz", tmp_path / "out.gguf")
    reader = gguf.GGUFReader(tmp_path / "out.gguf")
    assert [t.name for t in reader.tensors] == list(arrays)
    for t in reader.tensors:
        a = arrays[t.name]
        assert [int(d) for d in t.shape[::-1]] == list(a.shape), t.name
        assert t.data.tobytes() == a.tobytes(), t.name
    gguf_write(tmp_path / "ref.gguf", arrays)
    assert (tmp_path / "out.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()


def test_we_read_what_gguf_writes(rng, ts, tmp_path):
    arrays = random_arrays(rng, HOLDS["gguf"], min_rank=1, max_rank=4)
    ref = tmp_path / "ref.gguf"
    gguf_write(ref, arrays, arch="llama", kv=[("llama.block_count", 2), ("general.name", "tiny")])
    ts("convert", "--no-sync", "--drop-metadata", ref, tmp_path / "out.npz")
    same_dicts(arrays, load_npz(tmp_path / "out.npz"))
    ts("convert", "--no-sync", ref, tmp_path / "t.tsafe")
    ts("convert", "--no-sync", tmp_path / "t.tsafe", tmp_path / "back.gguf")
    assert (tmp_path / "back.gguf").read_bytes() == ref.read_bytes()
    # GGUF metadata is typed and nested: safetensors takes it only as text.
    p = ts("convert", ref, tmp_path / "m.safetensors", check=False)
    assert p.returncode == 7 and "--stringify-metadata" in p.stderr, p.stderr
    ts("convert", "--no-sync", "--stringify-metadata", ref, tmp_path / "m.safetensors")
    with safetensors.safe_open(tmp_path / "m.safetensors", "np") as f:
        meta = f.metadata()
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == "2"


# ---- tenbin (webdataset) ----

# webdataset cannot encode uint32 (its "unit32" typo), nor decode rank 0.
TEN = [d for d in HOLDS["tenbin"] if d != "u32"]


def test_webdataset_reads_what_we_write_and_bytes_match(rng, ts, tmp_path):
    names = [f"t{i}" for i in range(len(TEN))]
    arrays = random_arrays(rng, TEN, names=names, min_rank=1)
    np.savez(tmp_path / "src.npz", **arrays)
    ts("convert", "--no-sync", tmp_path / "src.npz", tmp_path / "out.ten")
    data = (tmp_path / "out.ten").read_bytes()
    for a, b in zip(arrays.values(), tenbin.decode_buffer(data)):
        same(a, b)
    assert data == bytes(tenbin.encode_buffer(list(arrays.values()), infos=names))


def test_we_read_what_webdataset_writes(rng, ts, tmp_path):
    names = [f"x{i}" for i in range(len(TEN))]
    arrays = random_arrays(rng, TEN, names=names, min_rank=1)
    ref = tmp_path / "ref.ten"
    ref.write_bytes(bytes(tenbin.encode_buffer(list(arrays.values()), infos=names)))
    ts("convert", "--no-sync", ref, tmp_path / "out.npz")
    same_dicts(arrays, load_npz(tmp_path / "out.npz"))
    ts("convert", "--no-sync", ref, tmp_path / "t.tsafe")
    ts("convert", "--no-sync", tmp_path / "t.tsafe", tmp_path / "back.ten")
    assert (tmp_path / "back.ten").read_bytes() == ref.read_bytes()


# ---- native -> X -> native, every format ----

@pytest.mark.parametrize("fmt", ["safetensors", "npy", "npz", "gguf", "tenbin", "btf", "zio", "tsafe"])
def test_round_trip_through_every_format(rng, ts, tmp_path, fmt):
    dtypes = HOLDS[fmt]
    ext = EXT.get(fmt, fmt)
    min_rank = 1 if fmt in ("gguf",) else 0
    groups = [[d] for d in dtypes] if fmt == "npy" else [dtypes]
    for k, group in enumerate(groups):
        # BTF keeps no names: tensors are named by position there.
        names = [str(i) for i in range(len(group))] if fmt == "btf" else None
        if fmt == "tenbin":
            names = [f"t{i}" for i in range(len(group))]
        arrays = random_arrays(rng, group, names=names, min_rank=min_rank, max_rank=4 if fmt == "gguf" else 3)
        if fmt == "npy":
            arrays = {"x": next(iter(arrays.values()))}
        np.savez(tmp_path / "src.npz", **arrays)
        native, other, back = tmp_path / "a.tsafe", tmp_path / f"x.{ext}", tmp_path / "b.tsafe"
        ts("convert", "--no-sync", tmp_path / "src.npz", native)
        ts("convert", "--no-sync", native, other)
        ts("convert", "--no-sync", other, back)
        ts("convert", "--no-sync", back, tmp_path / "out.npz")
        same_dicts(arrays, load_npz(tmp_path / "out.npz"))
        # The two .tsafe files hold the same tensors (safetensors sorts them).
        assert sorted(ts("ls", native).splitlines()) == sorted(ts("ls", back).splitlines()), group
