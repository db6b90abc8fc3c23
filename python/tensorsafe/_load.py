"""tensorsafe.load: tensors from .tsafe, safetensors (single or HF sharded)
and GGUF files at the disk's speed, verified (docs/LOAD.md).

The native loader reads every wanted byte range of every file in one queue
ordered by file offset, with O_DIRECT requests of 4 MiB, eight in flight,
into one fresh arena whose pages a helper thread faults in just ahead of the
reads; each tensor's XXH3-64 is checked on another thread as soon as its last
byte arrives (for formats that store one).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._arrays import no_gc
from ._load_into import (_COPY_CHUNK, _copy_into, _dest_key, _into_entry, _into_target, _numpy_dtype,
                         _settle_unheld, _tensor_bytes, _torch_dtype, _torch_tensor_type, _verified_text,
                         fill_into)
from .errors import CorruptionError, InvalidArgumentError, NotFoundError, UnsupportedError

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["load"]


def _paths(path_or_paths: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    if isinstance(path_or_paths, (str, bytes, os.PathLike)):
        return [os.fsdecode(path_or_paths)]
    return [os.fsdecode(p) for p in path_or_paths]


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    """A location the native readers fetch by ranged reads (docs/REMOTE.md):
    s3://, http(s)://, and any other scheme but file:// (through fsspec)."""
    return bool(_SCHEME.match(path)) and not path.lower().startswith("file://")


def checkpoint_format(path: str) -> Tuple[str, str]:
    """(path, format) of what a reading API opens: "sharded" for a checkpoint
    directory or index. A URL that may be a folder is resolved first
    (docs/REMOTE.md), so that one tensor file under it opens as that file."""
    if not _native.is_sharded_path(path):
        return path, _native.detect_format(path)
    if not is_url(path):
        return path, "sharded"
    path = _native.resolve_checkpoint(path)
    return path, "sharded" if path.lower().endswith(".index.json") else _native.detect_format(path)


def _load_remote(paths: List[str], wanted: Any, framework: str, verify: bool, into: Optional[Dict[str, Any]],
                 from_into: bool, strict: bool, cast: bool, slice: Any,
                 pin: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """URLs (docs/REMOTE.md): no O_DIRECT plan; each tensor is read by ranged
    GETs (8 in parallel from 4 MiB up) straight into its own memory, a
    .tsafe tensor verified against its XXH3-64 as it is read."""
    if slice is not None:
        raise UnsupportedError("load(slice=...) reads local files only; open the URL with tensorsafe.safe_open "
                               "and get_slice")
    if any(not is_url(p) for p in paths):
        raise InvalidArgumentError("load: give either URLs or local paths, not both")
    torch_out = framework in ("pt", "torch")
    if torch_out:
        import torch
        from ._arrays import torch_shape
    out: Dict[str, Any] = {}
    # The local loader's report keys (docs/LOAD.md), requests counted as tensors read.
    report: Dict[str, Any] = {"direct": [], "buffered_reason": [], "tensors": 0, "verified": 0, "unverifiable": 0,
                              "bytes": 0, "bytes_read": 0, "requests": 0}
    pick = wanted if callable(wanted) else None
    left = None if wanted is None or pick is not None else dict.fromkeys(wanted)
    tied: Dict[str, str] = {}
    missing: List[str] = []
    filled: Dict[Any, str] = {}  # into='s memory already read into: tied entries are read once
    copied: Dict[str, str] = {}
    torch_tensor, dtypes = _torch_tensor_type(), {}
    start = time.perf_counter()
    for path in paths:
        path, fmt = checkpoint_format(path)
        if fmt == "tsafe":
            src: Any = _native.Reader.open(path)
        elif fmt in ("safetensors", "gguf", "sharded"):
            src = _native.TensorSetView.open(path)
        else:
            raise UnsupportedError(f"{path}: load reads .tsafe, safetensors and GGUF files; this one is {fmt} "
                                   "(tensorsafe.read decodes it)")
        names: List[str] = []
        addresses: List[int] = []
        pending: List[Tuple[Any, Any, str, Tuple[int, ...]]] = []  # entries that take a copy, read
        pending_bytes = 0
        # .tsafe shards of a sharded checkpoint: each tensor read is checked
        # against its XXH3-64, as a .tsafe file's are.
        shard_paths = [s["path"] for s in src.shards()] if fmt == "sharded" and src.format == "tsafe" else None
        to_check: List[Tuple[str, Any, int]] = []

        def flush() -> None:  # reads what is batched, checks it, then copies into the entries that take a copy
            nonlocal pending_bytes
            pending_bytes = 0
            if names:
                src.read_into(names, addresses)
                names.clear()
                addresses.clear()
            for name, flat, want in to_check:
                got = _native.data_checksum(flat)
                if got != want:
                    raise CorruptionError(f"{shard_paths[src.shard_of(name)]}: tensor {json.dumps(name)}: data "
                                          f"checksum {got} does not match the index's {want} (the data is damaged)")
            to_check.clear()
            for args in pending:
                _copy_into(*args)
            pending.clear()

        for info in src.infos():
            name = info["name"]
            if (left is not None and name not in left) or (pick is not None and not pick(name)):
                continue
            if left is not None:
                del left[name]
            if name in out:
                raise InvalidArgumentError(f"{path}: tensor {name!r} is also in an earlier file")
            if info.get("layout", "dense") != "dense":
                raise UnsupportedError(f"{path}: tensor {name!r} is sparse; tensorsafe.safe_open reads it")
            dname, shape, n = info["dtype"], tuple(info["shape"]), int(info["nbytes"])
            if into is not None:
                dest = _into_entry(into, name)
                key = _dest_key(dest) if from_into else None
                if key is not None and key in filled:
                    tied[name] = filled[key]
                    out[name] = dest
                    continue
                filled[key] = name
                target = _into_target(name, dest, dname, shape, path, cast, torch_tensor, dtypes)
                if isinstance(target, str):  # why it takes a copy
                    flat = np.empty(n, np.uint8)  # the file's bytes, copied into dest by flush()
                    pending_bytes += n
                    pending.append((dest, flat, dname, shape))
                    copied[name] = target
                elif isinstance(target, int):  # a checked torch tensor: its bytes as an array
                    flat = _tensor_bytes(dest)
                else:
                    flat = target
            elif torch_out:
                shp, dt = torch_shape(dname, shape), _torch_dtype(dname)
                dest = _pinned_empty(shp, dt) if pin else torch.empty(shp, dtype=dt)
                flat = dest.reshape(-1).view(torch.uint8).numpy() if n else np.empty(0, np.uint8)
            else:
                dest = np.empty(shape, _numpy_dtype(dname))
                flat = dest.reshape(-1).view(np.uint8)
            out[name] = dest
            report["tensors"] += 1
            report["bytes"] += n
            if fmt != "tsafe" and shard_paths is None:
                report["unverifiable"] += 1
            elif verify:
                report["verified"] += 1  # read_into or flush raises on a mismatch
            if n == 0:
                continue
            report["requests"] += 1
            if fmt == "tsafe":
                src.read_into(name, flat, verify)
            else:
                names.append(name)
                addresses.append(flat.ctypes.data)
                if shard_paths is not None and verify:
                    to_check.append((name, flat, int(info["checksum"])))
            report["bytes_read"] += n
            if pending and (fmt == "tsafe" or pending_bytes >= _COPY_CHUNK):
                flush()  # read already, or a chunk batched
        flush()
        report["direct"].append(False)
        report["buffered_reason"].append("a URL: ranged GETs (docs/REMOTE.md)")
    if not verify:
        report["verification"] = "not verified (verify=false)"
    elif not report["verified"]:
        report["verification"] = "nothing to verify: these files store no checksums"
    else:
        report["verification"] = _verified_text(report)
    report["seconds"] = time.perf_counter() - start
    if left:
        if not from_into:
            raise NotFoundError(f"no tensor {json.dumps(next(iter(left)))} in {', '.join(paths)}")
        _settle_unheld(into, reversed(list(out)), left, paths, strict, tied, missing)  # the last of each memory wins
        out.update((name, into[name]) for name in tied)
    if into is not None:
        report["tied"], report["missing"], report["copied"] = tied, missing, copied
    return out, report


def _arena_tensors(items: List[Any], arena: Any, offsets: List[int], capsules: Any, torch_out: bool) -> List[Any]:
    """The tensors (or arrays) of a loaded arena, one per plan item."""
    if not torch_out:
        return [arena[off:off + n].view(_numpy_dtype(dname)).reshape(shape)
                for (_name, dname, shape, n, _f, _c), off in zip(items, offsets)]
    import torch
    from torch.utils.dlpack import from_dlpack

    from ._arrays import torch_shape

    out = []
    # Each tensor is a storage of its own bytes (torch.save of one saves only
    # it), all holding the one arena.
    for (_name, dname, shape, n, _f, _c), off, cap in zip(items, offsets, capsules):
        if cap is not None:
            out.append(from_dlpack(cap))
            continue
        flat = torch.from_numpy(arena[off:off + n]) if n else torch.empty(0, dtype=torch.uint8)
        out.append(flat.view(_torch_dtype(dname)).reshape(torch_shape(dname, tuple(shape))))
    return out


def _slice_arg(slice: Optional[Tuple[int, ...]]) -> Optional[Tuple[int, int, int, int]]:
    if slice is None:
        return None
    if len(slice) not in (3, 4):
        raise InvalidArgumentError(f"slice must be (dim, index, parts[, min_rank]), not {slice!r}")
    dim, index, parts = (int(x) for x in slice[:3])
    min_rank = int(slice[3]) if len(slice) == 4 else 2
    return (dim, index, parts, min_rank)


def _pinned_empty(shape: Any, dtype: Any) -> Any:
    """torch.empty in page-locked memory; tests on machines without an
    accelerator replace it."""
    import torch

    try:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    except RuntimeError as e:
        raise UnsupportedError(f"pin_memory=True: torch cannot pin memory here ({e})") from None


def load(path_or_paths: Union[PathLike, Sequence[PathLike]],
         names: Optional[Union[Iterable[str], Callable[[str], bool]]] = None,
         framework: str = "pt", device: Any = "cpu", verify: bool = True, into: Optional[Dict[str, Any]] = None,
         *, slice: Optional[Tuple[int, ...]] = None, direct: bool = True, io_threads: int = 8,
         request_bytes: int = 4 << 20, prefault: bool = True, huge_pages: Optional[bool] = None,
         verify_threads: int = 1, cached_buffered: bool = True, pin_memory: bool = False, strict: bool = True,
         cast: bool = False, return_report: bool = False):
    """Loads tensors into memory of their own (not views of a file mapping).

    Args:
        path_or_paths: a .tsafe, .safetensors or .gguf file, a sharded
            checkpoint (its ``*.index.json`` or directory), or a list of them.
        names: only these tensors, or those whose name the function
            returns true for (default: all; with ``into``, its keys).
        framework: "pt" (torch tensors) or "np" (NumPy arrays).
        device: "cpu", or a CUDA device: the tensors are loaded to host
            memory, then copied through two pinned staging buffers with
            non-blocking copies (docs/LOAD.md, GPU).
        verify: check each tensor's XXH3-64 where the format stores one
            (.tsafe); safetensors and GGUF have none, which the report says.
        into: a dict of existing tensors (a module's ``state_dict()``) to fill
            in place: each must match the file's shape and dtype (but see
            ``cast``). Contiguous CPU tensors and arrays are read into
            directly, with no second copy; torch tensors on another device
            (a model on a GPU) or not contiguous are filled by a copy from
            fresh memory, read a chunk of at most 256 MiB at a time. Entries
            that are one tensor (tied weights: the same memory) are read
            once, from whichever name the files hold. Tensors the files hold
            beyond ``into``'s keys are not read.
        slice: ``(dim, index, parts[, min_rank=2])``: of every tensor of rank
            >= min_rank, block ``index`` of ``parts`` along dim 0 (rows) or 1
            (columns); only those bytes are read. Sliced tensors cannot be
            verified (the checksum covers the whole tensor).
        direct, io_threads, request_bytes, prefault, huge_pages,
            verify_threads, cached_buffered: the read plan (docs/LOAD.md lists
            what each costs). ``huge_pages`` None (auto) asks for 2 MiB pages
            and switches the rest of the arena to 4 KiB ones where they fault
            slowly (the report's "pages" says what was asked).
        pin_memory: torch tensors in page-locked host memory, each allocated
            by torch (``torch.empty(pin_memory=True)``) and read into in
            place, ready for ``.to("cuda", non_blocking=True)``. Needs an
            accelerator torch can pin memory for (UnsupportedError else).
        strict: with ``into`` (and no ``names``), an entry no file holds
            and no loaded entry is tied to raises NotFoundError naming them;
            False leaves those entries as they are and lists them in the
            report's "missing".
        cast: with ``into``, an entry of another dtype than the file's (its
            shape the same) is filled by a copy with a cast (torch's
            ``copy_``, NumPy's unsafe casting: f32 into a bf16 model rounds).
            Without it such an entry is InvalidArgumentError.
        return_report: also return the loader's report (a dict: "direct" and
            "buffered_reason" per file, "verification", "bytes_read", ...;
            with ``into``, "tied" ({name: the name it was read as}),
            "missing", and "copied" ({name: why}: "f32 -> bf16",
            "on cuda:0", "not contiguous")).

    Returns:
        {name: tensor} in file order (or ``(tensors, report)``).

    Raises:
        KeyError (NotFoundError): a name no file holds. CorruptionError: a
        checksum that does not match, naming the file, tensor, offset and
        length. InvalidArgumentError: ``into`` tensors that do not match.
        UnsupportedError: a format whose tensors are not stored as they load.
        OSError: the files.

    Example:
        >>> sd = model.state_dict()
        >>> tensorsafe.load("model.safetensors", into=sd)  # fills the model in place
    """
    if framework not in ("pt", "np", "numpy", "torch"):
        raise InvalidArgumentError(f"framework must be 'pt' or 'np', not {framework!r}")
    torch_out = framework in ("pt", "torch")
    if pin_memory and (not torch_out or into is not None or str(device) != "cpu"):
        raise InvalidArgumentError("pin_memory=True makes new torch tensors on the CPU: not with framework='np', "
                                   "into= or a device (which stages through pinned buffers itself)")
    if into is not None and str(device) != "cpu":
        raise InvalidArgumentError(f"device={device!r} places new tensors; into= fills its tensors where they are "
                                   "(on a GPU too)")
    paths = _paths(path_or_paths)
    from_into = into is not None and names is None  # into='s keys pick: ties and strict apply
    wanted: Any = None  # a list of names, a predicate (URLs) or None (all)
    if callable(names):
        wanted = names
    elif names is not None:
        wanted = list(names)
    elif into is not None:
        wanted = list(into.keys())
    if any(is_url(p) for p in paths):
        out, report = _load_remote(paths, wanted, framework, verify, into, from_into, strict, cast, slice,
                                   pin_memory)
        if torch_out and str(device) != "cpu":
            from ._load_device import to_device

            out = to_device(out, device)
        return (out, report) if return_report else out
    tied: Dict[str, str] = {}
    missing: List[str] = []
    if callable(wanted):  # planned whole, then the items it picks, in file order
        whole = _native.plan_load(paths, None, _slice_arg(slice))
        plan = whole.subset([i for i, (name, *_) in enumerate(whole.items()) if wanted(name)])
    else:  # into='s keys pick when matched against the whole plan (fill_into)
        plan = _native.plan_load(paths, None if from_into else wanted, _slice_arg(slice))
    read_args = dict(direct=direct, io_threads=io_threads, request_bytes=request_bytes, verify_threads=verify_threads,
                     cached_buffered=cached_buffered)
    if pin_memory:  # tensors of torch's pinned allocator, filled as into= fills
        from ._arrays import torch_shape

        items = plan.items()
        into = {name: _pinned_empty(torch_shape(dname, tuple(shape)), _torch_dtype(dname))
                for name, dname, shape, *_ in items}
        outs = [into[name].data_ptr() if n else 0 for name, _d, _s, n, *_ in items]
        report = plan.load_into(outs, verify=verify, **read_args)
        out = into
    elif into is not None:
        out, report = fill_into(plan, into, from_into, cast, verify, tied, missing, read_args,
                                dict(prefault=prefault, huge_pages=huge_pages), None,
                                pick=(paths, strict) if from_into else None)
    else:
        # The tensors are made while the last bytes arrive (20,000 take 40-60
        # ms), once the arena is faulted in: made beside the faulting, they
        # slowed it (docs/LOAD.md). None is handed out before finish().
        started = plan.start(verify=verify, prefault=prefault, huge_pages=huge_pages, **read_args)
        try:
            started.wait_faulted()
            arena, offsets, capsules = started.targets(capsules=torch_out)
            items = plan.items()
            with no_gc():  # a tensor per item: see _arrays.no_gc
                out = dict(zip((name for name, *_ in items),
                               _arena_tensors(items, arena, offsets, capsules, torch_out)))
        except BaseException:
            started.cancel()
            raise
        report = started.finish()
    if torch_out and str(device) != "cpu":
        from ._load_device import to_device

        out = to_device(out, device)
    return (out, report) if return_report else out
