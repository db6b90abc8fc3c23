"""safetensors.torch on tensorsafe: save, save_file, load, load_file,
save_model, load_model, storage_ptr, storage_size, and the private helpers
other libraries import by name (_getdtype, _SIZE, _TYPES, _tobytes,
_flatten, _flatten_as_ptr, _find_shared_tensors, _remove_duplicate_names,
_is_complete, _end_ptr, _filter_shared_not_shared, _view2torch,
_to_ndarray, _evaluate_tensors_for_save).

Results, exceptions and messages are safetensors 0.8.0's (tested side by
side in tests/python/test_safetensors_dropin.py); files are written by
tensorsafe's native writer (the same bytes) and read through its
copy-on-write mappings.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from .. import _arrays, _native
from ._core import TensorSpec, _metadata_json, _prefixed, deserialize, safe_open, serialize, serialize_file
from ..errors import Error

__all__ = ["save", "save_file", "load", "load_file", "save_model", "load_model", "storage_ptr", "storage_size"]

_float8_e4m3fn = getattr(torch, "float8_e4m3fn", None)
_float8_e4m3fnuz = getattr(torch, "float8_e4m3fnuz", None)
_float8_e5m2 = getattr(torch, "float8_e5m2", None)
_float8_e5m2fnuz = getattr(torch, "float8_e5m2fnuz", None)
_float8_e8m0 = getattr(torch, "float8_e8m0fnu", None)
_float4_e2m1_x2 = getattr(torch, "float4_e2m1fn_x2", None)

# Bytes per element of each torch dtype safetensors stores.
_SIZE: Dict[Any, int] = {
    torch.int64: 8, torch.float32: 4, torch.int32: 4, torch.bfloat16: 2, torch.float16: 2, torch.int16: 2,
    torch.uint8: 1, torch.int8: 1, torch.bool: 1, torch.float64: 8, torch.complex64: 8,
    _float8_e4m3fn: 1, _float8_e4m3fnuz: 1, _float8_e5m2: 1, _float8_e5m2fnuz: 1, _float8_e8m0: 1,
    _float4_e2m1_x2: 1,
}
if hasattr(torch, "uint64"):
    _SIZE.update({torch.uint64: 8, torch.uint32: 4, torch.uint16: 2})

# safetensors code -> torch dtype (as safetensors 0.8.0 lists them: F8_E8M0,
# F4 and F6 are absent, so _getdtype raises KeyError for them too).
_TYPES: Dict[str, Any] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": _float8_e4m3fn, "F8_E4M3FNUZ": _float8_e4m3fnuz, "F8_E5M2": _float8_e5m2,
    "F8_E5M2FNUZ": _float8_e5m2fnuz, "C64": torch.complex64,
}
if hasattr(torch, "uint64"):
    _TYPES.update({"U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16})


def _getdtype(dtype_str: str) -> torch.dtype:
    """The torch dtype of a safetensors code ("F32" -> torch.float32); KeyError
    for a code it lacks. torch's HuggingFaceStorageReader imports it."""
    return _TYPES[dtype_str]


# -- shared storage ---------------------------------------------------------------

def storage_ptr(tensor: torch.Tensor) -> int:
    """The address where the tensor's storage starts (0 for meta tensors)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:
        try:
            return tensor.storage().data_ptr()
        except NotImplementedError:
            return 0


def storage_size(tensor: torch.Tensor) -> int:
    """The size in bytes of the tensor's whole storage."""
    try:
        return tensor.untyped_storage().nbytes()
    except AttributeError:
        try:
            return tensor.storage().size() * _SIZE[tensor.dtype]
        except NotImplementedError:
            return tensor.nelement() * _SIZE[tensor.dtype]


def _end_ptr(tensor: torch.Tensor) -> int:
    """The address just past the tensor's last element (data_ptr() when
    empty)."""
    if tensor.nelement():
        return tensor.view(-1)[-1].data_ptr() + _SIZE[tensor.dtype]
    return tensor.data_ptr()


def _filter_shared_not_shared(tensors: List[Set[str]], state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Splits each group of names on one storage into runs whose memory
    overlaps, comparing each tensor with the one before it in address order."""
    out: List[Set[str]] = []
    for names in tensors:
        if len(names) < 2:
            out.append(names)
            continue
        spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
        out.append({spans[0][2]})
        previous_stop = spans[0][1]
        for start, stop, name in spans[1:]:
            if start >= previous_stop:
                out.append({name})
            else:
                out[-1].add(name)
            previous_stop = stop
    return out


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Names grouped by storage (device, start, size), then split into runs
    of overlapping memory; meta tensors and storages without bytes left out."""
    by_storage: Dict[Any, Set[str]] = defaultdict(set)
    meta = torch.device("meta")
    for name, t in state_dict.items():
        if t.device != meta and storage_ptr(t) != 0 and storage_size(t) != 0:
            by_storage[(t.device, storage_ptr(t), storage_size(t))].add(name)
    # sorted() of sets orders them by inclusion, as safetensors does.
    return _filter_shared_not_shared(list(sorted(by_storage.values())), state_dict)


def _is_complete(tensor: torch.Tensor) -> bool:
    """Whether the tensor starts at its storage's start and covers all of it."""
    return tensor.data_ptr() == storage_ptr(tensor) and \
        tensor.nelement() * _SIZE[tensor.dtype] == storage_size(tensor)


def _remove_duplicate_names(state_dict: Dict[str, torch.Tensor], *,
                            preferred_names: Optional[List[str]] = None,
                            discard_names: Optional[List[str]] = None) -> Dict[str, List[str]]:
    """For each group of shared names: the name to keep -> the others. The
    kept name covers the whole storage; among those the alphabetically
    first, preferring names not in `discard_names`, and above all names in
    `preferred_names`.

    Raises:
        RuntimeError: a group with no name that covers its whole storage.
    """
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    to_remove: Dict[str, List[str]] = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete = {n for n in shared if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {shared}. None is covering the entire storage.Refusing to save/load the model"
                " since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue.")
        keep = sorted(complete)[0]
        kept_ok = complete - discard
        if kept_ok:
            keep = sorted(kept_ok)[0]
        if preferred:
            wanted = preferred & complete
            if wanted:
                keep = sorted(wanted)[0]
        for name in sorted(shared):
            if name != keep:
                to_remove[keep].append(name)
    return to_remove


# -- checks and conversions --------------------------------------------------------

_NON_CONTIGUOUS = ("You are trying to save a non contiguous tensor: `{}` which is not allowed. It either means you"
                   " are trying to save tensors which are reference of each other in which case it's recommended "
                   "to save only the full tensors, and reslice at load time, or simply call `.contiguous()` on "
                   "your tensor to pack it before saving.")


def _shared_error(failing: List[Set[str]]) -> RuntimeError:
    return RuntimeError(
        f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """)


def _evaluate_tensors_for_save(tensors: Dict[str, torch.Tensor]) -> None:
    """safetensors' checks before a save, in its order: a dict; only
    tensors; no sparse ones (ValueError); none sharing memory (RuntimeError)."""
    _check_types(tensors)
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise _shared_error(failing)


def _check_types(tensors: Any) -> Tuple[bool, Optional[str]]:
    """The first checks of a save (a dict, only tensors, none sparse).
    Returns whether the full shared-memory check must run in Python (a
    zero-size view inside another tensor's storage, which safetensors counts
    as shared and the native overlap test does not), and the first
    non-contiguous tensor's name (refused after the shared check, as
    safetensors orders its checks)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    Tensor, strided = torch.Tensor, torch.strided
    empty_view = False
    non_contiguous = None
    for k, v in tensors.items():
        if not isinstance(v, Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.layout is not strided:
            sparse.append(k)
            continue
        if non_contiguous is None and not v.is_contiguous():
            non_contiguous = k
        if not empty_view and v.numel() == 0 and v.device.type != "meta":
            empty_view = storage_size(v) != 0
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed.")
    return empty_view, non_contiguous


def _to_ndarray(tensor: torch.Tensor):
    """(a uint8 ndarray over the tensor's bytes, the CPU tensor that holds
    them); safetensors' helper, kept for scripts that import it."""
    import numpy as np

    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    if tensor.data_ptr() == 0:
        return np.empty(0), 0
    data = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else np.empty(0, np.uint8)
    if sys.byteorder == "big":  # pragma: no cover - little-endian hosts only here
        raise NotImplementedError("big-endian hosts are not supported")
    return data, tensor


def _tobytes(tensor: torch.Tensor, name: str) -> bytes:
    """The tensor's bytes, little-endian (safetensors <= 0.7's helper, which
    scripts still import): ValueError for sparse or non-contiguous tensors."""
    if tensor.layout != torch.strided:
        raise ValueError(
            f"You are trying to save a sparse tensor: `{name}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed.")
    if not tensor.is_contiguous():
        raise ValueError(_NON_CONTIGUOUS.format(name))
    data, _ = _to_ndarray(tensor)
    return data.tobytes()


def _flatten(tensors: Dict[str, torch.Tensor]) -> Dict[str, Dict[str, Any]]:
    """name -> {"dtype": torch's name, "shape", "data": bytes}: safetensors
    <= 0.7's form of what it serialized, after the same checks."""
    _evaluate_tensors_for_save(tensors)
    return {k: {"dtype": str(v.dtype).split(".")[-1], "shape": v.shape, "data": _tobytes(v, k)}
            for k, v in tensors.items()}


def _flatten_as_ptr(tensors: Dict[str, torch.Tensor], keep_alive_buffer: List) -> Dict[str, TensorSpec]:
    """name -> TensorSpec over each tensor's memory (CPU copies are kept in
    `keep_alive_buffer`), after the checks of a save."""
    _evaluate_tensors_for_save(tensors)
    out = {}
    for k, v in tensors.items():
        if not v.is_contiguous():
            raise ValueError(_NON_CONTIGUOUS.format(k))
        arr, ref = _to_ndarray(v)
        keep_alive_buffer.append((arr, ref))
        out[k] = TensorSpec(dtype=str(v.dtype).split(".")[-1], shape=v.shape, data_ptr=arr.ctypes.data,
                            data_len=arr.nbytes)
    return out


def _entries(tensors: Dict[str, torch.Tensor]) -> List[tuple]:
    """Native entries after safetensors' checks, in its order. Memory shared
    between CPU tensors is found natively from the entries' addresses (the
    writer's on_overlap); the Python grouping runs only to name them, or
    when the native test cannot decide (see _check_types)."""
    full_check, non_contiguous = _check_types(tensors)
    if full_check or non_contiguous is not None:
        _evaluate_tensors_for_save(tensors)
    if non_contiguous is not None:
        raise ValueError(_NON_CONTIGUOUS.format(non_contiguous))
    entries, all_cpu = _arrays.torch_entries(tensors)
    if not all_cpu and not full_check:
        _evaluate_tensors_for_save(tensors)
    return entries


def _on_overlap(tensors: Dict[str, torch.Tensor]):
    def fail():
        failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
        if failing:
            raise _shared_error(failing)
    return fail


# -- the API -----------------------------------------------------------------------

def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding `tensors`."""
    _evaluate_tensors_for_save(tensors)
    entries = _entries(tensors)
    meta = _metadata_json(metadata)
    try:
        return _native.encode("safetensors", entries, meta, False)
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def save_file(tensors: Dict[str, torch.Tensor], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes `tensors` to `filename` as safetensors (whatever its name),
    through a temporary file renamed into place; the GIL is released while
    writing."""
    entries = _entries(tensors)
    meta = _metadata_json(metadata)
    try:
        path = os.fspath(filename)
    except TypeError:
        raise TypeError(f"argument 'filename': '{type(filename).__name__}' object cannot be converted to "
                        "'PathBuf'") from None
    try:
        _native.write_file(path, "safetensors", entries, meta, True, False, 0, _on_overlap(tensors))
    except Error as e:
        raise _prefixed(e, "Error while serializing: ") from None


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """The tensors of safetensors bytes, as writable CPU tensors (copies)."""
    return _view2torch(deserialize(data))


def _view2torch(safeview) -> Dict[str, torch.Tensor]:
    """deserialize()'s list as name -> tensor."""
    result = {}
    for k, v in safeview:
        dtype = _getdtype(v["dtype"])
        if len(v["data"]) == 0:
            result[k] = torch.empty(v["shape"], dtype=dtype)
        else:
            result[k] = torch.frombuffer(v["data"], dtype=dtype).reshape(v["shape"])
    return result


def load_file(filename: Union[str, os.PathLike], device: Union[str, int] = "cpu", *,
              backend: str = "mmap") -> Dict[str, torch.Tensor]:
    """Every tensor of a file (or a sharded checkpoint), in offset order, on
    `device`; CPU tensors view a copy-on-write mapping of the file."""
    with safe_open(filename, framework="pt", device=device, backend=backend) as f:
        return f.get_tensors()


def save_model(model: torch.nn.Module, filename: str, metadata: Optional[Dict[str, str]] = None,
               force_contiguous: bool = True) -> None:
    """Saves `model.state_dict()`, keeping one name per shared storage and
    recording each dropped name in the metadata as dropped -> kept."""
    state_dict = model.state_dict()
    for kept, removed in _remove_duplicate_names(state_dict).items():
        for name in removed:
            if metadata is None:
                metadata = {}
            if name not in metadata:
                metadata[name] = kept
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(str(e) + " Or use save_model(..., force_contiguous=True), read the docs for potential "
                         "caveats.") from None


def load_model(model: torch.nn.Module, filename: Union[str, os.PathLike], strict: bool = True,
               device: Union[str, int] = "cpu", *, backend: str = "mmap") -> Tuple[List[str], List[str]]:
    """Loads a file into `model`, restoring shared names through the model's
    own sharing. Returns (missing, unexpected); RuntimeError with `strict`
    when either is not empty."""
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for names in to_removes.values():
        for name in names:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected
