"""The exception hierarchy and the status-code mapping (tensorsafe/errors.py)."""

import errno
import os
import re

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsnp
from tensorsafe import _native, errors


def test_hierarchy():
    assert issubclass(ts.CorruptionError, ts.Error) and issubclass(ts.CorruptionError, ValueError)
    assert issubclass(ts.NotFoundError, KeyError)
    assert issubclass(ts.IOError, OSError)
    assert issubclass(ts.OutOfRangeError, IndexError)
    for cls in (ts.UnsupportedError, ts.LimitExceededError, ts.InvalidArgumentError):
        assert issubclass(cls, ts.Error) and issubclass(cls, ValueError)
    assert issubclass(ts.FailedPreconditionError, RuntimeError)


def test_every_status_code_is_mapped():
    names = _native.status_code_names()
    for code, name in names.items():
        if code == 0:
            continue
        exc = errors._from_status(code, "msg", 0)
        assert isinstance(exc, ts.Error)
        assert exc.code == name, (code, name)  # class codes match the C++ names


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ts.open(tmp_path / "none.tsafe")
    assert isinstance(e.value, ts.IOError) and e.value.errno == errno.ENOENT
    assert "none.tsafe" in str(e.value)


def test_directory_is_an_error(tmp_path):
    with pytest.raises(ts.Error):
        ts.open(tmp_path)


def test_missing_tensor_message(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.add("a", np.zeros(1))
    with pytest.raises(KeyError) as e:
        ts.open(p)["b"]
    assert isinstance(e.value, ts.NotFoundError) and "b" in str(e.value)
    assert not str(e.value).startswith("'")  # not KeyError's quoting


def test_corruption_names_the_file(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.add("a", np.zeros(100))
    data = bytearray(p.read_bytes())
    data[9] ^= 0x40  # inside the fixed header
    p.write_bytes(bytes(data))
    with pytest.raises(ts.CorruptionError) as e:
        ts.open(p)
    assert "x.tsafe" in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads anything")
def test_permission_denied(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.add("a", np.zeros(1))
    p.chmod(0)
    with pytest.raises(PermissionError):
        ts.open(p)


def test_write_into_missing_directory(tmp_path):
    with pytest.raises(OSError) as e:
        ts.Writer(tmp_path / "no" / "x.tsafe")
    assert isinstance(e.value, ts.IOError) and e.value.errno == errno.ENOENT


# A zero dim lets the other dims multiply past 2^63 (FORMAT.md R30 allows up
# to 2^64), which NumPy and torch cannot size: every way of reading such a
# tensor raises UnsupportedError, and the largest shape they can size loads.
_BEYOND = "does not fit NumPy or torch"


def _readers(path):
    return {
        "open mmap": lambda n: ts.open(path)[n],
        "open pread": lambda n: ts.open(path, mode="pread")[n],
        "copy": lambda n: ts.open(path, mode="pread").get(n, copy=True),
        "read_slice": lambda n: ts.open(path).read_slice(n, (slice(None),)),
        "get_many np": lambda n: ts.open(path).get_many([n]),
        "get_many pt": lambda n: ts.open(path).get_many([n], "pt"),
        "safe_open np": lambda n: ts.safe_open(path, "np").get_tensor(n),
        "safe_open pt": lambda n: ts.safe_open(path, "pt").get_tensor(n),
        "get_slice np": lambda n: ts.safe_open(path, "np").get_slice(n)[:],
        "get_slice pt": lambda n: ts.safe_open(path, "pt").get_slice(n)[:],
    }


def test_dense_shape_past_int64_is_unsupported(tmp_path):
    path = str(tmp_path / "zero.tsafe")
    # f32: 4 x (2^61 - 1) < 2^63 bytes fits; 4 x 2^61 does not.
    _native.write_file(path, "tsafe", [("fits", "f32", (0, 2**61 - 1), b"", ""),
                                       ("beyond", "f32", (0, 2**61), b"", "")], "{}", False, False, 64)
    for how, read in _readers(path).items():
        got = read("fits")
        got = got["fits"] if isinstance(got, dict) else got
        assert tuple(got.shape) == (0, 2**61 - 1), how
        with pytest.raises(ts.UnsupportedError, match=r'tensor "beyond": shape \[0, 2305843009213693952\] of f32 '
                           + _BEYOND):
            read("beyond")
    with pytest.raises(ts.UnsupportedError):
        tsnp.load_file(path)  # loads everything, so meets "beyond"
    ts.verify(path)  # the file itself is valid


def test_dataset_sample_shape_past_int64_is_unsupported(tmp_path):
    # The dataset writer cannot make such a value (NumPy cannot size it), so
    # the shard is written again with its shapes column changed, and
    # index.json gets the new size and hash: a valid dataset whose second
    # sample is f32 [0, 2^61].
    import json

    import xxhash
    from tensorsafe import dataset as tds

    root = tmp_path / "ds"
    with tds.Writer(root, schema={"v": ("f32", (None, None))}, sync=False) as w:
        w.add({"v": np.zeros((0, 5), np.float32)})
        w.add({"v": np.zeros((0, 3), np.float32)})
    index = json.loads((root / "index.json").read_text())
    shard = root / index["shards"][0]["name"]
    r = ts.open(shard)
    tensors = []
    for name in r.names():
        a = np.asarray(r.get(name))
        if name == "col/0/shapes":
            a = np.array([[0, 2**61 - 1], [0, 2**61]], dtype=np.int64)
        tensors.append((name, r.info(name)["dtype"], a.shape, a.tobytes(), ""))
    metadata = json.dumps(r.metadata())
    r.close()
    _native.write_file(str(shard), "tsafe", tensors, metadata, False, False, 64)
    data = shard.read_bytes()
    index["shards"][0].update(bytes=len(data), xxh3=xxhash.xxh3_64_hexdigest(data))
    (root / "index.json").write_text(json.dumps(index))
    assert tds.verify(root, all_problems=True) == []

    beyond = r'tensor "v": shape \[0, 2305843009213693952\] of f32 ' + _BEYOND
    ds = tds.Dataset(root)
    assert ds[0]["v"].shape == (0, 2**61 - 1)
    with pytest.raises(ts.UnsupportedError, match=beyond):
        ds[1]
    with pytest.raises(ts.UnsupportedError, match=beyond):
        for _ in ds:
            pass
    with pytest.raises(ts.UnsupportedError, match=beyond):
        for _ in tds.StreamingDataset(root):
            pass


def test_sparse_shape_past_int64_elements_is_unsupported(tmp_path):
    # The fuzz finding (fuzz/python/regressions/coo_shape_numel_overflows_torch):
    # torch.sparse_coo_tensor raised RuntimeError for a dense shape of more
    # than 2^63-1 elements. A sparse tensor's limit is elements, not bytes.
    path = str(tmp_path / "coo.tsafe")
    one = np.zeros((1, 1), np.int64)
    tsnp.save_file({"fits": ts.SparseCoo(indices=one, values=np.ones(1, np.float32), shape=(2**63 - 1,)),
                        "beyond": ts.SparseCoo(indices=np.zeros((2, 1), np.int64), values=np.ones(1, np.float32),
                                               shape=(2**62, 2))}, path)
    r = ts.open(path)
    assert r.get("fits", "pt").shape == (2**63 - 1,)
    assert r["fits"].shape == (2**63 - 1,)
    for framework in ("np", "pt"):
        with pytest.raises(ts.UnsupportedError, match=r'"beyond": shape \[4611686018427387904, 2\] of f32 does '
                                                      r"not fit torch"):
            r.get("beyond", framework)


def test_check_shape_rule():
    _native.check_shape("t", "u8", (2**63 - 1,))
    _native.check_shape("t", "u8", (0, 2**63 - 1, 1))  # a zero dim: the others are checked alone
    _native.check_shape("t", "f64", (2**60 - 1,))
    _native.check_shape("t", "i4", (2**63 - 1,))  # packed: NumPy sees the bytes, fewer than the elements
    for dtype, shape in (("u8", (2**63,)), ("f64", (2**60,)), ("u8", (0, 2**63)), ("c128", (2**59, 0, 1))):
        with pytest.raises(ts.UnsupportedError, match=_BEYOND):
            _native.check_shape("t", dtype, shape)


def test_metadata_keys_must_be_str(tmp_path):
    # json.dumps would turn 1, None and True into "1", "null", "true".
    a = {"a": np.zeros(2, np.float32)}
    for md, key in (({1: "v"}, "1"), ({None: "x"}, "None"), ({"ok": {True: 1}}, "True"),
                    ({"ok": [{"x": 1}, {2: 3}]}, "2")):
        with pytest.raises(ts.InvalidArgumentError, match=f"metadata key {key} is a "):
            tsnp.save_file(a, tmp_path / "x.safetensors", metadata=md)
        with pytest.raises(ts.InvalidArgumentError, match=f"metadata key {key} is a "):
            with ts.Writer(tmp_path / "x.tsafe") as w:
                w.set_metadata(md)
    assert not list(tmp_path.iterdir())


def test_unsupported_numpy_dtype_messages(tmp_path):
    with pytest.raises(ts.UnsupportedError) as e:
        tsnp.save_file({"s": np.array(["abc"])}, tmp_path / "x.tsafe")
    assert "NumPy dtype <U3 has no tensorsafe dtype" in str(e.value) and "pack them first" not in str(e.value)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(ts.UnsupportedError, match="unpacked int4/uint4/float4/float6 are not stored: pack them first"):
        tsnp.save_file({"q": np.zeros(4, ml_dtypes.int4)}, tmp_path / "x.tsafe")


def test_another_format_is_named_not_called_corrupt(tmp_path):
    # open, Updater and compact take .tsafe files only: a valid file of
    # another format is UnsupportedError naming it, random bytes corruption.
    st = tmp_path / "m.safetensors"
    tsnp.save_file({"a": np.zeros(2, np.float32)}, st)
    npy = tmp_path / "a.npy"
    np.save(npy, np.zeros(3))
    for path, fmt in ((st, "safetensors"), (npy, "npy")):
        want = f"{path} is not a tsafe file: its format is {fmt}; `tensorsafe convert "
        for call in (lambda: ts.open(path), lambda: ts.Updater(path), lambda: ts.compact(path)):
            with pytest.raises(ts.UnsupportedError, match=re.escape(want)):
                call()
    noise = tmp_path / "noise.tsafe"
    noise.write_bytes(b"x" * 300)
    with pytest.raises(ts.CorruptionError, match="bad magic"):
        ts.open(noise)
