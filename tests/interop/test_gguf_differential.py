"""GGUF against gguf-py, differentially: random files written by the
package's GGUFWriter (every value type, nested arrays, arrays of strings,
bools, non-UTF-8 strings, NaN/inf/-0, every tensor type the package knows,
custom alignments, many tensors, none, no key/values) must read in tensorsafe
as the values and bytes that were written, with the GGUF types of
docs/formats/gguf.md §4; `convert` (directly and through .tsafe) and
`write_gguf` must give back the file byte for byte (through .zio, when its
keys were sorted); and gguf-py's
GGUFReader must read what tensorsafe writes. Files the package cannot write
(empty arrays, v2) are made by hand below; big-endian files, which it
writes, are refused.
"""
import math
import struct

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

import tensorsafe

INTS = {VT.UINT8: (0, 2**8 - 1), VT.INT8: (-2**7, 2**7 - 1), VT.UINT16: (0, 2**16 - 1),
        VT.INT16: (-2**15, 2**15 - 1), VT.UINT32: (0, 2**32 - 1), VT.INT32: (-2**31, 2**31 - 1),
        VT.UINT64: (0, 2**64 - 1), VT.INT64: (-2**63, 2**63 - 1)}
NAMES = {VT.UINT8: "uint8", VT.INT8: "int8", VT.UINT16: "uint16", VT.INT16: "int16", VT.UINT32: "uint32",
         VT.INT32: "int32", VT.FLOAT32: "float32", VT.BOOL: "bool", VT.STRING: "string",
         VT.UINT64: "uint64", VT.INT64: "int64", VT.FLOAT64: "float64"}
SPECIAL_FLOATS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -2.5, 1e-45, 3.4028234663852886e38]
PLAIN = {QT.F32: np.float32, QT.F16: np.float16, QT.F64: np.float64, QT.I8: np.int8, QT.I16: np.int16,
         QT.I32: np.int32, QT.I64: np.int64}


def rand_scalar(rng, vt):
    if vt in INTS:
        lo, hi = INTS[vt]
        pick = int(rng.integers(0, 4))
        return lo if pick == 0 else hi if pick == 1 else int(rng.integers(lo, hi, endpoint=True, dtype=np.int64)
                                                             if hi < 2**63 else rng.integers(0, 2**63))
    if vt in (VT.FLOAT32, VT.FLOAT64):
        if rng.random() < 0.4:
            return SPECIAL_FLOATS[int(rng.integers(len(SPECIAL_FLOATS)))]
        v = float(rng.standard_normal() * 10.0 ** int(rng.integers(-30, 30)))
        return float(np.float32(v)) if vt == VT.FLOAT32 else v
    if vt == VT.BOOL:
        return bool(rng.integers(2))
    if rng.random() < 0.15:  # not UTF-8: gguf-py writes bytes as they are
        return b"ok\xff" + bytes(rng.integers(0, 256, size=int(rng.integers(0, 4)), dtype=np.uint8))
    alphabet = ["a", "Z", " ", "\"", "\\", "\n", "\t", "\x01", "é", "日本", "🦙", "<s>", "\u2028"]
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=int(rng.integers(0, 8))))


# What gguf-py infers for the elements of an inner (nested) array.
INNER = [VT.INT32, VT.FLOAT32, VT.BOOL, VT.STRING, VT.ARRAY]


def rand_array(rng, depth, top):
    """(value, descriptor) of a non-empty array: the descriptor is the one
    gguf.md §4 gives, built from the element types chosen here."""
    choices = list(NAMES) + ([VT.ARRAY] if depth < 3 else []) if top else INNER[:4 + (depth < 3)]
    et = choices[int(rng.integers(len(choices)))]
    n = int(rng.integers(1, 6))
    if et != VT.ARRAY:
        vals = [rand_scalar(rng, et) for _ in range(n)]
        return vals, et, f"array<{NAMES[et]}>"
    inner = [rand_array(rng, depth + 1, False) for _ in range(n)]
    descs = [d for _, _, d in inner]
    desc = f"array<{descs[0]}>" if all(isinstance(d, str) and d == descs[0] for d in descs) else ["array", *descs]
    return [v for v, _, _ in inner], et, desc


def expected_json(value, desc):
    """The JSON value gguf.md §4 gives for a written value."""
    if isinstance(desc, list):
        return [expected_json(v, d) for v, d in zip(value, desc[1:])]
    if desc.startswith("array<"):
        return [expected_json(v, desc[6:-1]) for v in value]
    if desc in ("float32", "float64"):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if desc == "string" and isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"hex": value.hex()}
    return value


def same(got, want, desc):
    if isinstance(desc, list):
        return len(got) == len(want) and all(same(g, w, d) for g, w, d in zip(got, want, desc[1:]))
    if desc.startswith("array<"):
        return len(got) == len(want) and all(same(g, w, desc[6:-1]) for g, w in zip(got, want))
    if desc in ("float32", "float64") and isinstance(want, float):
        t = np.float32 if desc == "float32" else np.float64
        return isinstance(got, float) and t(got).tobytes() == t(want).tobytes()  # -0.0 keeps its sign
    return type(got) is type(want) and got == want


def rand_tensor(rng, qt):
    """(array for GGUFWriter.add_tensor, raw_dtype, expected numpy shape,
    expected bytes)."""
    if qt in PLAIN:
        rank = int(rng.integers(0, 5))
        shape = tuple(int(d) for d in rng.integers(0 if rng.random() < 0.1 else 1, 5, size=rank))
        a = rng.integers(-100, 100, size=shape).astype(PLAIN[qt])
        if rank and qt in (QT.F32, QT.F64) and a.size:
            a.flat[0] = np.nan
        return a, None, shape, a.tobytes()
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    rows, blocks = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    raw = rng.integers(0, 256, size=(rows, blocks * bb), dtype=np.uint8)
    return raw, qt, (rows, blocks * be), raw.tobytes()


def tensor_types():
    # Q8_1: the package's 40-byte block is not ggml's 36 (gguf.md §3).
    return [qt for qt in gguf.GGML_QUANT_SIZES if qt != QT.Q8_1]


def write_random(rng, path, case):
    """A random file by GGUFWriter; returns (expected metadata, types,
    [(name, qt, numpy shape, bytes)])."""
    w = gguf.GGUFWriter(path, "llama" if case % 3 else "")
    if case % 5 == 0:
        w.kv_data = [{}]  # no key/values at all
    meta, types = {}, {}
    for key, f in w.kv_data[0].items():
        meta[key], types[key] = f.value, NAMES[f.type]
    if case % 5 != 0:
        if case % 4 == 1:
            align = 2 ** int(rng.integers(0, 9))
            w.add_custom_alignment(align)
            meta["general.alignment"], types["general.alignment"] = align, "uint32"
        for i in range(int(rng.integers(0, 25))):
            key = f"k{i}.{'x' * int(rng.integers(0, 3))}"
            if rng.random() < 0.3:
                value, sub, desc = rand_array(rng, 0, True)
                w.add_key_value(key, value, VT.ARRAY, sub_type=sub)
            else:
                vt = list(NAMES)[int(rng.integers(len(NAMES)))]
                value, desc = rand_scalar(rng, vt), NAMES[vt]
                w.add_key_value(key, value, vt)
            meta[key], types[key] = expected_json(value, desc), desc
    tensors = []
    n = 0 if case % 7 == 0 else int(rng.integers(1, 12 if case % 6 else 120))
    kinds = tensor_types()
    for i in range(n):
        qt = kinds[int(rng.integers(len(kinds)))]
        a, raw, shape, data = rand_tensor(rng, qt)
        name = f"blk.{i}.{qt.name.lower()}"
        w.add_tensor(name, a, raw_dtype=raw)
        tensors.append((name, qt, shape, data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return meta, types, tensors


def check_read(path, meta, types, tensors, tmp_path):
    got, got_meta = tensorsafe.read(path, packed=True)
    if not meta:
        assert got_meta == {}
    else:
        got_types = got_meta.pop("tensorsafe.gguf_types")
        assert list(got_meta) == list(meta)
        assert got_types == types
        for k in meta:
            assert same(got_meta[k], meta[k], types[k]), (k, got_meta[k], meta[k], types[k])
    assert list(got) == [t[0] for t in tensors]
    tsafe = tmp_path / "mid.tsafe"
    tensorsafe.convert(path, tsafe, sync=False)
    with tensorsafe.open(tsafe) as r:
        for name, qt, shape, data in tensors:
            assert got[name].tobytes() == data, name
            info = r.info(name)
            if qt in PLAIN or qt == QT.BF16:
                assert tuple(got[name].shape) == shape, name
                assert info["metadata"] == {}
            else:
                be, bb = gguf.GGML_QUANT_SIZES[qt]
                assert info["shape"] == (len(data),) and info["dtype"] == "u8"
                assert info["metadata"] == {"gguf.type": qt.name, "gguf.shape": list(shape),
                                            "block_elems": be, "block_bytes": bb}
    return tsafe


@pytest.mark.parametrize("case", range(40))
def test_gguf_py_files_read_and_round_trip(case, rng, tmp_path):
    src = tmp_path / "src.gguf"
    meta, types, tensors = write_random(rng, src, case)
    tsafe = check_read(src, meta, types, tensors, tmp_path)
    want = src.read_bytes()

    direct = tmp_path / "direct.gguf"
    tensorsafe.convert(src, direct, sync=False)
    assert direct.read_bytes() == want
    back = tmp_path / "back.gguf"
    tensorsafe.convert(tsafe, back, sync=False)
    assert back.read_bytes() == want
    if all(qt in PLAIN for _, qt, _, _ in tensors):
        # The Python writer, from what the reader gave: the same bytes too.
        got, got_meta = tensorsafe.read(src)
        again = tmp_path / "again.gguf"
        tensorsafe.write_gguf(again, got, got_meta or None, sync=False)
        assert again.read_bytes() == want
    # A ZIO label sorts its keys (zio.md): values, types and tensors survive,
    # the bytes only when the keys were sorted already. (ZIO has no bf16.)
    if any(qt == QT.BF16 for _, qt, _, _ in tensors):
        return
    zio, via_zio = tmp_path / "mid.zio", tmp_path / "via_zio.gguf"
    tensorsafe.convert(src, zio, sync=False)
    tensorsafe.convert(zio, via_zio, sync=False)
    (zt, zm), (st, sm) = tensorsafe.read(via_zio, packed=True), tensorsafe.read(src, packed=True)
    assert zm == sm and {k: v.tobytes() for k, v in zt.items()} == {k: v.tobytes() for k, v in st.items()}
    keys = [k for k in sm if k != "tensorsafe.gguf_types"]
    assert (via_zio.read_bytes() == want) == (keys == sorted(keys, key=str.encode))


# -- files gguf-py cannot write -------------------------------------------

def kv(key, vt, payload):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vt) + payload


def arr(et, items):
    return struct.pack("<IQ", et, len(items)) + b"".join(items)


def gguf_bytes(kvs, version=3):
    body = b"".join(kvs)
    head = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    out = head + body
    return out + b"\0" * (-len(out) % 32)


def test_empty_arrays_of_every_type(tmp_path):
    # ggml writes empty arrays (gguf_set_arr_data with n = 0); gguf-py reads them.
    kvs = [kv(f"e.{NAMES[t]}", VT.ARRAY, arr(t, [])) for t in NAMES]
    kvs.append(kv("e.array", VT.ARRAY, arr(VT.ARRAY, [])))
    kvs.append(kv("nested.empty", VT.ARRAY, arr(VT.ARRAY, [arr(VT.INT32, []), arr(VT.STRING, [])])))
    kvs.append(kv("bools", VT.ARRAY, arr(VT.BOOL, [b"\x01", b"\x00"])))
    p = tmp_path / "empty.gguf"
    p.write_bytes(gguf_bytes(kvs))
    _, meta = tensorsafe.read(p)
    types = meta.pop("tensorsafe.gguf_types")
    assert meta == {**{f"e.{NAMES[t]}": [] for t in NAMES}, "e.array": [], "nested.empty": [[], []],
                    "bools": [True, False]}
    assert types == {**{f"e.{NAMES[t]}": f"array<{NAMES[t]}>" for t in NAMES}, "e.array": "array<array>",
                     "nested.empty": ["array", "array<int32>", "array<string>"], "bools": "array<bool>"}
    r = gguf.GGUFReader(p)
    assert [r.fields[k].contents() for k in meta if k != "nested.empty"] == [meta[k] for k in meta
                                                                          if k != "nested.empty"]
    out = tmp_path / "out.gguf"
    tensorsafe.convert(p, out, sync=False)
    assert out.read_bytes() == p.read_bytes()


def test_version_2_reads_like_version_3(tmp_path):
    kvs = [kv("a", VT.UINT32, struct.pack("<I", 7)), kv("s", VT.STRING, struct.pack("<Q", 2) + b"hi")]
    v2, v3 = tmp_path / "v2.gguf", tmp_path / "v3.gguf"
    v2.write_bytes(gguf_bytes(kvs, 2))
    v3.write_bytes(gguf_bytes(kvs, 3))
    assert gguf.GGUFReader(v2).fields["a"].contents() == 7
    assert tensorsafe.read(v2) == tensorsafe.read(v3)
    out = tmp_path / "out.gguf"
    tensorsafe.convert(v2, out, sync=False)
    assert out.read_bytes() == v3.read_bytes()  # written back as v3


def test_big_endian_files_are_refused_clearly(tmp_path):
    # gguf-py reads and writes big-endian files; ggml and tensorsafe refuse
    # them (gguf.md §7).
    p = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(p, "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_uint32("a", 1)
    w.add_tensor("w", np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf.GGUFReader(p).endianess == gguf.GGUFEndian.BIG
    with pytest.raises(tensorsafe.UnsupportedError) as e:
        tensorsafe.read(p)
    assert str(p) in str(e.value)
    assert "version field 50331648 looks byte-swapped: big-endian GGUF is not supported" in str(e.value)


def test_tensorsafe_written_files_read_in_gguf_py(rng, tmp_path):
    arrays = {"f32": rng.standard_normal((3, 5)).astype(np.float32),
              "f16": rng.standard_normal((7,)).astype(np.float16),
              "bf16": rng.standard_normal((2, 2, 2)).astype(ml_dtypes.bfloat16),
              "f64": np.float64(2.5), "i8": np.arange(-4, 4, dtype=np.int8).reshape(2, 4),
              "i16": np.arange(6, dtype=np.int16), "i32": np.zeros((0, 3), np.int32),
              "i64": np.arange(24, dtype=np.int64).reshape(1, 2, 3, 4)}
    meta = {"general.architecture": "test", "s": ["a", "bé"], "n": 3, "x": 0.5, "b": True,
            "big": 2**63, "neg": -2**40, "nested": [[1, 2], [3]]}
    p = tmp_path / "ts.gguf"
    tensorsafe.write_gguf(p, arrays, meta, sync=False)
    r = gguf.GGUFReader(p)
    assert {k: r.fields[k].contents() for k in meta if k != "nested"} == \
        {k: v for k, v in meta.items() if k != "nested"}
    assert [t.name for t in r.tensors] == list(arrays)
    for t in r.tensors:
        a = arrays[t.name]
        assert [int(d) for d in reversed(t.shape)] == list(a.shape) or (a.ndim == 0 and len(t.shape) == 0)
        assert np.asarray(t.data).tobytes() == a.tobytes()
    assert r.tensors[2].tensor_type == QT.BF16
