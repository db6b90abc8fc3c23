"""tensorsafe.lmdb against the CLI's `lmdb put | get | ls | rm` on the same
store, zero-copy gets (views of the map that outlive the store object),
checks on damaged values, and the errors of a missing key or store."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tensorsafe
from tensorsafe.lmdb import Entry, Store

from helpers import NUMPY_DTYPES, random_array, same_bits


def cli(*args, check=True):
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tensorsafe"), "lmdb", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture
def model(tmp_path, rng):
    tensors = {f"t_{name}": random_array(rng, dt, (3, 4)) for name, dt in NUMPY_DTYPES.items()}
    path = tmp_path / "model.tsafe"
    tensorsafe.write(path, tensors, {"source": "test"})
    return path, tensors


def test_python_and_cli_share_a_store(tmp_path, model):
    path, tensors = model
    db = tmp_path / "db"
    with Store(db) as s:
        assert s.load(path) == len(tensors)  # lmdb put: one batch per tensor, key = name
        s.put("mine", {"a": np.arange(6, dtype=np.int16).reshape(2, 3)}, {"step": 7})
    # The CLI reads what Python wrote ...
    ls = cli("ls", db).stdout
    assert "mine" in ls and "t_bf16" in ls
    out = tmp_path / "mine.tsafe"
    cli("get", db, "mine", out)
    got, meta = tensorsafe.read(out)
    assert got["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and meta == {"step": 7}
    # ... and Python what the CLI wrote (--group 0: the whole file under its name; --key).
    cli("put", db, path, "--group", "0", "--prefix", "whole/")
    cli("put", db, path, "--key", "k")
    with Store(db, read_only=True) as s:
        whole, meta = s.get("whole/model", with_metadata=True)
        assert meta == {"source": "test"}
        assert sorted(whole) == sorted(tensors)
        for name, want in tensors.items():
            assert same_bits(whole[name], want), name
            assert same_bits(s[name][name], want), name  # group 1: key = tensor name
            assert same_bits(s["k"][name], want), name
        entries = s.ls("whole/")
        assert entries == [Entry("whole/model", len(tensors), entries[0].bytes)]
        assert "mine" in s and "nope" not in s
        assert len(s) == len(tensors) + 3
    # rm from Python, seen by the CLI; a missing key is a KeyError in both.
    with Store(db) as s:
        s.rm("mine")
        with pytest.raises(KeyError, match="no key"):
            s.rm("mine")
        with pytest.raises(tensorsafe.NotFoundError):
            s.get("mine")
    r = cli("get", db, "mine", check=False)
    assert r.returncode != 0 and "no key" in r.stderr


def test_gets_are_zero_copy_and_outlive_the_store(tmp_path, rng):
    big = random_array(rng, np.float32, (256, 1024))  # 1 MiB: an overflow page, 16-byte aligned
    db = tmp_path / "db"
    s = Store(db)
    s.put("big", {"w": big})
    got = s.get("big")["w"]
    assert not got.flags.writeable and not got.flags.owndata
    view_base = got.base
    while getattr(view_base, "base", None) is not None:
        view_base = view_base.base
    assert isinstance(view_base, tensorsafe.TensorBuffer)
    copy = s.get("big", copy=True)["w"]
    s.close()
    del s
    assert same_bits(got, big) and same_bits(copy, big)  # the views keep their transaction open
    pt = Store(db, read_only=True, framework="pt").get("big")["w"]
    assert str(pt.dtype) == "torch.float32" and same_bits(pt.numpy(), big)
    with Store(db, read_only=True) as s, s.snapshot() as snap:
        assert same_bits(snap.get("big")["w"], big)
        assert snap.ls() == [Entry("big", 1, snap.ls()[0].bytes)]


def test_damaged_value_is_refused(tmp_path):
    db = tmp_path / "db"
    with Store(db, sync=False) as s:
        s.put("k", {"x": np.full(4096, 7, np.uint8)})
    data = db / "data.mdb"
    raw = bytearray(data.read_bytes())
    at = raw.find(bytes([7]) * 4096)
    assert at > 0
    raw[at + 100] ^= 0xFF
    data.write_bytes(bytes(raw))
    with Store(db, read_only=True) as s:
        with pytest.raises(tensorsafe.CorruptionError, match="checksum"):
            s.get("k")
    with Store(db, read_only=True, verify=False) as s:
        assert s.get("k")["x"][100] == 7 ^ 0xFF


def test_missing_store_and_bad_batches(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such store"):
        Store(tmp_path / "nothing", read_only=True)
    with Store(tmp_path / "db") as s:
        with pytest.raises(tensorsafe.InvalidArgumentError):
            s.put("", {"x": np.zeros(1)})
        s.put_many([("a", {"x": np.zeros(2)}), ("b", [np.ones(1)], {"m": 1})])
        assert s.keys() == ["a", "b"]
        assert s.get("b", with_metadata=True)[1] == {"m": 1}
        assert s.get("b")[0].tolist() == [1.0]  # a list batch comes back as a list
