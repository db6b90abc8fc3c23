"""tensorsafe.load(into=...) (docs/LOAD.md): the checks on existing tensors
and arrays, tied entries read once, strict, and the entries filled by a copy
(another dtype with cast=, another device, not contiguous), read a bounded
chunk at a time."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from . import _dtypes
from .errors import InvalidArgumentError, NotFoundError, UnsupportedError


def _dest_key(dest: Any) -> Any:
    """An into= entry's memory as (address, bytes), None when it has none:
    entries with the same key are one tensor (tied weights)."""
    if isinstance(dest, np.ndarray):
        return (dest.__array_interface__["data"][0], dest.nbytes) if dest.nbytes else None
    n = getattr(dest, "nbytes", 0)
    ptr = getattr(dest, "data_ptr", None)
    return (ptr(), n) if n and callable(ptr) else None


def _settle_unheld(into: Dict[str, Any], held: Iterable[str], unheld: Iterable[str], paths: List[str], strict: bool,
                   tied: Dict[str, str], missing: List[str]) -> None:
    """Files the into= entries no file holds (``unheld``) as tied, where
    their memory is a loaded entry's (``held``, in order: the first of each
    memory wins), or as missing; with ``strict``, missing ones raise."""
    loaded: Dict[Any, str] = {}
    for name in held:
        loaded.setdefault(_dest_key(into[name]), name)
    for name in unheld:
        key = _dest_key(into[name])
        if key is not None and key in loaded:
            tied[name] = loaded[key]
        else:
            missing.append(name)
    if strict and missing:
        raise _missing_error(missing, paths)


def _missing_error(missing: List[str], paths: List[str]) -> NotFoundError:
    # Quoted as the native errors quote names.
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    shown = ", ".join(json.dumps(m) for m in missing[:5]) + more
    return NotFoundError(f"no tensor {shown} in {', '.join(paths)}, which into= has "
                         f"{'an entry' if len(missing) == 1 else 'entries'} for (strict=False leaves such entries "
                         "as they are)")


def _same_memory(items: List[Any], outs: List[Any]) -> Dict[str, str]:
    """{name: earlier name} for planned items whose into= memory an earlier
    item's is (tied weights the files hold twice): they are read once.
    fill_into does not call it when every entry is a distinct address."""
    seen: Dict[Tuple[int, int], str] = {}
    dup: Dict[str, str] = {}
    for (name, _d, _s, n, *_), o in zip(items, outs):
        if n and o is not None:  # None: an entry filled by a copy
            key = (o if isinstance(o, int) else o.ctypes.data, n)
            first = seen.setdefault(key, name)
            if first != name:
                dup[name] = first
    return dup


_CAST_HINT = " (cast=True fills it by a copy with a cast)"


_COPY_CHUNK = 256 << 20  # entries filled by a copy: at most this much (or one tensor) read at a time


def _copy_reason(name: str, dest: Any, dname: str, shape: Tuple[int, ...], path: str, cast: bool) -> Optional[str]:
    """Why into= entry ``dest`` is filled by a copy from fresh memory rather
    than read into in place: "f32 -> bf16" (another dtype, with cast=),
    "on cuda:0" (a torch tensor on another device), "not contiguous"; None
    when it is read into in place (or refused by those checks)."""
    if isinstance(dest, np.ndarray):
        want = _dtypes.NUMPY.get(dname)
        reason = f"{dname} -> {_dtype_name(dest)}" if cast and want is not None and dest.dtype != want else None
    elif hasattr(dest, "data_ptr") and hasattr(dest, "device") and dest.device.type != "meta":
        if dest.dtype != _torch_dtype(dname):
            reason = f"{dname} -> {_dtype_name(dest)}" if cast else None
        elif dest.device.type != "cpu":
            reason = f"on {dest.device}"
        else:
            reason = None if dest.is_contiguous() else "not contiguous"
    else:
        return None
    if reason is not None and tuple(dest.shape) != shape:
        raise InvalidArgumentError(f"{path}: tensor {name!r} is {dname} {list(shape)}, but into[{name!r}] is "
                                   f"{dest.dtype} {list(dest.shape)}" +
                                   (": cast= changes dtypes, not shapes" if "->" in reason else ""))
    return reason


def _dtype_name(dest: Any) -> str:
    """The tensorsafe name of an array's or tensor's dtype."""
    if isinstance(dest, np.ndarray):
        return _dtypes.FROM_NUMPY.get(dest.dtype, str(dest.dtype))
    return _dtypes.torch_tables()[1].get(dest.dtype, str(dest.dtype))


def _add_report(report: Dict[str, Any], more: Dict[str, Any], verify: bool) -> None:
    """Adds a second load's report of the same files to ``report``."""
    for key in ("tensors", "verified", "unverifiable", "bytes", "bytes_read", "requests", "seconds"):
        report[key] += more[key]
    if verify and report["verified"]:
        report["verification"] = _verified_text(report)


def _verified_text(report: Dict[str, Any]) -> str:
    """The report's "verification" when some tensor was verified, as the
    native loader words it."""
    text = f"verified {report['verified']} of {report['tensors']} tensors (XXH3-64)"
    return text + (f"; {report['unverifiable']} without a checksum" if report["unverifiable"] else "")


def _copy_into(dest: Any, raw: np.ndarray, dname: str, shape: Tuple[int, ...]) -> None:
    """Copies a tensor's bytes (``raw``, uint8, of dtype ``dname``) into
    ``dest``, cast to its dtype, on its device, in its layout."""
    if isinstance(dest, np.ndarray):
        np.copyto(dest, raw.view(_numpy_dtype(dname)).reshape(shape), casting="unsafe")
        return
    import torch

    from ._arrays import torch_shape

    src = torch.from_numpy(raw) if raw.size else torch.empty(0, dtype=torch.uint8)
    dest.detach().copy_(src.view(_torch_dtype(dname)).reshape(torch_shape(dname, shape)))


def _copy_chunks(sized: List[Tuple[int, int]], limit: int) -> List[List[int]]:
    """(index, bytes) pairs grouped in order, each group at most ``limit``
    bytes or one item."""
    chunks: List[List[int]] = []
    size = 0
    for i, n in sized:
        if not chunks or size + n > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += n
    return chunks


def _fill_by_copy(plan: Any, copies: Dict[int, Any], items: List[Any], report: Dict[str, Any], verify: bool,
                  load_args: Dict[str, Any]) -> None:
    """Fills into= entries that take a copy (item index -> destination):
    their tensors are loaded (and verified) into fresh memory a chunk of at
    most _COPY_CHUNK at a time, then copied, so memory stays bounded."""
    for chunk in _copy_chunks([(i, items[i][3]) for i in sorted(copies)], _COPY_CHUNK):
        sub = plan.subset(chunk)
        arena, offsets, more, _ = sub.load(verify=verify, **load_args)
        for (_name, dname, shape, n, _f, _c), off, i in zip(sub.items(), offsets, chunk):
            _copy_into(copies[i], arena[off:off + n], dname, tuple(shape))
        del arena
        _add_report(report, more, verify)


def _numpy_dtype(dname: str) -> np.dtype:
    dt = _dtypes.NUMPY.get(dname)
    if dt is None:
        raise UnsupportedError(f"dtype {dname} has no NumPy equivalent; framework='pt' or the raw bytes")
    return dt


def _into_entry(into: Dict[str, Any], name: str) -> Any:
    try:
        return into[name]
    except KeyError:
        raise InvalidArgumentError(f"names= picks tensor {name!r}, which into= has no entry for") from None


def _torch_dtype(dname: str):
    from ._arrays import torch_dtype

    return torch_dtype(dname)


def _torch_tensor_type() -> Any:
    """torch.Tensor, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    return torch.Tensor


def _writable_bytes(name: str, dest: Any, dname: str, shape: Tuple[int, ...], path: str):
    """A writable uint8 NumPy view of ``dest`` after checking it matches."""
    if isinstance(dest, np.ndarray):
        want = _numpy_dtype(dname)
        if dest.dtype != want or tuple(dest.shape) != shape:
            raise InvalidArgumentError(
                f"{path}: tensor {name!r} is {dname} {list(shape)}, but into[{name!r}] is "
                f"{dest.dtype} {list(dest.shape)}" + _CAST_HINT * (tuple(dest.shape) == shape))
        if not dest.flags.c_contiguous or not dest.flags.writeable:
            raise InvalidArgumentError(f"into[{name!r}]: a writable C-contiguous array is needed")
        return dest.reshape(-1).view(np.uint8)
    import torch

    if not isinstance(dest, torch.Tensor):
        raise InvalidArgumentError(f"into[{name!r}] is a {type(dest).__name__}, not a torch.Tensor or ndarray")
    want = _torch_dtype(dname)
    if dest.dtype != want or tuple(dest.shape) != shape:
        raise InvalidArgumentError(
            f"{path}: tensor {name!r} is {dname} {list(shape)} ({want}), but into[{name!r}] is "
            f"{dest.dtype} {list(dest.shape)}" + _CAST_HINT * (tuple(dest.shape) == shape))
    if dest.device.type != "cpu":  # other devices and layouts take a copy (_copy_reason): this is meta
        raise UnsupportedError(f"into[{name!r}] is on {dest.device}, which holds no memory to fill")
    return _tensor_bytes(dest)


def _tensor_bytes(dest: Any) -> np.ndarray:
    """A checked, contiguous CPU torch tensor's bytes as a writable uint8 array."""
    import torch

    return dest.detach().reshape(-1).view(torch.uint8).numpy()


def _into_target(name: str, dest: Any, dname: str, shape: Tuple[int, ...], path: str, cast: bool,
                 torch_tensor: Any, dtypes: Dict[str, Any]) -> Any:
    """How into= entry ``dest`` is filled: its data address (an int: a torch
    tensor read into in place), a writable uint8 view (an array, an empty
    tensor), or a str, why it takes a copy (_copy_reason). Raises when it
    cannot be filled. The common case, a matching CPU tensor, costs one
    test (0.8 us)."""
    if torch_tensor is not None and isinstance(dest, torch_tensor):
        want = dtypes.get(dname)
        if want is None:
            want = dtypes[dname] = _torch_dtype(dname)
        if (dest.dtype is want and dest.shape == shape and dest.is_cpu and dest.is_contiguous()
                and dest.numel()):
            return dest.data_ptr()
    reason = _copy_reason(name, dest, dname, shape, path, cast)
    return reason if reason is not None else _writable_bytes(name, dest, dname, shape, path)


def _pick(plan: Any, into: Dict[str, Any], out: Dict[str, Any], outs: List[Any], slow: List[int],
          items: Optional[List[Any]], paths: List[str], strict: bool, tied: Dict[str, str],
          missing: List[str]) -> Tuple[Any, List[Any], List[int], Optional[List[Any]]]:
    """For a plan of every tensor of the files, matched against ``into``
    (match_into): drops the items ``into`` has no entry for, then files
    ``into``'s entries that no item is as tied or missing (strict raises).
    Returns the plan, outs, slow indices and items of what is kept. A
    state_dict that the files hold exactly costs nothing here."""
    if slow:
        items = plan.items() if items is None else items
        absent = {i for i in slow if items[i][0] not in into}
        if absent:
            keep = [i for i in range(len(items)) if i not in absent]
            at = {old: new for new, old in enumerate(keep)}
            plan, outs = plan.subset(keep), [outs[i] for i in keep]
            slow, items = [at[i] for i in slow if i not in absent], [items[i] for i in keep]
    if len(outs) != len(into):  # entries no file holds: tied to a held entry's memory, or missing
        held = set(out).union(items[i][0] for i in slow) if slow else out
        _settle_unheld(into, [n for n in into if n in held], [n for n in into if n not in held], paths, strict,
                       tied, missing)
    return plan, outs, slow, items


def fill_into(plan: Any, into: Dict[str, Any], from_into: bool, cast: bool, verify: bool, tied: Dict[str, str],
              missing: List[str], read_args: Dict[str, Any], arena_args: Dict[str, Any],
              items: Optional[List[Any]] = None, pick: Optional[Tuple[List[str], bool]] = None
              ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Reads a plan's tensors into ``into``'s entries: in place where they
    allow it, else by a copy (_fill_by_copy); tied entries (``from_into``:
    the same memory) once. ``read_args`` are the native plan's read options,
    ``arena_args`` the rest of the copies' ones. ``pick`` ((paths, strict)):
    the plan holds every tensor of the files and ``into``'s keys pick
    (_pick), rather than a plan of those names, whose 20,000 names cost
    5-15 ms to pass and look up. Returns ({name: entry}, the report with
    "tied", "missing" and "copied")."""
    files = plan.files
    torch_tensor, dtypes = _torch_tensor_type(), {}
    if torch_tensor is not None and isinstance(into, dict):
        # The common entry, a matching contiguous CPU tensor, checked natively
        # (0.5 us an item, against 2 in Python); the rest below.
        out, outs, slow = plan.match_into(into, _dtypes.torch_tables()[0], torch_tensor)
    else:
        items = plan.items() if items is None else items
        out, outs, slow = {}, [None] * len(items), list(range(len(items)))
    if pick is not None:
        plan, outs, slow, items = _pick(plan, into, out, outs, slow, items, pick[0], pick[1], tied, missing)
    if slow and items is None:
        items = plan.items()
    copies: Dict[int, Any] = {}  # item index -> an entry filled by a copy
    reasons: Dict[str, str] = {}
    copy_dup: Dict[str, str] = {}  # tied entries that take a copy: copied once
    copy_keys: Dict[Any, str] = {}
    for i in slow:
        name, dname, shape, _n, f, _c = items[i]
        try:
            dest = into[name]
        except KeyError:
            dest = _into_entry(into, name)  # raises, naming it
        out[name] = dest
        target = _into_target(name, dest, dname, shape, files[f][0], cast, torch_tensor, dtypes)
        if isinstance(target, str):  # why it takes a copy
            key = _dest_key(dest) if from_into else None
            if key is not None and key in copy_keys:
                copy_dup[name] = copy_keys[key]
            else:
                copy_keys[key] = name
                copies[i] = dest
                reasons[name] = target
        else:
            outs[i] = target
    dup: Dict[str, str] = {}
    # Without slow entries every entry is an address: distinct ones tie
    # nothing (a set of 20,000 takes 1.5 ms, _same_memory's loop 16).
    if from_into and (slow or len(set(outs)) != len(outs)):
        items = plan.items() if items is None else items
        dup = {**_same_memory(items, outs), **copy_dup}
    tied.update(dup)
    if copies or dup:
        keep = [i for i, (name, *_) in enumerate(items) if i not in copies and name not in dup]
        report = plan.subset(keep).load_into([outs[i] for i in keep], verify=verify, **read_args)
    else:
        report = plan.load_into(outs, verify=verify, **read_args)
    if copies:
        _fill_by_copy(plan, copies, items, report, verify, {**read_args, **arena_args})
    out.update((name, into[name]) for name in tied)
    report["tied"], report["missing"] = tied, missing
    report["copied"] = reasons
    return out, report
