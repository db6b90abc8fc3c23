"""The exception hierarchy and the status-code mapping (tensorsafe/errors.py)."""

import errno
import os

import numpy as np
import pytest

import tensorsafe as ts
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
