"""Every format's codec through tensorsafe.read / write / convert, and the CLI."""

import os
import shutil
import subprocess
import sys

import warnings

import numpy as np
import pytest

import tensorsafe as ts


def test_npy_npz_match_numpy(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ts.write_npy(tmp_path / "a.npy", a)
    np.save(tmp_path / "ref.npy", a)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()
    np.testing.assert_array_equal(ts.read_npy(tmp_path / "ref.npy"), a)
    # Fortran order and big-endian are converted on read.
    np.save(tmp_path / "f.npy", np.asfortranarray(a).astype(">f4"))
    np.testing.assert_array_equal(ts.read_npy(tmp_path / "f.npy"), a)
    d = {"x": a, "y": np.arange(3, dtype=np.int8)}
    ts.write_npz(tmp_path / "d.npz", d)
    np.savez(tmp_path / "ref.npz", **d)
    assert (tmp_path / "d.npz").read_bytes() == (tmp_path / "ref.npz").read_bytes()
    ts.write_npz(tmp_path / "c.npz", d, compress=True)
    with np.load(tmp_path / "c.npz") as z:
        np.testing.assert_array_equal(z["x"], a)
    got = ts.read_npz(tmp_path / "c.npz")
    np.testing.assert_array_equal(got["y"], d["y"])


def _npy_with_header(path, header, data=b""):
    # NumPy's own header writer, given a dict np.save would never produce.
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)


def test_npy_descr_byte_order_is_optional_like_numpy(tmp_path):
    # np.dtype reads "f4" and "|f4" as native ("=f4").
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    for descr in ("f4", "|f4", "=f4"):
        p = tmp_path / f"{descr.strip('|=')}.npy"
        _npy_with_header(p, {"descr": descr, "fortran_order": False, "shape": (2, 3)}, a.tobytes())
        want = np.load(p)
        got = ts.read_npy(p)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_npy_refuses_shapes_numpy_cannot_hold(tmp_path):
    # Empty, but the non-zero dims times the item size pass 2^63 - 1.
    for shape in [(0, 2**61), (2**63, 0)]:
        p = tmp_path / "big.npy"
        _npy_with_header(p, {"descr": "<f4", "fortran_order": False, "shape": shape})
        with pytest.raises(ValueError):
            np.load(p)
        with pytest.raises(ts.CorruptionError, match="NumPy's array size limit"):
            ts.read_npy(p)


def test_npz_empty_name_matches_numpy(tmp_path):
    # np.savez(**{"": a}) stores member ".npy"; np.load gives it back as "".
    a = np.arange(3, dtype=np.int32)
    np.savez(tmp_path / "ref.npz", **{"": a})
    got = ts.read_npz(tmp_path / "ref.npz")
    assert list(got) == [""]
    np.testing.assert_array_equal(got[""], a)
    ts.write_npz(tmp_path / "t.npz", {"": a})
    assert (tmp_path / "t.npz").read_bytes() == (tmp_path / "ref.npz").read_bytes()


def test_npy_refuses_pickles(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(ts.UnsupportedError):
        ts.read_npy(tmp_path / "o.npy")


@pytest.mark.parametrize("fmt,ext", [("gguf", "gguf"), ("tenbin", "ten"), ("btf", "btf"), ("zio", "zio"),
                                     ("tsafe", "tsafe"), ("safetensors", "safetensors")])
def test_round_trip_each_format(tmp_path, fmt, ext):
    d = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.arange(4, dtype=np.int32)}
    p = tmp_path / f"x.{ext}"
    ts.write(p, d, None, drop_names=fmt == "btf")
    # ZIO is recognised by its header frame's length prefix, "ZIO" and level.
    assert ts.detect_format(p) == fmt
    got, _ = ts.read(p, fmt)
    if fmt == "btf":  # BTF has no names: records are "0", "1", ...
        got = dict(zip(d, got.values()))
    for k, v in d.items():
        np.testing.assert_array_equal(got[k], v)


def test_gguf_metadata_and_reader(tmp_path):
    gguf = pytest.importorskip("gguf")
    p = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_uint32("answer", 42)
    w.add_tensor("t", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    tensors, meta = ts.read_gguf(p)
    assert meta["answer"] == 42 and meta["general.architecture"] == "llama"
    np.testing.assert_array_equal(tensors["t"], np.arange(8, dtype=np.float32).reshape(2, 4))


def test_convert(tmp_path):
    import tensorsafe.numpy as tsn
    d = {"a": np.arange(5, dtype=np.float64), "b": np.ones((2, 2), np.int16)}
    tsn.save_file(d, tmp_path / "x.safetensors", metadata={"k": "v"})
    ts.convert(tmp_path / "x.safetensors", tmp_path / "x.tsafe")
    r = ts.open(tmp_path / "x.tsafe")
    assert r.metadata() == {"k": "v"} and sorted(r.names()) == ["a", "b"]
    # npz has no file metadata: Convert() refuses to lose it without consent.
    with pytest.raises(ts.UnsupportedError, match="metadata"):
        ts.convert(tmp_path / "x.tsafe", tmp_path / "y.npz")
    stats = ts.convert(tmp_path / "x.tsafe", tmp_path / "y.npz", drop_metadata=True)
    assert stats["from"] == "tsafe" and stats["to"] == "npz" and stats["tensor_count"] == 2
    np.testing.assert_array_equal(np.load(tmp_path / "y.npz")["a"], d["a"])
    ts.convert(tmp_path / "x.tsafe", tmp_path / "z.bin", dst_format="safetensors")
    assert ts.detect_format(tmp_path / "z.bin") == "safetensors"
    with pytest.raises(ts.InvalidArgumentError):
        ts.convert(tmp_path / "x.tsafe", tmp_path / "z.unknown")
    import ml_dtypes
    tsn.save_file({"h": np.zeros(2, ml_dtypes.bfloat16)}, tmp_path / "h.safetensors")
    with pytest.raises(ts.UnsupportedError):
        ts.convert(tmp_path / "h.safetensors", tmp_path / "h.ten")
    assert not (tmp_path / "h.ten").exists()


def test_unknown_format(tmp_path):
    (tmp_path / "junk.dat").write_bytes(b"hello world, not tensors")
    assert ts.detect_format(tmp_path / "junk.dat") == "unknown"
    with pytest.raises(ts.UnsupportedError):
        ts.read(tmp_path / "junk.dat")
    # .bin names a PyTorch checkpoint when the content does not decide; its
    # reader finds none and says so.
    (tmp_path / "junk.bin").write_bytes(b"hello world, not tensors")
    assert ts.detect_format(tmp_path / "junk.bin") == "pytorch"
    with pytest.raises(ts.UnsupportedError, match="not a PyTorch checkpoint either"):
        ts.read(tmp_path / "junk.bin")


def test_cli_console_script(tmp_path):
    exe = shutil.which("tensorsafe", path=os.path.dirname(sys.executable))
    assert exe, "the tensorsafe console script is not installed beside this python"
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.add("w", np.zeros((2, 3), np.float32))
    out = subprocess.run([exe, "ls", str(p)], capture_output=True, text=True, check=True).stdout
    assert "w" in out and "f32" in out and "[2, 3]" in out
    bad = subprocess.run([exe, "cat", str(p), "nope"], capture_output=True, text=True)
    assert bad.returncode == 3  # kNotFound, docs/ERRORS.md


def test_bytes_api_for_both_formats(tmp_path):
    import tensorsafe.numpy as tsn
    d = {"a": np.arange(4, dtype=np.int16), "b": np.eye(2, dtype=np.float32)}
    for ext in ("tsafe", "safetensors"):
        p = tmp_path / f"x.{ext}"
        tsn.save_file(d, p)
        back = tsn.load(p.read_bytes())  # format told by the magic
        assert sorted(back) == ["a", "b"]
        np.testing.assert_array_equal(back["b"], d["b"])
    with pytest.raises(ts.CorruptionError):
        tsn.load(b"\x89TSF\r\n\x1a\n" + b"\0" * 8)


def test_streamed_native_writer(tmp_path):
    """Writer.begin_tensor/append/end_tensor through the native module."""
    from tensorsafe import _native
    p = tmp_path / "s.tsafe"
    w = _native.Writer.create(str(p), 64, False)
    w.begin_tensor("big", "u8", [10])
    w.append(np.arange(4, dtype=np.uint8))
    w.append(np.arange(4, 10, dtype=np.uint8))
    w.end_tensor()
    w.finish()
    assert list(ts.open(p)["big"]) == list(range(10))
    w = _native.Writer.create(str(tmp_path / "t.tsafe"), 64, False)
    w.begin_tensor("short", "u8", [10])
    w.append(np.arange(4, dtype=np.uint8))
    with pytest.raises(ts.Error):
        w.end_tensor()


def test_format_table_is_the_native_one():
    names = [row["name"] for row in ts.formats.FORMAT_TABLE]
    assert names == list(ts.FORMATS) and names[0] == "tsafe" and len(set(names)) == len(names)
    assert ts.formats.format_for_path("a/b.TEN") == "tenbin"
    for row in ts.formats.FORMAT_TABLE:
        for ext in row["extensions"]:
            assert ts.formats.format_for_path(f"x.{ext}") == row["name"]
    tsafe = ts.formats.FORMAT_TABLE[0]
    assert tsafe["checksums"] and tsafe["sparse_coo"] and tsafe["file_metadata"] == "any"


def test_write_refuses_what_convert_refuses(tmp_path):
    # write() and convert() share one consent check (PrepareForFormat).
    d = {"w": np.arange(3, dtype=np.float32), "i": np.arange(2, dtype=np.int8)}
    ts.write(tmp_path / "src.tsafe", d, {"k": "v"})
    with pytest.raises(ts.InvalidArgumentError, match='tensor 0 "w": BTF stores no names, so it would read back as "0"'):
        ts.write(tmp_path / "x.btf", d, drop_names=False)
    with pytest.raises(ts.InvalidArgumentError, match='BTF stores no names'):
        ts.convert(tmp_path / "src.tsafe", tmp_path / "x.btf", drop_metadata=True)
    with pytest.raises(ts.UnsupportedError, match="npz has no file metadata"):
        ts.write(tmp_path / "x.npz", d, {"k": "v"}, drop_metadata=False)
    with pytest.raises(ts.UnsupportedError, match="npz has no file metadata"):
        ts.convert(tmp_path / "src.tsafe", tmp_path / "x.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.tsafe"]
    # Consent given: no warning, the same bytes as convert writes.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts.write(tmp_path / "w.btf", d, {"k": "v"}, drop_names=True, drop_metadata=True)
    ts.convert(tmp_path / "src.tsafe", tmp_path / "c.btf", drop_names=True, drop_metadata=True)
    assert (tmp_path / "w.btf").read_bytes() == (tmp_path / "c.btf").read_bytes()
    # A consent write() never applied silently (stringify) stays strict.
    with pytest.raises(ts.InvalidArgumentError, match="stringify_metadata"):
        ts.write(tmp_path / "x.safetensors", d, {"n": 1})


@pytest.mark.parametrize("ext,flag", [("btf", "drop_names"), ("npz", "drop_metadata"), ("ten", "drop_metadata")])
def test_write_warns_before_tightening(tmp_path, ext, flag):
    # Left unset, the consents write() applied silently warn and go ahead
    # for one release (docs/python.md, "Deprecations").
    d = {"w": np.arange(3, dtype=np.float32)}
    meta = {"k": "v"} if flag == "drop_metadata" else None
    with pytest.warns(DeprecationWarning, match=f"pass {flag}=True to consent"):
        ts.write(tmp_path / f"x.{ext}", d, meta)
    got, got_meta = ts.read(tmp_path / f"x.{ext}")
    np.testing.assert_array_equal(next(iter(got.values())), d["w"])
    assert got_meta == {}
