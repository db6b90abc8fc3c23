"""Dtype tables: tensorsafe's canonical names (include/tensorsafe/dtype.h)
against NumPy (with ml_dtypes for bf16 and float8), PyTorch and the
safetensors header codes.

Packed sub-byte dtypes (f6_e2m3, f6_e3m2, f4_e2m1, i4, u4) have no NumPy
type that stores them packed, so they map to None there; PyTorch has
float4_e2m1fn_x2 for f4_e2m1 (two values per byte: the last dimension is
halved) and nothing for the others.
"""

from __future__ import annotations

from typing import Dict, Optional

import ml_dtypes
import numpy as np

# Persisted codes of include/tensorsafe/dtype.h: name -> code.
CODES: Dict[str, int] = {
    "bool": 1, "u8": 2, "u16": 3, "u32": 4, "u64": 5, "i8": 6, "i16": 7, "i32": 8, "i64": 9,
    "f16": 10, "bf16": 11, "f32": 12, "f64": 13, "c64": 14, "c128": 15,
    "f8_e4m3fn": 16, "f8_e5m2": 17, "f8_e4m3fnuz": 18, "f8_e5m2fnuz": 19, "f8_e8m0": 20,
    "f6_e2m3": 21, "f6_e3m2": 22, "f4_e2m1": 23, "i4": 24, "u4": 25,
}
PACKED = {"f6_e2m3", "f6_e3m2", "f4_e2m1", "i4", "u4"}

NUMPY: Dict[str, Optional[np.dtype]] = {
    "bool": np.dtype(np.bool_), "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64), "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16), "i32": np.dtype(np.int32), "i64": np.dtype(np.int64),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64), "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
    "f8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "f8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz), "f8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8_e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f6_e2m3": None, "f6_e3m2": None, "f4_e2m1": None, "i4": None, "u4": None,
}
# NumPy dtype (native byte order) -> name.
FROM_NUMPY: Dict[np.dtype, str] = {dt: name for name, dt in NUMPY.items() if dt is not None}

# safetensors header codes (what safe_open's get_dtype() returns); dtypes the
# format lacks keep tensorsafe's name.
SAFETENSORS: Dict[str, str] = {
    "bool": "BOOL", "u8": "U8", "u16": "U16", "u32": "U32", "u64": "U64", "i8": "I8",
    "i16": "I16", "i32": "I32", "i64": "I64", "f16": "F16", "bf16": "BF16", "f32": "F32",
    "f64": "F64", "c64": "C64", "f8_e4m3fn": "F8_E4M3", "f8_e5m2": "F8_E5M2",
    "f8_e4m3fnuz": "F8_E4M3FNUZ", "f8_e5m2fnuz": "F8_E5M2FNUZ", "f8_e8m0": "F8_E8M0",
    "f6_e2m3": "F6_E2M3", "f6_e3m2": "F6_E3M2", "f4_e2m1": "F4",
}

_TORCH_NAMES = {
    "bool": "bool", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "f16": "float16",
    "bf16": "bfloat16", "f32": "float32", "f64": "float64", "c64": "complex64",
    "c128": "complex128", "f8_e4m3fn": "float8_e4m3fn", "f8_e5m2": "float8_e5m2",
    "f8_e4m3fnuz": "float8_e4m3fnuz", "f8_e5m2fnuz": "float8_e5m2fnuz",
    "f8_e8m0": "float8_e8m0fnu", "f4_e2m1": "float4_e2m1fn_x2",
}
_torch_tables = None


def torch_tables():
    """(name -> torch.dtype, torch.dtype -> name) for this torch; imports torch."""
    global _torch_tables
    if _torch_tables is None:
        import torch

        to = {n: getattr(torch, t) for n, t in _TORCH_NAMES.items() if hasattr(torch, t)}
        _torch_tables = (to, {v: k for k, v in to.items()})
    return _torch_tables


def name_of_string(text: str, what: str) -> str:
    """The tensorsafe name of a dtype written as a string in a Python API:
    NumPy's meaning for anything ``numpy.dtype`` reads (``"int64"``, ``"<f4"``,
    ``"i8"`` = int64, ``"u1"``), else a tensorsafe name (``"bf16"``, ``"f32"``,
    ``"f8_e4m3fn"``). A string that is both and means different things
    (``"i8"`` is int8 here and int64 in NumPy; ``"u8"``, ``"i4"``, ``"u4"``,
    ``"f16"``) is refused with InvalidArgumentError naming both readings."""
    from .errors import InvalidArgumentError

    ours = text if text in CODES else None
    try:
        theirs: Optional[np.dtype] = np.dtype(text)
    except TypeError:
        theirs = None
    theirs_name = None if theirs is None else FROM_NUMPY.get(theirs)
    if ours is not None and theirs is not None and theirs_name != ours:
        alt = "" if theirs_name is None else f" ({theirs_name!r} here)"
        ours_np = NUMPY[ours]
        spell = f"{ours_np.name!r}" if ours_np is not None else f"a NumPy-free name such as {ours!r} in a list schema"
        raise InvalidArgumentError(
            f"{what}: dtype {text!r} is ambiguous: NumPy reads it as {theirs.name} ({theirs.itemsize} bytes{alt}), "
            f"tensorsafe's name {ours!r} is {ours_np.name if ours_np is not None else ours} ({_bits(ours)} bits); "
            f"write {theirs.name!r} for the first, {spell} for the second")
    if ours is not None:
        return ours
    if theirs is not None:
        if theirs_name is None:
            raise InvalidArgumentError(f"{what}: dtype {text!r} (NumPy {theirs}) has no tensorsafe equivalent"
                                       + (" (only native byte order)" if theirs.byteorder not in "=|" else ""))
        return theirs_name
    raise InvalidArgumentError(f"{what}: unknown dtype {text!r}")


def _bits(name: str) -> int:
    dt = NUMPY[name]
    if dt is not None:
        return dt.itemsize * 8
    return {"f6_e2m3": 6, "f6_e3m2": 6, "f4_e2m1": 4, "i4": 4, "u4": 4}[name]


def numpy_table_by_code() -> list:
    """The list the native module indexes by dtype code (see buffer.h)."""
    table = [None] * (max(CODES.values()) + 1)
    for name, code in CODES.items():
        table[code] = NUMPY[name]
    return table
