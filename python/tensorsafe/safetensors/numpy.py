"""safetensors.numpy on tensorsafe: save, save_file, load, load_file and the
helpers _flatten, _getdtype, _TYPES, _view2np, _is_little_endian.

Arrays are stored little-endian; loaded arrays are writable (views of a
private copy-on-write mapping for load_file, copies for load).
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Union

import numpy as np

from .. import _arrays, _native
from ..errors import Error
from ._core import TensorSpec, _metadata_json, _prefixed, deserialize, safe_open

__all__ = ["save", "save_file", "load", "load_file"]

_TYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "U64": np.uint64,
    "I32": np.int32, "U32": np.uint32, "I16": np.int16, "U16": np.uint16, "I8": np.int8, "U8": np.uint8,
    "BOOL": bool, "C64": np.complex64,
}


def _getdtype(dtype_str: str) -> np.dtype:
    """The NumPy dtype of a safetensors code; KeyError for codes NumPy lacks."""
    return _TYPES[dtype_str]


def _is_little_endian(tensor: np.ndarray) -> bool:
    order = tensor.dtype.byteorder
    if order == "=":
        return sys.byteorder == "little"
    if order in ("|", "<"):
        return True
    if order == ">":
        return False
    raise ValueError(f"Unexpected byte order {order}")


def _flatten(tensor_dict: Dict[str, np.ndarray], keep_alive_buffer: List) -> Dict[str, TensorSpec]:
    """name -> TensorSpec over each array's memory (byte-swapped copies of
    big-endian arrays, and C-contiguous copies of strided ones, are kept in
    `keep_alive_buffer`)."""
    out = {}
    for k, v in tensor_dict.items():
        t = v
        if not _is_little_endian(t):
            t = t.byteswap(inplace=False).view(t.dtype.newbyteorder("<"))
            keep_alive_buffer.append(t)
        if not t.flags.c_contiguous:
            t = np.ascontiguousarray(t)
            keep_alive_buffer.append(t)
        out[k] = TensorSpec(dtype=t.dtype.name, shape=t.shape, data_ptr=t.ctypes.data, data_len=t.nbytes)
    return out


def _entries(tensor_dict):
    if not isinstance(tensor_dict, dict):
        raise TypeError(f"argument 'tensor_dict': '{type(tensor_dict).__name__}' object is not an instance of "
                        "'dict'")
    return _arrays.entries_from_dict(tensor_dict, framework="np")


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the arrays."""
    entries = _entries(tensor_dict)
    meta = _metadata_json(metadata)
    try:
        return _native.encode("safetensors", entries, meta, False)
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def save_file(tensor_dict: Dict[str, np.ndarray], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes the arrays to `filename` as safetensors (whatever its name)."""
    entries = _entries(tensor_dict)
    meta = _metadata_json(metadata)
    try:
        _native.write_file(os.fspath(filename), "safetensors", entries, meta, True, False, 0)
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def _view2np(safeview) -> Dict[str, np.ndarray]:
    """deserialize()'s list as name -> ndarray (writable, over its bytearray)."""
    return {k: np.frombuffer(v["data"], dtype=_getdtype(v["dtype"])).reshape(v["shape"]) for k, v in safeview}


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of safetensors bytes (writable copies)."""
    return _view2np(deserialize(data))


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> Dict[str, np.ndarray]:
    """Every array of a file (or a sharded checkpoint), in offset order."""
    with safe_open(filename, framework="np", backend=backend) as f:
        return f.get_tensors()
