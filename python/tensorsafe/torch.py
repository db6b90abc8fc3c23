"""safetensors.torch's API on tensorsafe: save, save_file, load, load_file,
save_model, load_model, and the storage helpers storage_ptr and storage_size
(transformers imports them from safetensors.torch).

save_file writes the format its file name asks for: ``*.tsafe`` the native
format, ``*.safetensors`` (or a name of no known format) safetensors bytes
identical to the safetensors package's, ``*.npz``, ``*.gguf``... that
format; a PyTorch pickle name (``*.pt``, ``*.bin``) is refused. Loaded
tensors view a copy-on-write mapping of the file: no copy until written,
and writes never reach the file. load_file and load_model also take a
sharded checkpoint (an index file or its directory); save_sharded writes one
byte for byte as huggingface_hub's save_torch_state_dict (docs/SHARDED.md).

Shared tensors (views of one storage, e.g. tied embeddings) are refused by
save/save_file (RuntimeError) as in safetensors; save_model keeps one name
per shared storage (the alphabetically first that covers the whole storage)
and records each dropped name in the metadata as ``dropped -> kept``;
load_model restores them through the module's own sharing.

Example:
    >>> from tensorsafe.torch import save_file, load_file
    >>> save_file({"w": torch.zeros(2, 3)}, "model.safetensors")
    >>> load_file("model.safetensors")["w"].shape
    torch.Size([2, 3])
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from . import _arrays, _native, _sharded
from .errors import InvalidArgumentError, UnsupportedError
from .safe_open import safe_open

PathLike = Union[str, "os.PathLike[str]"]


def _format(filename: str) -> str:
    return _sharded.format_for_save(filename)


def storage_ptr(tensor: torch.Tensor) -> int:
    """The address where ``tensor``'s storage starts (not the tensor's own
    first element: every view of one storage gives the same number).

    Returns:
        The address; 0 for storages without memory (meta tensors, empty
        storages) and for tensors without a storage (sparse layouts), as
        safetensors.torch gives.
    """
    try:
        return tensor.untyped_storage().data_ptr()
    except NotImplementedError:  # "Cannot access storage of SparseTensorImpl"
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """The size in bytes of ``tensor``'s whole storage, which may be larger
    than ``tensor.nbytes`` (a view, or a tensor ``set_`` on part of a
    storage). A meta tensor's storage has a size but no memory.

    Raises:
        NotImplementedError: from torch, for tensors without a storage
            (sparse layouts).
    """
    return tensor.untyped_storage().nbytes()


def _shared_groups(tensors: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Names whose bytes overlap, grouped; each group has at least 2 names.

    Overlapping bytes can only belong to one storage, so one sweep over the
    tensors sorted by address finds them. Tensors of one storage that do not
    overlap (two halves of a buffer) are not shared for this purpose: each is
    saved on its own. Empty and meta tensors share nothing.
    """
    cpu: List[Tuple[int, int, str]] = []
    other: Dict[str, List[Tuple[int, int, str]]] = {}  # by device
    strided, Tensor = torch.strided, torch.Tensor
    with _arrays.no_gc():
        for name, t in tensors.items():
            if not isinstance(t, Tensor) or t.layout is not strided:
                continue  # refused later, by the entry conversion
            n = t.nbytes
            if not n:
                continue
            p = t.data_ptr()
            if not p:
                continue
            if t.is_cpu:
                cpu.append((p, p + n, name))
            elif t.device.type != "meta":
                other.setdefault(str(t.device), []).append((p, p + n, name))
        groups: List[Set[str]] = []
        for spans in [cpu, *other.values()]:
            spans.sort()
            current: Set[str] = set()
            end = 0
            for start, stop, name in spans:
                if start < end:
                    current.add(name)
                    end = max(end, stop)
                    continue
                if len(current) > 1:
                    groups.append(current)
                current, end = {name}, stop
            if len(current) > 1:
                groups.append(current)
    return groups


def _keep_one(groups: List[Set[str]], tensors: Dict[str, torch.Tensor], preferred: Set[str] = frozenset(),
              discard: Set[str] = frozenset()) -> Dict[str, List[str]]:
    """kept name -> the sorted others, for each group of more than one name.
    The kept name is the alphabetically first that covers the whole storage
    (``_is_complete``), preferring those not in ``discard``, and above all
    those in ``preferred``. RuntimeError for a group (even of one name)
    without such a name."""
    out: Dict[str, List[str]] = defaultdict(list)
    for group in groups:
        complete = sorted(n for n in group if _is_complete(tensors[n]))
        if not complete:
            raise RuntimeError(
                f"tensors {sorted(group)} share memory and none of them covers the whole storage: "
                "no name to keep; clone the ones you want to keep")
        keep = complete[0]
        for choice in ([n for n in complete if n not in discard], [n for n in complete if n in preferred]):
            if choice:
                keep = choice[0]
        others = sorted(n for n in group if n != keep)
        if others:
            out[keep] = others
    return out


def _names_to_drop(tensors: Dict[str, torch.Tensor], prefer: Optional[Set[str]] = None) -> Dict[str, List[str]]:
    """kept name -> names to drop, for each shared group (save_model)."""
    return _keep_one(_shared_groups(tensors), tensors, preferred=prefer or frozenset())


def _check_for_save(tensors: Dict[str, torch.Tensor]) -> None:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    groups = _shared_groups(tensors)
    if groups:
        raise RuntimeError(
            f"Some tensors share memory, which would store them twice and load them apart: "
            f"{[sorted(g) for g in groups]}. Use save_model, or clone them.")


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensors``.

    Raises:
        ValueError: sparse or non-contiguous tensors, non-str metadata.
        RuntimeError: tensors that share memory (use save_model).
    """
    _check_for_save(tensors)
    entries = _arrays.entries_from_dict(tensors, framework="pt")
    return _native.encode("safetensors", entries, _arrays.meta_json(metadata), False)


def save_file(tensors: Dict[str, torch.Tensor], filename: PathLike,
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes ``tensors`` to ``filename`` through a temporary file renamed into
    place (safetensors bytes, or native for ``*.tsafe``). The GIL is released
    while writing. Sparse COO tensors (``torch.sparse_coo_tensor``) are
    stored natively in ``*.tsafe``; safetensors cannot hold them
    (UnsupportedError).

    Raises:
        As :func:`save`, and IOError.

    Example:
        >>> save_file({"w": torch.ones(4)}, "w.safetensors", metadata={"format": "pt"})
    """
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    filename = os.fspath(filename)
    entries, all_cpu = _arrays.torch_entries(tensors)
    if not all_cpu:
        _check_for_save(tensors)  # entries of copied tensors no longer show the sharing
    # Shared tensors are found natively from the entries' addresses (a sort
    # of 100,000 spans in C++ instead of another pass over the tensors);
    # _check_for_save then names them.
    _native.write_file(filename, _format(filename), entries, _arrays.meta_json(metadata), True, False, 0,
                       lambda: _check_for_save(tensors))


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """The tensors of safetensors (or .tsafe) bytes, as writable torch tensors
    (one copy of ``data``)."""
    fmt = "tsafe" if bytes(data[:4]) == b"\x89TSF" else "safetensors"
    bufs, _ = _native.decode(bytes(data), fmt, "<bytes>")
    out = {}
    for b in bufs:
        if b.layout == "coo":
            out[b.name] = _arrays.coo_torch(b)
        else:
            out[b.name] = _arrays.torch_from_numpy(b.numpy(True).copy(), b.dtype, b.shape)
    return out


def load_file(filename: PathLike, device: Union[str, int, "torch.device"] = "cpu", *,
              backend: str = "mmap") -> Dict[str, torch.Tensor]:
    """The tensors of a .safetensors or .tsafe file, in offset order, on ``device``.

    Raises:
        FileNotFoundError / IOError, CorruptionError, UnsupportedError.
    """
    with safe_open(filename, framework="pt", device=device, backend=backend) as f:
        return f.get_tensors()


def save_model(model: torch.nn.Module, filename: PathLike, metadata: Optional[Dict[str, str]] = None,
               force_contiguous: bool = True) -> None:
    """Saves ``model.state_dict()``, keeping one name per shared storage.

    Args:
        metadata: extra text metadata; each dropped name is recorded as
            ``metadata[dropped] = kept`` unless the key is already there.
        force_contiguous: save ``.contiguous()`` copies of strided tensors.

    Raises:
        ValueError: a non-contiguous tensor with force_contiguous=False.
    """
    state = model.state_dict()
    for kept, dropped in _names_to_drop(state).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state[name]
    if force_contiguous:
        state = {k: v.contiguous() for k, v in state.items()}
    try:
        save_file(state, filename, metadata)
    except ValueError as e:
        raise ValueError(f"{e} Or use save_model(..., force_contiguous=True).") from e


def load_model(model: torch.nn.Module, filename: PathLike, strict: bool = True,
               device: Union[str, int, "torch.device"] = "cpu", *,
               backend: str = "mmap") -> Tuple[List[str], List[str]]:
    """Loads a file written by save_model (or any state dict file) into ``model``.

    The file's tensors are read straight into the model's own
    (``tensorsafe.load(into=...)``, docs/LOAD.md), or, where a module has
    load-state-dict hooks or its own ``_load_from_state_dict``, given to
    ``model.load_state_dict`` as views of the file's mapping.

    Returns:
        (missing, unexpected): model names the file did not set, and file
        names the model has no use for. Names dropped by save_model as
        shared are neither.

    Raises:
        RuntimeError: with ``strict``, when either list is not empty.
    """
    done = _load_in_place(model, filename) if backend == "mmap" and str(device) == "cpu" else None
    if done is not None:
        missing, unexpected, held, model_state = done
    else:
        state = load_file(filename, device=device, backend=backend)
        held = set(state)
        missing, unexpected = model.load_state_dict(state, strict=False)
        model_state = model.state_dict()
    dropped = _names_to_drop(model_state, prefer=held)
    missing_set = set(missing)
    unexpected = list(unexpected)
    for names in dropped.values():
        for name in names:
            if name in missing_set:
                missing_set.remove(name)
            else:
                unexpected.append(name)
    missing = sorted(missing_set)
    if strict and (missing or unexpected):
        lines = [f"Error(s) in loading state_dict for {type(model).__name__}:"]
        if missing:
            lines.append("    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing))
        if unexpected:
            lines.append("    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected)))
        raise RuntimeError("\n".join(lines))
    return missing, unexpected


def _load_in_place(model: torch.nn.Module,
                   filename: PathLike) -> Optional[Tuple[List[str], List[str], Set[str], Dict[str, torch.Tensor]]]:
    """(missing, unexpected, the file's names, the model's state dict) after
    reading the file's tensors straight into the model's own
    (tensorsafe.load(into=...), docs/LOAD.md): one plan, one copy, O_DIRECT
    when the file is not cached, and no second copy of the model through a
    mapping. None where load_state_dict must do it, as it would: a module
    with load hooks or its own _load_from_state_dict (BatchNorm, quantized
    modules), entries that are not plain tensors with memory, a shape that
    differs (torch's error names it), a dtype torch lacks, a file the loader
    does not read."""
    from ._load import checkpoint_format, is_url
    from ._load_into import fill_into

    path = os.fspath(filename)
    if is_url(path) or checkpoint_format(path)[1] not in ("tsafe", "safetensors", "sharded"):
        return None
    base = torch.nn.Module._load_from_state_dict
    for m in model.modules():
        if m._load_state_dict_pre_hooks or m._load_state_dict_post_hooks or type(m)._load_from_state_dict is not base:
            return None
    state = model.state_dict()
    if any(type(v) is not torch.Tensor or v.is_meta for v in state.values()):
        return None
    try:
        plan = _native.plan_load([path], None, None)
        items = plan.items()
        for _name, dname, *_ in items:
            _arrays.torch_dtype(dname)
    except UnsupportedError:
        return None
    held = {name: shape for name, _d, shape, *_ in items}
    if any(k in held and tuple(v.shape) != tuple(held[k]) for k, v in state.items()):
        return None
    keep = [i for i, (name, *_) in enumerate(items) if name in state]
    if len(keep) < len(items):
        plan = plan.subset(keep)
        items = [items[i] for i in keep]
    fill_into(plan, state, True, True, True, {}, [], {}, {}, items)
    return [k for k in state if k not in held], [k for k in held if k not in state], set(held), state


# safetensors.torch's private helpers, which conversion scripts import by name
# (`from safetensors.torch import _find_shared_tensors, _is_complete`): the
# same results, except where noted. save/save_model above do not use them.


def _end_ptr(tensor: torch.Tensor) -> int:
    """The address just past the tensor's last element (its ``data_ptr()``
    when empty). Computed from the strides, so any strided view works."""
    if tensor.nelement() == 0:
        return tensor.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr() + (last + 1) * tensor.element_size()


def _is_complete(tensor: torch.Tensor) -> bool:
    """Whether the tensor starts at its storage's start and is as large as
    the storage (a meta tensor is complete: both are 0)."""
    return (tensor.data_ptr() == storage_ptr(tensor)
            and tensor.nelement() * tensor.element_size() == storage_size(tensor))


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Names grouped by storage (device, start, size), each storage's names
    then split into runs whose bytes overlap: a list of sets, one-name sets
    included, in the order the storages first appear. Meta tensors and
    storages without memory (empty, sparse) are left out.

    One difference from safetensors 0.8.0: a tensor that overlaps an earlier
    one but not the one just before it in address order (``a[0:100]``,
    ``a[10:20]``, ``a[30:40]``) stays in the group; safetensors starts a new
    group there, so that dropping what its _remove_duplicate_names names
    leaves ``a[30:40]`` beside ``a``, which its save_file refuses.
    """
    by_storage: Dict[Tuple[torch.device, int, int], Set[str]] = {}
    for name, t in state_dict.items():
        if t.device.type == "meta":
            continue
        ptr = storage_ptr(t)
        if ptr == 0:
            continue
        size = storage_size(t)
        if size == 0:
            continue
        by_storage.setdefault((t.device, ptr, size), set()).add(name)
    out: List[Set[str]] = []
    for names in by_storage.values():
        spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
        current: Set[str] = set()
        end = 0
        for start, stop, name in spans:
            if current and start < end:
                current.add(name)
                end = max(end, stop)
            else:
                current = {name}
                out.append(current)
                end = stop
    return out


def _remove_duplicate_names(state_dict: Dict[str, torch.Tensor], *,
                            preferred_names: Optional[List[str]] = None,
                            discard_names: Optional[List[str]] = None) -> Dict[str, List[str]]:
    """For each group of shared names (``_find_shared_tensors``) with more
    than one: the name to keep -> the sorted others (a ``defaultdict(list)``).
    The kept name is the alphabetically first complete one
    (``_is_complete``), preferring those not in ``discard_names``, and above
    all those in ``preferred_names``.

    Raises:
        RuntimeError: a group, even of one name, of which no tensor covers
            its whole storage (as safetensors raises).
    """
    return _keep_one(_find_shared_tensors(state_dict), state_dict, set(preferred_names or ()),
                     set(discard_names or ()))


def save_sharded(state_dict: Dict[str, torch.Tensor], save_directory: PathLike, *,
                 max_shard_size: Union[int, str] = "5GB", filename_pattern: Optional[str] = None,
                 metadata: Optional[Dict[str, str]] = None, force_contiguous: bool = True,
                 shared_tensors_to_discard: Optional[List[str]] = None,
                 format: Optional[str] = None) -> Dict[str, Any]:
    """Saves a state dict as a sharded checkpoint, exactly as
    ``huggingface_hub.save_torch_state_dict`` does: the same file names
    (``model-00001-of-00003.safetensors``), shard contents and index
    (``model.safetensors.index.json``, byte for byte), or one
    ``model.safetensors`` when everything fits in one shard.

    Shared tensors are handled as the hub does: of each group that shares
    memory one name is kept (never one in ``shared_tensors_to_discard``;
    transformers passes a model's ``_tied_weights_keys``), and each dropped
    name is recorded as ``metadata[dropped] = kept`` (in the index when
    sharded, in the file otherwise). Tensors that share a storage without
    overlapping go to the same shard. Shards carry ``{"format": "pt"}``.
    Files of an earlier save with the same pattern that this one did not
    write are removed (the hub's cleanup); the index is replaced last.
    ``save_directory`` may be an ``s3://`` (or fsspec) prefix: each file is
    stored whole as it is written, the index last (docs/REMOTE.md).

    Args:
        max_shard_size: bytes per shard, an int or a string ("5GB", "200KB",
            decimal units as the hub reads them). A tensor larger than this
            gets a shard of its own.
        filename_pattern: "model{suffix}.safetensors" by default; a pattern
            ending in ".tsafe" (or format="tsafe") writes .tsafe shards under
            the same index scheme.
        metadata: extra text metadata (str -> str).
        force_contiguous: save ``.contiguous()`` copies of strided tensors.

    Returns:
        {"files": shard names in order, "index": the index path or "",
        "total_size": the size the index records}.

    Raises:
        RuntimeError: shared tensors none of which covers its storage (as the
            hub and safetensors raise).
        InvalidArgumentError, UnsupportedError, IOError.

    Example:
        >>> save_sharded(model.state_dict(), "ckpt", max_shard_size="200MB")
        >>> model.load_state_dict(load_file("ckpt"))
    """
    from .safetensors.torch import _find_shared_tensors, _is_complete

    pattern, fmt = _sharded.pattern_and_format(filename_pattern, format)
    state_dict = dict(state_dict)
    metadata = dict(metadata or {})
    # The hub's _remove_duplicate_names, with its message: every group of
    # names on overlapping memory (one-name groups too) needs a name that
    # covers the whole storage.
    discard = set(shared_tensors_to_discard or ())
    for shared in _find_shared_tensors(state_dict):
        complete = {n for n in shared if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {shared}. None is covering the entire storage. Refusing to save/load the "
                "model since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue.")
        keep = sorted(complete - discard or complete)[0]
        for name in sorted(shared):
            if name != keep:
                metadata.setdefault(name, keep)
                del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    # The hub's storage ids (device, storage start, storage size) and sizes
    # (the whole storage's bytes), which decide the split.
    ids: Dict[Any, int] = {}
    storages = []
    for t in state_dict.values():
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"expected torch.Tensor values, not {type(t).__name__}")
        size = _storage_nbytes(t)
        if t.device.type == "meta":
            storages.append((None, size))
        else:
            storages.append((ids.setdefault((t.device, storage_ptr(t), size), len(ids)), size))
    entries, _ = _arrays.torch_entries(state_dict)
    single = {"format": "pt"}
    single.update(metadata)
    return _sharded.write(save_directory, entries, storages, fmt=fmt, pattern=pattern,
                          max_shard_size=max_shard_size, shard_metadata={"format": "pt"},
                          single_metadata=single, index_metadata=metadata)


def _storage_nbytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (AttributeError, NotImplementedError, RuntimeError):
        return t.nelement() * t.element_size()
