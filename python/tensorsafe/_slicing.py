"""Index normalisation for get_slice() and Reader.read_slice().

Accepted, per dimension: ints (negative ones count from the end), slices
with any step (Python's clamping rules), one ``...``; ``()`` is the whole
tensor and ``[]`` an empty selection of dimension 0, as in safetensors.
"""

from __future__ import annotations

import operator
from typing import Any, List, Sequence, Tuple, Union

import numpy as np

from . import _dtypes, _native
from .errors import InvalidArgumentError, OutOfRangeError, UnsupportedError

# One op per dimension: an int (the dimension is dropped) or a
# (start, stop, step) range as slice.indices() gives it.
Op = Union[int, Tuple[int, int, int]]


def _describe(key: Any) -> str:
    def one(k):
        if isinstance(k, slice):
            s = "" if k.start is None else str(k.start)
            s += ":" + ("" if k.stop is None else str(k.stop))
            return s + ("" if k.step is None else ":" + str(k.step))
        return "..." if k is Ellipsis else repr(k)
    return "[" + ", ".join(one(k) for k in (key if isinstance(key, tuple) else (key,))) + "]"


def normalize_key(key: Any, shape: Sequence[int]) -> List[Op]:
    """One Op per dimension of ``shape`` for ``key``.

    Raises:
        OutOfRangeError: an int outside its dimension, more indexes than
            dimensions.
        InvalidArgumentError: anything else that is not an int, slice or
            ``...``; two ellipses; a zero step.
        UnsupportedError: a non-empty list (fancy indexing).
    """
    shape = list(shape)
    if isinstance(key, list):
        if key:
            raise UnsupportedError(f"indexing with a non-empty list {key!r} is not supported")
        key = (slice(0, 0),)
    elif not isinstance(key, tuple):
        key = (key,)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise InvalidArgumentError(f"slice {_describe(key)}: only one ellipsis (...) is allowed")
    if len(key) - n_ell > len(shape):
        raise OutOfRangeError(f"slice {_describe(key)} has more indexes than the {len(shape)} dimensions "
                              f"of shape {shape}")
    if n_ell:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    key = key + (slice(None),) * (len(shape) - len(key))
    ops: List[Op] = []
    for dim, (k, size) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            if k.step == 0:
                raise InvalidArgumentError(f"slice {_describe(key)}: step cannot be zero")
            try:
                ops.append(k.indices(size))
            except TypeError:
                raise InvalidArgumentError(f"slice {_describe(key)}: bounds must be integers") from None
            continue
        if isinstance(k, (bool, np.bool_)) or k is None:
            raise InvalidArgumentError(f"index {k!r} at position {dim}: expected an int, a slice or ...")
        try:
            i = operator.index(k)
        except TypeError:
            raise InvalidArgumentError(f"index {k!r} at position {dim}: expected an int, a slice or ...") from None
        if not -size <= i < size:
            raise OutOfRangeError(f"index {i} is out of range for dimension {dim} of size {size} "
                                  f"(shape {shape})")
        ops.append(i + size if i < 0 else i)
    return ops


def result_shape(ops: List[Op]) -> Tuple[int, ...]:
    return tuple(len(range(*op)) for op in ops if not isinstance(op, int))


def as_numpy_key(ops: List[Op]) -> tuple:
    out = []
    for op in ops:
        if isinstance(op, int):
            out.append(op)
        else:
            start, stop, step = op
            # slice.indices() can return stop = -1 for a negative step that
            # runs to the start; as a slice bound that would mean "the end".
            out.append(slice(start, None if stop < 0 else stop, step))
    return tuple(out)


def slice_array(view: np.ndarray, ops: List[Op]) -> np.ndarray:
    """A fresh C-contiguous copy of ``view[ops]``."""
    return np.array(view[as_numpy_key(ops)], order="C", copy=True)


def read_slice_from_view(native_reader, info: dict, ops: List[Op]) -> np.ndarray:
    """Reads ``ops`` of tensor ``info`` with Reader::ReadSlice, which reads only
    the rows needed; negative steps are read forwards and flipped."""
    dname = info["dtype"]
    npdt = _dtypes.NUMPY[dname]
    if npdt is None:
        raise UnsupportedError(f"tensor {info['name']!r}: slicing a packed {dname} tensor is not supported")
    _native.check_shape(info["name"], dname, info["shape"])
    starts, stops, steps, flip, full = [], [], [], [], []
    for axis, op in enumerate(ops):
        if isinstance(op, int):
            starts.append(op), stops.append(op + 1), steps.append(1), full.append(1)
            continue
        n = len(range(*op))
        start, _, step = op
        if n and step < 0:
            start, step = start + (n - 1) * step, -step
            flip.append(axis)
        starts.append(start if n else 0), stops.append(start + (n - 1) * step + 1 if n else 0)
        steps.append(step), full.append(n)
    out = np.empty(full, dtype=npdt)
    if out.size:
        native_reader.read_slice(info["name"], starts, stops, steps, out.reshape(-1).view(np.uint8))
    if flip:
        out = np.ascontiguousarray(np.flip(out, axis=flip))
    return out.reshape(result_shape(ops))
