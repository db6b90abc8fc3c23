"""The test oracle for the PyTorch checkpoint reader (docs/formats/pytorch.md).

- ``flatten(obj, stem)``: what tensorsafe's TensorSet must hold for an object
  ``torch.load(weights_only=True)`` returned: dotted names, tensors, and the
  JSON metadata of the values that are not tensors. Written from the rules
  in docs/formats/pytorch.md, independently of the C++ code.
- ``convert_reference(path)``: what safetensors' bindings/python/convert.py
  (``convert_file``) writes for a checkpoint, restated step by step on top of
  the installed safetensors' own helpers (``_find_shared_tensors``,
  ``_is_complete``, ``save_file``): torch.load, the "state_dict" entry, the
  shared-tensor removal with its metadata, ``.contiguous()``, save_file with
  ``{"format": "pt", ...}``.
- ``safetensors_parts(data)``: a safetensors file as (header dict with the
  metadata as a dict, metadata key order, data bytes), to compare files
  whose ``__metadata__`` order safetensors leaves to a Rust HashMap.
"""
from __future__ import annotations

import json
import math
import struct
from collections import defaultdict

import torch

TS_DTYPES = {
    torch.bool: "bool", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.uint16: "u16", torch.uint32: "u32", torch.uint64: "u64",
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
    torch.complex64: "c64", torch.complex128: "c128",
    torch.float8_e4m3fn: "f8_e4m3fn", torch.float8_e5m2: "f8_e5m2",
    torch.float8_e4m3fnuz: "f8_e4m3fnuz", torch.float8_e5m2fnuz: "f8_e5m2fnuz",
    torch.float8_e8m0fnu: "f8_e8m0", torch.float4_e2m1fn_x2: "f4_e2m1",
}


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The C-order little-endian bytes of ``t``."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def ts_shape(t: torch.Tensor) -> list:
    shape = list(t.shape)
    if t.dtype == torch.float4_e2m1fn_x2:
        shape[-1] *= 2
    return shape


def key_text(k) -> str:
    if isinstance(k, str):
        return k
    if k is None or isinstance(k, (bool, int)):
        return str(k)
    raise TypeError(f"key {k!r} cannot name an entry")


def _holds(v) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, dict):
        return any(_holds(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return any(_holds(x) for x in v)
    return False


def _number(x: float):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def to_json(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else str(v)
    if isinstance(v, float):
        return _number(v)
    if isinstance(v, complex):
        return [_number(v.real), _number(v.imag)]
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("latin-1")
    if isinstance(v, (list, tuple, set)):  # torch.Size is a tuple
        return [to_json(x) for x in v]
    if isinstance(v, dict):
        return {key_text(k): to_json(x) for k, x in v.items()}
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return str(v)
    raise TypeError(f"no JSON for {type(v)}")


def flatten(obj, stem: str):
    """(tensors: name -> tensor in order, metadata: dict in order)."""
    tensors, values = {}, {}

    def walk(v, name, top):
        if isinstance(v, torch.Tensor):
            tensors[name] = v
            return
        if isinstance(v, (dict, list, tuple)) and (top or _holds(v)):
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                walk(x, key_text(k) if top else f"{name}.{key_text(k)}", False)
            return
        values[name] = to_json(v)

    if isinstance(obj, (dict, list, tuple)):
        walk(obj, "", True)
    else:
        walk(obj, stem, False)
    return tensors, values


def expected_entry(name: str, t: torch.Tensor) -> dict:
    return {"name": name, "dtype": TS_DTYPES[t.dtype], "shape": ts_shape(t), "hex": tensor_bytes(t).hex()}


def convert_reference(pt_path: str, sf_path: str, discard_names=()) -> None:
    """safetensors' convert.py convert_file(pt_path, sf_path, discard_names),
    without its Hub download, size check and reload check."""
    from safetensors.torch import _find_shared_tensors, _is_complete, save_file

    loaded = torch.load(pt_path, map_location="cpu", weights_only=True)
    if "state_dict" in loaded:
        loaded = loaded["state_dict"]
    to_remove = defaultdict(list)
    for shared in _find_shared_tensors(loaded):
        complete = {n for n in shared if _is_complete(loaded[n])}
        if not complete:
            if len(shared) != 1:
                raise RuntimeError(f"no name covers the storage of {shared}")
            only = next(iter(shared))
            loaded[only] = loaded[only].clone()
            complete = {only}
        keep = sorted(complete)[0]
        preferred = complete.difference(discard_names)
        if preferred:
            keep = sorted(preferred)[0]
        for n in sorted(shared):
            if n != keep:
                to_remove[keep].append(n)
    metadata = {"format": "pt"}
    for keep, group in to_remove.items():
        for n in group:
            if n not in metadata:
                metadata[n] = keep
            del loaded[n]
    loaded = {k: v.contiguous() for k, v in loaded.items()}
    save_file(loaded, sf_path, metadata=metadata)


def safetensors_parts(data: bytes):
    """(header without __metadata__, metadata dict, metadata key order, data bytes, header length)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", None)
    order = list(metadata) if metadata else []
    return header, metadata, order, data[8 + n:], n
