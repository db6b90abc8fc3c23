"""tensorsafe.cast: floating dtype casts rounded as torch's Tensor.to()
rounds (include/tensorsafe/cast.h, docs/CAST.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _dtypes, _native
from .errors import InvalidArgumentError, UnsupportedError
from .formats import _writer_entry


def _torch_to_numpy(t: Any) -> np.ndarray:
    """A CPU torch tensor of a floating dtype as a NumPy array (bf16 through
    ml_dtypes), sharing memory where it can."""
    import torch

    names = {torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
    name = names.get(t.dtype)
    if name is None:
        raise UnsupportedError(f"cannot cast torch {t.dtype}: casts go from float64, float32, float16 or bfloat16")
    t = t.detach().cpu().contiguous()
    if name == "bf16":
        return t.view(torch.int16).numpy().view(_dtypes.NUMPY["bf16"])
    return t.numpy()


def cast(array: Any, dtype: str, *, threads: int = 0) -> np.ndarray:
    """``array`` (f64, f32, f16 or bf16: a NumPy array, with ml_dtypes for
    bf16, or a torch tensor) as a new read-only NumPy array of ``dtype`` ("f32", "f16"
    or "bf16", or their NumPy/torch names): round to nearest even, values
    beyond the range to infinities, NaN kept (quiet, sign kept). f64 goes
    through f32 on the way to f16/bf16, as torch does.

    Raises:
        UnsupportedError: another source dtype.
        InvalidArgumentError: another target dtype.

    Example:
        >>> tensorsafe.cast(np.array([1.00390625], np.float32), "bf16")
        array([1], dtype=bfloat16)
    """
    target = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "half": "f16"}.get(str(dtype), str(dtype))
    if target not in ("f32", "f16", "bf16"):
        raise InvalidArgumentError(f"dtype {dtype!r}: expected f32, f16 or bf16")
    if type(array).__module__.startswith("torch"):
        array = _torch_to_numpy(array)
    entry = _writer_entry("array", array)
    if entry[1] == target:  # already that dtype: a copy, as torch's .to(copy=True)
        data = np.asarray(entry[3]).reshape(-1).view(np.uint8).copy()
        out = data.view(_dtypes.NUMPY[target]).reshape(entry[2])
        out.flags.writeable = False  # as every other result
        return out
    return _native.gguf_dequantize([entry], target, threads).numpy()
