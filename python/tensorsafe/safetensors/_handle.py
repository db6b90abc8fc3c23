"""safetensors 0.8's _safe_open_handle: safe_open over any Python binary
file object (an open file, io.BytesIO, an fsspec file), read through its
read/seek/readinto, and the slices of tensors it serves.
"""

from __future__ import annotations

import io
import json
import os
import struct
from typing import Any, Dict, List, Optional

import numpy as np

from .. import _arrays, _dtypes, _native
from .._slicing import slice_array
from ..errors import (
    CorruptionError,
    Error,
    InvalidArgumentError,
    NotFoundError,
)
from ._core import (
    PySafeSlice,
    _prefixed,
    _slice_ops,
    _st_backend,
    _st_device,
    _st_framework,
    _to_framework,
    safe_open,
)


def _path_of(f: Any) -> Optional[str]:
    """A path that opens the same regular file as the file object `f`, or
    None when it has no usable descriptor."""
    try:
        fd = f.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None
    if not isinstance(fd, int) or fd < 0:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode):
        return None
    name = getattr(f, "name", None)
    if isinstance(name, (str, os.PathLike)):
        try:
            st2 = os.stat(name)
            if (st2.st_dev, st2.st_ino) == (st.st_dev, st.st_ino):
                return os.fspath(name)
        except (OSError, TypeError, ValueError):
            pass
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else None


class _safe_open_handle(safe_open):  # noqa: N801 - safetensors' name
    """``safe_open`` over an open Python file object: a local file (its
    descriptor is used, so the data is mapped as for a path), or any binary
    object with ``read`` and ``seek`` (fsspec's remote files, BytesIO...),
    from which the header and then each tensor's bytes are read as asked."""

    def __init__(self, f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap"):
        fw = _st_framework(framework)
        dev = _st_device(device)
        backend = _st_backend(backend)
        if dev != "cpu" and fw not in ("pytorch", "paddle"):
            raise InvalidArgumentError(f"Device {dev} is not supported for framework {fw}")
        self._file = None
        path = _path_of(f)
        if path is not None:
            self._init(path, fw, dev, backend)
            return
        if not (hasattr(f, "read") and hasattr(f, "seek")):
            raise TypeError(f"expected a binary file object with read() and seek(), not {type(f).__name__}")
        self._st_fw, self._fw, self._device = fw, ("pt" if fw == "pytorch" else "np"), dev
        if fw == "pytorch":
            import torch  # noqa: F401
        self._open_object(f)

    def _read_at(self, offset: int, n: int) -> bytes:
        f = self._file
        f.seek(offset)
        out = bytearray()
        while len(out) < n:
            chunk = f.read(n - len(out))
            if isinstance(chunk, str):
                raise TypeError("the file object is in text mode; open it in binary mode ('rb')")
            if not chunk:
                break
            out += chunk
        if len(out) != n:
            raise CorruptionError(f"Error while deserializing header: {self._path}: the file ended after "
                                  f"{offset + len(out)} bytes, {offset + n} expected")
        return bytes(out)

    def _open_object(self, f: Any) -> None:
        self._file = f
        name = getattr(f, "path", None) or getattr(f, "name", None)
        self._path = str(name) if name is not None else f"<{type(f).__name__}>"
        self._backend = "pread"
        self._closed = False
        self._keys = self._offset_order = None
        self._reader = self._view = None
        self._fmt = "safetensors"
        size = getattr(f, "size", None)
        if not isinstance(size, int):
            size = f.seek(0, io.SEEK_END)
        head = self._read_at(0, min(8, size)) if size else b""
        if len(head) < 8:
            raise CorruptionError(f"Error while deserializing header: {self._path}: file of {size} bytes is "
                                  "too small for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        prefix = head + self._read_at(8, min(n, max(0, size - 8), 100_000_001))
        try:
            infos, meta, _ = _native.parse_safetensors_header(prefix, size, self._path)
        except Error as e:
            raise _prefixed(e, "Error while deserializing header: ") from None
        self._infos = {i["name"]: i for i in infos}
        self._order = [i["name"] for i in infos]
        self._meta = json.loads(meta) if meta else None
        self._shard_paths = [self._path]
        self._cows = [None]

    # File-object mode: each tensor read with seek + read.
    def _object_array(self, name: str) -> np.ndarray:
        self._check()
        info = self._infos.get(name) if isinstance(name, str) else None
        if info is None:
            raise NotFoundError(f"File does not contain tensor {name}")
        npdt = _dtypes.NUMPY.get(info["dtype"])
        raw = bytearray(self._read_at(info["offset"], info["nbytes"]))
        if npdt is None:  # packed: raw bytes, for torch's float4_e2m1fn_x2
            return np.frombuffer(raw, np.uint8)
        return np.frombuffer(raw, npdt).reshape(info["shape"])

    def _object_tensor(self, name: str) -> Any:
        arr = self._object_array(name)
        if self._fw == "pt":
            info = self._infos[name]
            return self._to_device(_arrays.torch_from_numpy(arr, info["dtype"], info["shape"]))
        return _to_framework(self._st_fw, arr, self._device)

    def keys(self) -> List[str]:
        if self._file is None:
            return super().keys()
        self._check()
        return sorted(self._order)

    def offset_keys(self) -> List[str]:
        if self._file is None:
            return super().offset_keys()
        self._check()
        return list(self._order)

    def get_tensor(self, name: str) -> Any:
        if self._file is None:
            return super().get_tensor(name)
        return self._object_tensor(name)

    def get_tensors(self) -> Dict[str, Any]:
        if self._file is None:
            return super().get_tensors()
        self._check()
        return {n: self._object_tensor(n) for n in self._order}

    def get_slice(self, name: str) -> Any:
        if self._file is None:
            return super().get_slice(name)
        arr = self._object_array(name)
        return _ObjectSlice(self, name, arr)

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self._file = None


class _ObjectSlice(PySafeSlice):
    def __init__(self, owner: _safe_open_handle, name: str, arr: np.ndarray):
        self._owner, self._name, self._arr = owner, name, arr
        self._info = owner._infos[name]

    def get_shape(self) -> List[int]:
        return list(self._info["shape"])

    def get_dtype(self) -> str:
        return _dtypes.SAFETENSORS[self._info["dtype"]]

    def __getitem__(self, key: Any) -> Any:
        owner = self._owner
        owner._check()
        if owner._fw == "pt":
            full = _arrays.torch_from_numpy(self._arr, self._info["dtype"], self._info["shape"])
            return owner._to_device(full[key])
        ops = _slice_ops(key, list(self._info["shape"]))
        return _to_framework(owner._st_fw, slice_array(self._arr, ops), owner._device)
