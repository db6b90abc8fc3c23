"""The core of safetensors 0.8's module (what its Rust extension exports):
SafetensorError, TensorSpec, serialize, serialize_file, deserialize,
safe_open (_safe_open_handle is in _handle.py), on tensorsafe's readers and writers.

Names, signatures, exception classes and the messages callers test are
safetensors' own; every deliberate difference is listed in docs/python.md
("The safetensors drop-in") and pinned by tests/python/test_safetensors_dropin.py.
"""

from __future__ import annotations

import errno
import json
import operator
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _dtypes, _native
from .._load import is_url
from ..safe_open import safe_open as _TsSafeOpen
from ..errors import (
    _IO_BY_ERRNO,
    CorruptionError,
    Error,
    FailedPreconditionError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    OutOfRangeError,
    UnsupportedError,
)
from .._slicing import read_slice_from_view, slice_array

# safetensors raises one class for everything it checks; every tensorsafe
# error is one, so `except SafetensorError` catches what it caught (and a
# missing file too, which safetensors raises as a plain FileNotFoundError).
SafetensorError = Error

# TensorSpec's dtype names (torch's) -> (safetensors code, tensorsafe name).
_SPEC_DTYPES: Dict[str, Tuple[str, str]] = {
    "bool": ("BOOL", "bool"), "int8": ("I8", "i8"), "uint8": ("U8", "u8"), "int16": ("I16", "i16"),
    "uint16": ("U16", "u16"), "int32": ("I32", "i32"), "uint32": ("U32", "u32"), "int64": ("I64", "i64"),
    "uint64": ("U64", "u64"), "float16": ("F16", "f16"), "float32": ("F32", "f32"), "float64": ("F64", "f64"),
    "bfloat16": ("BF16", "bf16"), "float8_e4m3fn": ("F8_E4M3", "f8_e4m3fn"),
    "float8_e4m3fnuz": ("F8_E4M3FNUZ", "f8_e4m3fnuz"), "float8_e5m2": ("F8_E5M2", "f8_e5m2"),
    "float8_e5m2fnuz": ("F8_E5M2FNUZ", "f8_e5m2fnuz"), "float8_e8m0fnu": ("F8_E8M0", "f8_e8m0"),
    "float4_e2m1fn_x2": ("F4", "f4_e2m1"), "complex64": ("C64", "c64"),
}
_CODE_TO_NAME = {code: name for code, name in _SPEC_DTYPES.values()}
_CODE_TO_NAME.update({"F6_E2M3": "f6_e2m3", "F6_E3M2": "f6_e3m2"})
_BITS = {"bool": 8, "i8": 8, "u8": 8, "i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64, "u64": 64,
         "f16": 16, "f32": 32, "f64": 64, "bf16": 16, "f8_e4m3fn": 8, "f8_e4m3fnuz": 8, "f8_e5m2": 8,
         "f8_e5m2fnuz": 8, "f8_e8m0": 8, "f4_e2m1": 4, "c64": 64}
_U64 = 1 << 64


def _type_error(arg: str, value: Any, want: str) -> TypeError:
    return TypeError(f"argument '{arg}': '{type(value).__name__}' object is not an instance of '{want}'")


def _unsigned(value: Any, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"argument '{arg}': '{type(value).__name__}' object cannot be interpreted as an "
                            "integer") from None
    if value < 0:
        raise OverflowError(f"argument '{arg}': can't convert negative int to unsigned")
    if value >= _U64:
        raise OverflowError(f"argument '{arg}': int too big to convert")
    return int(value)


def _prefixed(e: Error, prefix: str) -> Error:
    """The same error with `prefix` before its message (I/O errors keep theirs)."""
    if isinstance(e, OSError):
        return e
    out = type(e)(prefix + str(e))
    out.__cause__ = e.__cause__
    return out


class TensorSpec:
    """Describes one tensor for :func:`serialize` / :func:`serialize_file`:
    ``TensorSpec(dtype="float32", shape=[2, 3], data_ptr=addr, data_len=24)``.

    ``dtype`` is torch's name (``"float32"``, ``"bfloat16"``,
    ``"float4_e2m1fn_x2"``...); the ``dtype`` property is the safetensors
    code (``"F32"``). For ``float4_e2m1fn_x2`` the last dimension of
    ``shape`` is doubled (two values per byte). The memory at ``data_ptr``
    must stay valid while a serialize call that uses the spec runs.

    Raises:
        SafetensorError: an unknown dtype.
        TypeError / OverflowError: arguments of the wrong type or sign.
    """

    __slots__ = ("_code", "_name", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        if not isinstance(dtype, str):
            raise TypeError(f"argument 'dtype': '{type(dtype).__name__}' object cannot be converted to 'PyString'")
        known = _SPEC_DTYPES.get(dtype)
        if known is None:
            raise InvalidArgumentError(
                f'Unknown dtype "{dtype}". Supported dtypes: ' + ", ".join(_SPEC_DTYPES))
        if isinstance(shape, str):
            raise TypeError("argument 'shape': Can't extract `str` to `Vec`")
        dims = [_unsigned(d, "shape") for d in shape]
        if known[0] == "F4" and dims:
            if dims[-1] * 2 >= _U64:
                raise InvalidArgumentError(f"F4 last-dim {dims[-1]} doubled to logical shape overflows usize")
            dims[-1] *= 2
        object.__setattr__(self, "_code", known[0])
        object.__setattr__(self, "_name", known[1])
        object.__setattr__(self, "_shape", dims)
        object.__setattr__(self, "_data_ptr", _unsigned(data_ptr, "data_ptr"))
        object.__setattr__(self, "_data_len", _unsigned(data_len, "data_len"))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"'TensorSpec' object attribute '{name}' is read-only")

    @property
    def dtype(self) -> str:
        """The safetensors code ("F32", "BF16", ...)."""
        return self._code

    @property
    def shape(self) -> List[int]:
        """The logical shape, as written in the header."""
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        return self._data_ptr

    @property
    def data_len(self) -> int:
        return self._data_len

    def __repr__(self) -> str:
        return (f"TensorSpec(dtype='{self._code}', shape={self._shape}, data_ptr={self._data_ptr}, "
                f"data_len={self._data_len})")


def _metadata_json(metadata: Any) -> str:
    if metadata is None:
        return ""
    if not isinstance(metadata, dict):
        raise _type_error("metadata", metadata, "dict")
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise _type_error("metadata", k, "str")
        if not isinstance(v, str):
            raise _type_error("metadata", v, "str")
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)


def _spec_entries(tensor_dict: Any) -> List[tuple]:
    if not isinstance(tensor_dict, dict):
        raise _type_error("tensor_dict", tensor_dict, "dict")
    entries = []
    for name, spec in tensor_dict.items():
        if not isinstance(name, str):
            raise _type_error("tensor_dict", name, "str")
        if not isinstance(spec, TensorSpec):
            raise _type_error("tensor_dict", spec, "TensorSpec")
        count = 1
        for d in spec._shape:
            count *= d
        bits = count * _BITS[spec._name]
        if bits % 8 or bits // 8 != spec._data_len:
            raise InvalidArgumentError(
                f"Error while serializing: invalid shape, data type, or offset for tensor {name}: "
                f"{spec._data_len} bytes of data for {spec._code} {spec._shape} "
                f"({bits / 8:g} bytes)")
        data = spec._data_ptr if spec._data_len else b""
        entries.append((name, spec._name, tuple(spec._shape), data, ""))
    return entries


def serialize(tensor_dict: Dict[str, TensorSpec], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the tensors the specs point
    at (the GIL is released while they are written).

    Raises:
        TypeError: not a dict of str -> TensorSpec; metadata not str -> str.
        SafetensorError: a size that does not match dtype and shape; a name
            safetensors cannot hold ("__metadata__", repeated).
    """
    entries = _spec_entries(tensor_dict)
    meta = _metadata_json(metadata)
    try:
        return _native.encode("safetensors", entries, meta, False)
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def serialize_file(tensor_dict: Dict[str, TensorSpec], filename: Any,
                   metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes what :func:`serialize` returns to ``filename`` through a
    temporary file renamed into place; the GIL is released while writing.
    The file is safetensors whatever its name."""
    entries = _spec_entries(tensor_dict)
    meta = _metadata_json(metadata)
    try:
        path = os.fspath(filename)
    except TypeError:
        raise TypeError(f"argument 'filename': '{type(filename).__name__}' object cannot be converted to "
                        "'PyString'") from None
    try:
        _native.write_file(path, "safetensors", entries, meta, True, False, 0)
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def deserialize(bytes: Any) -> List[Tuple[str, Dict[str, Any]]]:  # noqa: A002 - safetensors' name
    """``[(name, {"shape": [...], "dtype": "F32", "data": bytearray}), ...]``
    for the bytes of a safetensors file, in data order."""
    try:
        data = memoryview(bytes).cast("B").tobytes() if not isinstance(bytes, type(b"")) else bytes
    except TypeError:
        raise TypeError(f"argument 'bytes': '{type(bytes).__name__}' object cannot be converted to 'PyBytes'") \
            from None
    try:
        bufs, _ = _native.decode(data, "safetensors", "")
    except Error as e:
        raise _prefixed(e, "Error while deserializing: ") from None
    out = []
    for b in bufs:
        out.append((b.name, {"shape": list(b.shape), "dtype": _dtypes.SAFETENSORS[b.dtype],
                             "data": bytearray(memoryview(b))}))
    return out


# -- safe_open -----------------------------------------------------------------

_ST_FRAMEWORKS = {"pt": "pytorch", "torch": "pytorch", "pytorch": "pytorch", "np": "numpy", "numpy": "numpy",
                  "tf": "tensorflow", "tensorflow": "tensorflow", "jax": "flax", "flax": "flax", "mlx": "mlx",
                  "paddle": "paddle"}
_DEVICE_KINDS = ("cuda", "musa", "npu", "xpu", "xla", "mlu", "hpu")


def _st_framework(framework: Any) -> str:
    if not isinstance(framework, str):
        raise TypeError(f"argument 'framework': '{type(framework).__name__}' object cannot be converted to "
                        "'PyString'")
    fw = _ST_FRAMEWORKS.get(framework)
    if fw is None:
        raise InvalidArgumentError(f"framework {framework} is invalid")
    return fw


def _st_device(device: Any) -> Any:
    """"cpu", "mps", "cuda:N" (and the other accelerators), or an int: what
    safetensors accepts, in the form it prints."""
    if device is None or device == "cpu":
        return "cpu"
    if isinstance(device, str):
        if device == "mps":
            return "mps"
        if device in _DEVICE_KINDS:
            return f"{device}:0"
        kind, sep, index = device.partition(":")
        if sep and (kind in _DEVICE_KINDS or kind == "mps"):
            if not index.isdigit():
                raise InvalidArgumentError(f"device {device} is invalid")
            if kind == "mps":
                if int(index) != 0:
                    raise InvalidArgumentError(f"device {device} is invalid: only mps or mps:0 is supported")
                return "mps"
            return f"{kind}:{int(index)}"
        raise InvalidArgumentError(f"device {device} is invalid")
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    try:  # a torch.device
        import torch

        if isinstance(device, torch.device):
            return _st_device(str(device))
    except ImportError:
        pass
    raise InvalidArgumentError(f"device {device!r} is invalid")


def _st_backend(backend: Any) -> str:
    if backend not in ("mmap", "pread"):
        raise InvalidArgumentError(f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
    return backend


class _NoSuchFile(_IO_BY_ERRNO[errno.ENOENT]):  # type: ignore[misc,valid-type]
    """FileNotFoundError (and tensorsafe.IOError) worded as safetensors words it."""

    def __str__(self) -> str:
        return f"No such file or directory: {self.filename}"


def _no_such_file(path: str) -> Exception:
    return _NoSuchFile(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _to_framework(fw: str, arr: np.ndarray, device: Any) -> Any:
    """A NumPy array as `fw`'s tensor, as safetensors converts it."""
    if fw == "numpy":
        return arr
    if fw == "tensorflow":
        import tensorflow as tf

        return tf.convert_to_tensor(arr)
    if fw == "flax":
        try:
            import flax  # noqa: F401  (registers dtypes, as safetensors does)
        except ImportError:
            pass
        import jax

        return jax.numpy.array(arr)
    if fw == "mlx":
        import mlx.core

        return mlx.core.array(arr)
    if fw == "paddle":
        import paddle

        place = device if not (isinstance(device, str) and device.startswith("cuda:")) else "gpu:" + device[5:]
        return paddle.to_tensor(arr, place=place)
    raise InvalidArgumentError(f"framework {fw} is invalid")  # pragma: no cover


def _display(items: List[Any]) -> str:
    def one(k: Any) -> str:
        if isinstance(k, slice):
            s = ("" if k.start is None else str(operator.index(k.start))) + ":" + \
                ("" if k.stop is None else str(operator.index(k.stop)))
            return s + ("" if k.step is None else ":" + str(operator.index(k.step)))
        return str(k)
    return "[" + ", ".join(one(k) for k in items) + "]"


def _unsupported_index(pos: int) -> Error:
    return InvalidArgumentError(f"Unsupported slice index at position {pos}: expected slice, int, or ellipsis")


def _slice_ops(key: Any, shape: List[int]) -> list:
    """One op per dimension (an int, or (start, stop, step)) for `key`, by
    safetensors' rules for NumPy-style frameworks (docs/python.md lists
    where tensorsafe accepts more)."""
    if isinstance(key, list):
        if key:
            raise UnsupportedError("Non empty lists are not implemented")
        items: List[Any] = [slice(0, 0)]
    elif isinstance(key, tuple):
        items = list(key)
    else:
        items = [key]
    for pos, k in enumerate(items):
        if k is Ellipsis:
            continue
        if isinstance(k, slice):
            for bound in (k.start, k.stop, k.step):
                if bound is not None:
                    try:
                        operator.index(bound)
                    except TypeError:
                        raise _unsupported_index(pos) from None
            continue
        try:
            v = operator.index(k)
        except TypeError:
            raise _unsupported_index(pos) from None
        if not -(1 << 31) <= v < (1 << 31):
            raise _unsupported_index(pos)
        items[pos] = int(v)
    n_ell = sum(1 for k in items if k is Ellipsis)
    if n_ell > 1:
        raise InvalidArgumentError("Only one ellipsis (...) is allowed in slice index")
    if n_ell:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * max(0, len(shape) - len(items) + 1)
    if len(items) > len(shape):
        raise OutOfRangeError(f"Error during slicing {_display(items)} with shape {shape}: more slicing indexes "
                              "than dimensions in tensor")
    ops: list = []
    for dim, (k, size) in enumerate(zip(items, shape)):
        if isinstance(k, int):
            v = k
            if v < 0:
                if v + size < 0:
                    raise OutOfRangeError(f"Invalid index {v} for dimension {dim} of size {size}")
                v += size
            if v >= size:
                raise OutOfRangeError(f"Error during slicing {_display(items)} with shape {shape}: index {v} "
                                      f"out of bounds for tensor dimension #{dim} of size {size}")
            ops.append(v)
            continue
        step = 1 if k.step is None else operator.index(k.step)
        if step <= 0:
            raise InvalidArgumentError(f"Slice step must be a positive integer, got {step}")
        start = 0 if k.start is None else operator.index(k.start)
        stop = size if k.stop is None else operator.index(k.stop)
        # Negative bounds count from the end, as in Python (safetensors 0.8
        # raises OverflowError).
        if start < 0:
            start = max(0, start + size)
        if stop < 0:
            stop = max(0, stop + size)
        if size and (start >= size or stop > size):
            asked = start if start >= size else stop - 1
            raise OutOfRangeError(f"Error during slicing {_display(items)} with shape {shape}: index {asked} "
                                  f"out of bounds for tensor dimension #{dim} of size {size}")
        if not size and (start or stop):
            raise OutOfRangeError(f"Error during slicing {_display(items)} with shape {shape}: index "
                                  f"{max(start, stop - 1)} out of bounds for tensor dimension #{dim} of size 0")
        ops.append((start, max(start, stop), step))  # start > stop: empty (safetensors 0.8: SystemError)
    ops.extend((0, size, 1) for size in shape[len(ops):])
    return ops


class safe_open(_TsSafeOpen):  # noqa: N801 - safetensors' name
    """safetensors' ``safe_open(filename, framework, device="cpu", *,
    backend="mmap")``, on tensorsafe's readers.

    Besides .safetensors files it opens .tsafe files, every other format
    tensorsafe reads, and sharded checkpoints (an index file or its
    directory) as one file. Torch tensors and NumPy arrays view a private
    copy-on-write mapping of the file: zero-copy, writable, and writes never
    reach the file.

    Raises:
        FileNotFoundError: "No such file or directory: <filename>".
        SafetensorError: a bad framework, device or backend; a damaged file
            ("Error while deserializing header: ..."); a missing tensor
            ("File does not contain tensor <name>"); use after close ("File
            is closed").
    """

    def __init__(self, filename: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap"):
        fw = _st_framework(framework)
        dev = _st_device(device)
        backend = _st_backend(backend)
        try:
            path = os.fspath(filename)
        except TypeError:
            raise TypeError(f"argument 'filename': '{type(filename).__name__}' object cannot be converted to "
                            "'PathBuf'") from None
        if not is_url(path) and not os.path.exists(path):
            raise _no_such_file(path)
        if dev != "cpu" and fw not in ("pytorch", "paddle"):
            raise InvalidArgumentError(f"Device {dev} is not supported for framework {fw}")
        self._init(path, fw, dev, backend)

    def _init(self, path: str, fw: str, dev: Any, backend: str) -> None:
        self._st_fw = fw
        self._fw = "pt" if fw == "pytorch" else "np"
        self._device = dev
        if fw == "pytorch":
            import torch  # noqa: F401  (as safetensors, at open)
        elif fw == "paddle":
            import paddle  # noqa: F401
        try:
            self._open(path, backend)
        except FileNotFoundError:
            raise _no_such_file(path) from None
        except (CorruptionError, LimitExceededError, UnsupportedError) as e:
            raise _prefixed(e, "Error while deserializing header: ") from None

    def _check(self) -> None:
        if self._closed:
            raise FailedPreconditionError("File is closed")

    def metadata(self) -> Optional[Dict[str, str]]:
        """The ``__metadata__`` dict, or None."""
        return super().metadata()

    def _contains(self, name: str) -> bool:
        if self._reader is not None:
            return self._reader.contains(name)
        return self._view.contains(name)

    def _buffer(self, name: str):
        self._check()
        if not isinstance(name, str):
            raise TypeError(f"argument 'name': '{type(name).__name__}' object cannot be converted to 'PyString'")
        if not self._contains(name):
            raise NotFoundError(f"File does not contain tensor {name}")
        return super()._buffer(name)

    def _writable_array(self, buf, shard: int) -> np.ndarray:
        """A writable ndarray of `buf`: a view of the copy-on-write mapping
        when the file is mapped, else a copy."""
        npdt = _dtypes.NUMPY.get(buf.dtype)
        if npdt is None:
            raise UnsupportedError(f"tensor {buf.name!r}: dtype {_dtypes.SAFETENSORS.get(buf.dtype, buf.dtype)} "
                                   "has no NumPy equivalent")
        if (self._backend == "mmap" and buf.nbytes and buf.layout == "dense"
                and self._fmt in ("tsafe", "safetensors")):
            cow = self._cow_file(shard)
            if cow.mm is not None:
                count = buf.nbytes // npdt.itemsize
                return np.frombuffer(cow.mm, dtype=npdt, count=count, offset=buf.offset).reshape(buf.shape)
        return np.array(buf.numpy(False))

    def get_tensor(self, name: str) -> Any:
        """The tensor `name` in the framework the file was opened for."""
        buf = self._buffer(name)
        shard = self._shard(name) if self._view is not None else 0
        if self._fw == "pt":
            return self._to_device(self._torch(buf, shard))
        return _to_framework(self._st_fw, self._writable_array(buf, shard), self._device)

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, in offset order (shard by shard)."""
        self._check()
        if self._fw == "pt":
            return super().get_tensors()
        cows = None
        if self._backend == "mmap" and self._fmt in ("tsafe", "safetensors"):
            cows = [self._cow_file(i).mm for i in range(len(self._shard_paths))]
        if self._reader is not None:
            views = self._reader.get_many(None, False, False, True, cows[0] if cows else None)
        else:
            views = self._view.get_many(None, False, False, cows)
        out = {}
        for name, v in views.items():
            if not isinstance(v, np.ndarray):  # not mapped, empty, or a copy
                v = self._writable_array(v, self._shard(name) if self._view is not None else 0)
            out[name] = _to_framework(self._st_fw, v, self._device)
        return out

    def get_slice(self, name: str) -> "PySafeSlice":
        """A lazy handle on `name`: index it to read part of the tensor."""
        buf = self._buffer(name)
        return PySafeSlice(self, name, buf)

    def offset_keys(self) -> List[str]:
        return super().offset_keys()

    def keys(self) -> List[str]:
        return super().keys()


class PySafeSlice:
    """What get_slice returns. For torch, indexing follows torch's rules (a
    view of the copy-on-write mapping, as safetensors 0.8 returns); for the
    other frameworks, safetensors' own (ints, slices with positive steps, one
    ``...``, ``[]``), raising its messages."""

    def __init__(self, owner: safe_open, name: str, buf: Any):
        self._owner, self._name, self._buf = owner, name, buf

    def get_shape(self) -> List[int]:
        return list(self._buf.shape)

    def get_dtype(self) -> str:
        d = self._buf.dtype
        return _dtypes.SAFETENSORS.get(d, d.upper())

    def __getitem__(self, key: Any) -> Any:
        owner = self._owner
        owner._check()
        if owner._fw == "pt":
            full = owner._torch(self._buf, owner._shard(self._name) if owner._view is not None else 0)
            return owner._to_device(full[key])
        shape = list(self._buf.shape)
        ops = _slice_ops(key, shape)
        if owner._reader is not None:
            info = {"name": self._name, "dtype": self._buf.dtype, "shape": tuple(shape)}
            arr = read_slice_from_view(owner._reader, info, ops)
        else:
            arr = slice_array(self._buf.numpy(False), ops)
        return _to_framework(owner._st_fw, arr, owner._device)
