"""tensorsafe.open / Writer / Updater / compact / verify."""

import os

import numpy as np
import pytest

import tensorsafe as ts


def write_sample(path, **kw):
    with ts.Writer(path, **kw) as w:
        w.add("a", np.arange(12, dtype=np.float32).reshape(3, 4), metadata={"role": "weight"})
        w.add("b", np.array([1, -2, 3], dtype=np.int64))
        w.add("s", np.float64(2.5))
        w.set_metadata({"framework": "np", "nested": {"k": [1, 2]}})
    return path


def test_writer_reader_round_trip(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    with ts.open(p) as r:
        assert len(r) == 3
        assert r.names() == ["a", "b", "s"] == list(r)
        assert "a" in r and "zz" not in r and 3 not in r
        np.testing.assert_array_equal(r["a"], np.arange(12, dtype=np.float32).reshape(3, 4))
        assert r["s"].shape == () and r["s"] == 2.5
        assert r.metadata() == {"framework": "np", "nested": {"k": [1, 2]}}
        info = r.info("a")
        assert info["dtype"] == "f32" and info["shape"] == (3, 4) and info["nbytes"] == 48
        assert info["metadata"] == {"role": "weight"} and info["offset"] % 64 == 0
        assert r.summary()["tensor_count"] == 3


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_modes_and_slices(tmp_path, mode):
    p = tmp_path / "x.tsafe"
    a = np.arange(2 * 5 * 7, dtype=np.int32).reshape(2, 5, 7)
    with ts.Writer(p) as w:
        w.add("a", a)
    with ts.open(p, mode=mode) as r:
        for key in [np.s_[1], np.s_[-1, 2:4], np.s_[:, ::2], np.s_[..., -1], np.s_[:, ::-2, 1:6:3],
                    np.s_[::-1], np.s_[0, 1, 2], (), np.s_[:, 4:1:-1], np.s_[3:], np.s_[:, 10:20]]:
            np.testing.assert_array_equal(r.read_slice("a", key), a[key], err_msg=str(key))
        with pytest.raises(ts.OutOfRangeError):
            r.read_slice("a", 2)
        with pytest.raises(IndexError):
            r.read_slice("a", (0, 0, 0, 0))
        with pytest.raises(ts.InvalidArgumentError):
            r.read_slice("a", (Ellipsis, Ellipsis))


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_large_reads_with_any_thread_count(tmp_path, mode):
    # 40 MiB: past the 32 MiB from which reads are split across threads.
    p = tmp_path / "x.tsafe"
    a = (np.arange(10 * 2**20 + 3, dtype=np.uint32) * 2654435761).astype(np.uint32)
    with ts.Writer(p) as w:
        w.add("a", a)
    for threads in (0, 1, 3):
        with ts.open(p, mode=mode, read_threads=threads) as r:
            np.testing.assert_array_equal(r.get("a", copy=True), a)
            np.testing.assert_array_equal(r.get_many(copy=True)["a"], a)
    for bad in (-1, 65, 1.5, True, "2"):
        with pytest.raises(ts.InvalidArgumentError, match="read_threads must be an int from 0 to 64"):
            ts.open(p, read_threads=bad)


def test_writer_discards_on_error(tmp_path):
    p = tmp_path / "x.tsafe"
    with pytest.raises(RuntimeError):
        with ts.Writer(p) as w:
            w.add("a", np.zeros(3))
            raise RuntimeError("boom")
    assert not p.exists()
    assert os.listdir(tmp_path) == []  # no temp file left behind


def test_writer_errors(tmp_path):
    p = tmp_path / "x.tsafe"
    w = ts.Writer(p)
    w.add("a", np.zeros(3))
    with pytest.raises(ts.InvalidArgumentError, match="a"):
        w.add("a", np.zeros(3))  # duplicate
    with pytest.raises(ts.UnsupportedError):
        w.add("o", np.array(["x"], dtype=object))
    w.finish()
    with pytest.raises(ts.FailedPreconditionError):
        w.add("c", np.zeros(1))
    assert ts.open(p).names() == ["a"]


def test_noncontiguous_and_big_endian_inputs(tmp_path):
    p = tmp_path / "x.tsafe"
    a = np.arange(24, dtype=np.float64).reshape(4, 6)
    be = np.arange(5, dtype=">i4")
    with ts.Writer(p) as w:
        w.add("t", a.T)
        w.add("s", a[:, ::2])
        w.add("be", be)
    r = ts.open(p)
    np.testing.assert_array_equal(r["t"], a.T)
    np.testing.assert_array_equal(r["s"], a[:, ::2])
    assert r["be"].dtype == np.dtype("<i4") and list(r["be"]) == [0, 1, 2, 3, 4]


def test_updater(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    before = ts.open(p)
    with ts.Updater(p) as u:
        u.add("c", np.ones(4, np.float16))
        u.replace("b", np.array([7, 8], np.int8))
        u.rename("s", "scalar")
        u.remove("a")
        u.update_metadata({"step": 3, "nested": None})
        assert "c" in u and "a" not in u
    r = ts.open(p)
    assert sorted(r.names()) == ["b", "c", "scalar"]
    assert r["b"].dtype == np.int8 and list(r["b"]) == [7, 8]
    assert r.metadata() == {"framework": "np", "step": 3}
    # A reader opened before the commit keeps its snapshot.
    assert before.names() == ["a", "b", "s"] and before["a"][2, 3] == 11


def test_updater_aborts_on_error(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    with pytest.raises(ZeroDivisionError):
        with ts.Updater(p) as u:
            u.remove("a")
            1 / 0
    assert ts.open(p).names() == ["a", "b", "s"]
    with pytest.raises(ts.NotFoundError):
        with ts.Updater(p) as u:
            u.remove("nope")


def test_updater_lock(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    u = ts.Updater(p)
    with pytest.raises(ts.FailedPreconditionError):
        ts.Updater(p)
    u.abort()
    del u
    ts.Updater(p).abort()


def test_compact_and_verify(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    with ts.Updater(p) as u:
        u.replace("a", np.zeros((3, 4), np.float32))
    before, after = ts.compact(p)
    assert after < before == os.path.getsize(p) + (before - after)
    assert ts.verify(p) == {"tensors": 3, "data_bytes": 48 + 24 + 8}
    # Flip one data byte of "b": verify names it.
    off = ts.open(p).info("b")["offset"]
    data = bytearray(p.read_bytes())
    data[off] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(ts.CorruptionError, match='"b"'):
        ts.verify(p)
    with pytest.raises(ValueError):
        ts.open(p).verify()


def test_get_frameworks(tmp_path):
    torch = pytest.importorskip("torch")
    p = write_sample(tmp_path / "x.tsafe")
    r = ts.open(p)
    t = r.get("a", framework="pt")
    assert isinstance(t, torch.Tensor) and t.shape == (3, 4) and t[2, 3] == 11
    buf = r.get("a", framework="buffer")
    assert isinstance(buf, ts.TensorBuffer) and buf.nbytes == 48
    with pytest.raises(ts.InvalidArgumentError):
        r.get("a", framework="tf")
    many = r.get_many(["b", "a"])
    assert list(many) == ["b", "a"]
    with pytest.raises(KeyError):
        r.get_many(["a", "missing"])


def test_closed_reader(tmp_path):
    p = write_sample(tmp_path / "x.tsafe")
    r = ts.open(p)
    r.close()
    with pytest.raises(ts.FailedPreconditionError):
        r["a"]


def test_bad_mode(tmp_path):
    with pytest.raises(ts.InvalidArgumentError):
        ts.open(write_sample(tmp_path / "x.tsafe"), mode="direct")


def test_metadata_json_types(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.set_metadata({"f": 1.5, "b": True, "n": None, "s": "é"})
    assert ts.open(p).metadata() == {"f": 1.5, "b": True, "n": None, "s": "é"}
    with pytest.raises(TypeError):
        with ts.Writer(tmp_path / "y.tsafe") as w:
            w.set_metadata({"x": object()})
    assert not (tmp_path / "y.tsafe").exists()


def test_entry_buffer_must_match_dtype_and_shape(tmp_path):
    """The writer reads dtype x shape bytes from an entry's buffer: a buffer
    of another size is refused before anything is read from it."""
    from tensorsafe import _native

    small = np.zeros(4, np.float32)
    for entry in [("x", "f32", (1000,), small, ""), ("x", "f32", (2,), small, ""), ("x", "u8", (15,), small, "")]:
        with pytest.raises(ts.InvalidArgumentError, match=r"tensor \"x\": 16 bytes of data for"):
            _native.write_file(str(tmp_path / "x.tsafe"), "tsafe", [entry], "", False, False, 64)
    assert not (tmp_path / "x.tsafe").exists()
    _native.write_file(str(tmp_path / "x.tsafe"), "tsafe", [("x", "u8", (16,), small, "")], "", False, False, 64)
    assert ts.open(tmp_path / "x.tsafe")["x"].nbytes == 16


def test_entry_shape_none_takes_the_arrays_own(tmp_path):
    """A shape of None means the ndarray's own (numpy save passes arrays so);
    it needs an ndarray as data, and a dtype name that does not match the
    array's bytes is still refused. Dtype names alternate, so a parse reused
    from the previous entry would give a wrong dtype."""
    from tensorsafe import _native

    path = str(tmp_path / "x.tsafe")
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(5, dtype=np.int64)
    c = np.array(1.5)  # 0-d
    entries = [("a", "f32", None, a, ""), ("b", "i64", None, b, ""), ("a2", "f32", None, a[1], ""),
               ("c", "f64", None, c, ""), ("b2", "i64", (5,), b, "")]
    _native.write_file(path, "tsafe", entries, "", False, False, 64)
    with ts.open(path) as r:
        assert [(n, r.info(n)["dtype"], r.info(n)["shape"]) for n in r] == [
            ("a", "f32", (2, 3, 4)), ("b", "i64", (5,)), ("a2", "f32", (3, 4)), ("c", "f64", ()), ("b2", "i64", (5,))]
        np.testing.assert_array_equal(r["a"], a)
        np.testing.assert_array_equal(r["a2"], a[1])
        assert r["c"] == 1.5
    with pytest.raises(ts.InvalidArgumentError, match=r'tensor "m": a shape of None needs an ndarray as data'):
        _native.write_file(str(tmp_path / "m.tsafe"), "tsafe", [("m", "u8", None, b"abcd", "")], "", False, False, 64)
    with pytest.raises(ts.InvalidArgumentError, match=r'tensor "w": 96 bytes of data for i64 \[2, 3, 4\]'):
        _native.write_file(str(tmp_path / "w.tsafe"), "tsafe", [("w", "i64", None, a, "")], "", False, False, 64)
    assert not (tmp_path / "m.tsafe").exists() and not (tmp_path / "w.tsafe").exists()
