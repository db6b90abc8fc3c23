"""GGUF block codecs: dequantisation and quantisation bit-identical to
gguf-py 0.19.0's ``gguf.quants`` (docs/formats/gguf.md §10), in C++ and
split across threads.

- :func:`read_gguf` reads a .gguf file, optionally with every floating
  tensor dequantised (or cast) to f32, f16 or bf16.
- :func:`dequantize` decodes ggml blocks (bytes) of one type.
- :func:`quantize` encodes floats into ggml blocks.
- :data:`TYPES` lists the ggml types with their block geometry and what
  can be done with them.

f16 and bf16 results are gguf-py's f32 values rounded as torch's
``Tensor.to()`` rounds (nearest even; tensorsafe.cast).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import InvalidArgumentError
from .formats import _writer_entry, read

PathLike = Union[str, "os.PathLike[str]"]


class GgmlType(NamedTuple):
    name: str
    code: int
    block_elems: int
    block_bytes: int
    can_dequantize: bool
    can_quantize: bool


#: Every ggml tensor type tensorsafe knows, by name ("Q4_K": GgmlType(...)).
TYPES: Dict[str, GgmlType] = {t[0]: GgmlType(*t) for t in _native.gguf_types()}


def _type(qtype: Any) -> GgmlType:
    name = getattr(qtype, "name", qtype)  # a gguf.GGMLQuantizationType works too
    if isinstance(name, int) or isinstance(qtype, int):
        for t in TYPES.values():
            if t.code == int(qtype):
                return t
    if isinstance(name, str) and name.upper() in TYPES:
        return TYPES[name.upper()]
    raise InvalidArgumentError(f"{qtype!r} is not a ggml type (one of {', '.join(TYPES)})")


def read_gguf(path: PathLike, dequantize: Optional[str] = None, *, packed: bool = False,
              threads: int = 0) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """(tensors, metadata) of a GGUF file.

    Args:
        path: the .gguf file.
        dequantize: None (default) to return tensors as stored, zero-copy
            views of the mapped file: plain types as their dtype, ggml
            blocks as their uint8 bytes, shape [nbytes] (``tensorsafe ls``
            shows their types and logical shapes). "f32", "f16" or "bf16"
            to return every floating tensor in that dtype with its logical
            shape: ggml blocks dequantised exactly as
            ``gguf.quants.dequantize`` does (then rounded for f16/bf16),
            F32/F16/BF16/F64 tensors cast; integer tensors as stored.
        packed: see tensorsafe.read.
        threads: threads for dequantisation (0: one per core, at most 8).

    Returns:
        (name -> read-only ndarray, in file order; the key/values, with
        "tensorsafe.gguf_types" giving each key's GGUF type).

    Raises:
        CorruptionError, UnsupportedError (e.g. Q8_K blocks, which gguf-py
        cannot dequantise either), LimitExceededError, IOError.

    Example:
        >>> tensors, meta = tensorsafe.read_gguf("model.gguf", dequantize="f16")
        >>> tensors["blk.0.attn_q.weight"].dtype
        dtype(float16)
    """
    if dequantize is None:
        return read(path, "gguf", packed=packed)
    bufs, meta = _native.gguf_read(os.fspath(path), dequantize, threads)
    return {b.name: b.numpy(packed) for b in bufs}, (json.loads(meta) if meta else {})


def dequantize(data: Any, qtype: Any, shape: Optional[Sequence[int]] = None, dtype: str = "f32", *,
               threads: int = 0) -> np.ndarray:
    """Decodes ggml blocks into an array of ``dtype`` (f32, f16 or bf16).

    Args:
        data: the blocks' bytes (bytes, or a uint8 array of any shape whose
            last dimension is a whole number of blocks, as gguf-py's
            ``GGUFReader`` tensor data is).
        qtype: the ggml type: a name ("Q4_K"), a code (12) or a
            ``gguf.GGMLQuantizationType``.
        shape: the logical shape; by default that of ``data`` with its last
            dimension converted from bytes to elements, as gguf-py does.
        dtype: "f32" (gguf-py's values bit for bit), "f16" or "bf16".
        threads: 0 for one per core (at most 8).

    Raises:
        UnsupportedError: a type gguf-py cannot dequantise (Q8_K, ...).
        InvalidArgumentError: sizes that are not whole blocks, or a shape
            that does not match the bytes.
    """
    t = _type(qtype)
    raw = np.ascontiguousarray(np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview))
                               else np.asarray(data).view(np.uint8))
    if shape is None:
        dims = raw.shape if raw.ndim else (raw.size,)
        if dims[-1] % t.block_bytes:
            raise InvalidArgumentError(f"{dims[-1]} bytes per row are not a whole number of {t.block_bytes}-byte "
                                       f"{t.name} blocks")
        shape = tuple(dims[:-1]) + (dims[-1] // t.block_bytes * t.block_elems,)
    meta = {"gguf.type": t.name, "gguf.shape": [int(d) for d in shape]}
    if t.block_elems == 1:  # plain types: the bytes as that dtype
        plain = {"F32": np.float32, "F16": np.float16}.get(t.name)
        arr = raw.view(plain) if plain is not None else raw
        if t.name == "BF16":
            import ml_dtypes
            arr = raw.view(ml_dtypes.bfloat16)
        from . import _cast
        return _cast.cast(arr.reshape(shape), dtype, threads=threads)
    entry = ("blocks", "u8", (raw.size,), raw.reshape(-1), json.dumps(meta))
    return _native.gguf_dequantize([entry], dtype, threads).numpy()


def quantize(values: Any, qtype: Any, *, threads: int = 0) -> np.ndarray:
    """Encodes ``values`` (f32, or f64/f16/bf16 first converted to f32 as
    numpy's astype does; for F16, converted straight to f16 as gguf-py does)
    as ggml ``qtype``, byte for byte what
    ``gguf.quants.quantize`` returns: for block types a uint8 array of shape
    ``values.shape[:-1] + (bytes per row,)``; for F32, F16 and BF16 an array
    of that dtype (BF16 as ml_dtypes.bfloat16, with the bits of gguf-py's
    uint8 bytes).

    Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0,
    MXFP4 (what gguf-py quantises). Raises UnsupportedError for others and
    InvalidArgumentError when the last dimension is not a whole number of
    blocks.
    """
    t = _type(qtype)
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if t.name == "F16":
        # gguf-py rounds once, straight to f16 (astype); going through f32
        # would round twice and differ on rare ties from f64 input.
        return arr.astype(np.float16)
    buf = _native.gguf_quantize([_writer_entry("values", arr)], t.name, threads)
    out = buf.numpy()
    if t.block_elems == 1:
        return out
    return out.reshape(tuple(arr.shape[:-1]) + (arr.shape[-1] // t.block_elems * t.block_bytes,))
