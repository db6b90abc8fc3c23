"""DCP's Metadata to and from the versioned JSON document (docs/DCP.md §3).

No pickle anywhere: every field is encoded by name, and decoding checks each
one, so a damaged or foreign document is a CorruptionError naming the file
and the field, never an arbitrary object.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from ..errors import CorruptionError, UnsupportedError

FORMAT = "tensorsafe-dcp"
SCHEMA_VERSION = 1
METADATA_NAME = "tensorsafe-dcp.json"

_MEMORY_FORMATS = {
    "contiguous": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "preserve": torch.preserve_format,
}


class Location:
    """Where one DCP item lives: a file of the checkpoint and the tensors
    holding it (one, or row blocks of ``rows`` rows each, in order)."""

    __slots__ = ("file", "tensors", "rows", "nbytes", "checksums", "file_size")

    def __init__(self, file: str, tensors: List[str], rows: Optional[int], nbytes: int,
                 checksums: Optional[List[int]] = None, file_size: Optional[int] = None):
        self.file = file
        self.tensors = tensors
        self.rows = rows
        self.nbytes = nbytes
        self.checksums = checksums  # XXH3-64 of each tensor, as the file's index says
        # The file's size as the rank that wrote it saw it, for the
        # coordinator's "files" (not stored per item; None when unknown).
        self.file_size = file_size

    def __repr__(self) -> str:
        return f"Location({self.file!r}, {self.tensors!r}, rows={self.rows}, nbytes={self.nbytes})"


def _digest(body: Dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode(md: Metadata, save_id: str, files: Dict[str, Dict[str, Any]]) -> bytes:
    """The document for ``md``; its storage_data maps MetadataIndex to Location."""
    items: Dict[str, Any] = {}
    for fqn, sm in md.state_dict_metadata.items():
        if isinstance(sm, BytesStorageMetadata):
            items[fqn] = {"type": "bytes"}
            continue
        p = sm.properties
        fmt = next((k for k, v in _MEMORY_FORMATS.items() if v == p.memory_format), None)
        if p.layout != torch.strided or fmt is None:
            raise UnsupportedError(f"item {fqn!r}: layout {p.layout}, memory format {p.memory_format} "
                                   "cannot be stored by tensorsafe.dcp")
        items[fqn] = {
            "type": "tensor", "dtype": _dtype_name(p.dtype), "size": list(sm.size),
            "requires_grad": bool(p.requires_grad), "memory_format": fmt, "pin_memory": bool(p.pin_memory),
            "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in sm.chunks],
        }
    storage = []
    for idx, loc in (md.storage_data or {}).items():
        storage.append({
            "fqn": idx.fqn, "offset": None if idx.offset is None else list(idx.offset), "index": idx.index,
            "file": loc.file, "tensors": loc.tensors, "rows": loc.rows, "nbytes": loc.nbytes,
            "checksums": [f"{c:016x}" for c in loc.checksums] if loc.checksums is not None else None,
        })
    planner = md.planner_data
    if planner is not None:
        if not isinstance(planner, dict) or not all(
                isinstance(k, str) and isinstance(v, (tuple, list))
                and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v)
                for k, v in planner.items()):
            raise UnsupportedError("tensorsafe.dcp stores planner_data only as DCP's default planners "
                                   "make it (a dict of names to key paths)")
        planner = {k: list(v) for k, v in planner.items()}
    sm = md.storage_meta
    body = {
        "format": FORMAT, "version": SCHEMA_VERSION, "dcp_version": md.version, "save_id": save_id,
        "files": files, "items": items, "storage": storage, "planner_data": planner,
        "storage_meta": None if sm is None else {
            "checkpoint_id": None if sm.checkpoint_id is None else str(sm.checkpoint_id),
            "save_id": sm.save_id, "modules": list(sm.modules)},
    }
    body["sha256"] = _digest(body)
    return _dump(body).encode()


def _dump(body: Dict[str, Any]) -> str:
    """One top-level field per line, and one line per file, item and
    storage entry: diffable and greppable, still a single JSON object."""
    def one(v: Any) -> str:
        return json.dumps(v, ensure_ascii=True, separators=(", ", ": "))

    lines = []
    for k, v in body.items():
        if isinstance(v, dict) and v and k in ("files", "items", "planner_data"):
            inner = ",\n".join(f"  {one(a)}: {one(b)}" for a, b in v.items())
            lines.append(f" {one(k)}: {{\n{inner}\n }}")
        elif isinstance(v, list) and v:
            inner = ",\n".join(f"  {one(x)}" for x in v)
            lines.append(f" {one(k)}: [\n{inner}\n ]")
        else:
            lines.append(f" {one(k)}: {one(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


class _Doc:
    """Typed access to a parsed document: each failure names the file and field."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, what: str) -> CorruptionError:
        return CorruptionError(f"{self.path}: {where}: {what}")

    def get(self, obj: Any, key: str, types: Any, where: str, optional: bool = False) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(where, f"missing field {key!r}")
        v = obj[key]
        if v is None and optional:
            return None
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
            raise self.fail(f"{where}.{key}", f"expected {_names(types)}, found {type(v).__name__}")
        return v

    def ints(self, obj: Any, key: str, where: str, optional: bool = False) -> Optional[List[int]]:
        v = self.get(obj, key, list, where, optional)
        if v is None:
            return None
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise self.fail(f"{where}.{key}", "expected a list of non-negative integers")
        return v


def _tuple(t: Any) -> tuple:
    return t if isinstance(t, tuple) else (t,)


def _names(t: Any) -> str:
    return " or ".join(x.__name__ for x in _tuple(t))


def decode(data: bytes, path: str) -> Metadata:
    """Parses and checks a document written by :func:`encode`.

    Raises:
        CorruptionError: not JSON, a bad digest, a missing or mistyped field.
        UnsupportedError: another format, or a newer schema version.
    """
    d = _Doc(path)
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptionError(f"{path}: not a JSON document ({e})") from None
    if not isinstance(body, dict):
        raise d.fail("document", "expected a JSON object")
    if body.get("format") != FORMAT:
        raise UnsupportedError(f"{path}: format is {body.get('format')!r}, not {FORMAT!r}")
    version = d.get(body, "version", int, "document")
    if version > SCHEMA_VERSION:
        raise UnsupportedError(f"{path}: schema version {version} is newer than {SCHEMA_VERSION}; "
                               "upgrade tensorsafe")
    digest = d.get(body, "sha256", str, "document")
    rest = {k: v for k, v in body.items() if k != "sha256"}
    if _digest(rest) != digest:
        raise d.fail("document", "sha256 mismatch: the metadata was changed or damaged after it was written")

    state: Dict[str, Any] = {}
    for fqn, it in d.get(body, "items", dict, "document").items():
        where = f"items[{fqn!r}]"
        kind = d.get(it, "type", str, where)
        if kind == "bytes":
            state[fqn] = BytesStorageMetadata()
            continue
        if kind != "tensor":
            raise d.fail(f"{where}.type", f"unknown item type {kind!r}")
        dtype = getattr(torch, d.get(it, "dtype", str, where), None)
        if not isinstance(dtype, torch.dtype):
            raise d.fail(f"{where}.dtype", f"unknown torch dtype {it['dtype']!r}")
        fmt = _MEMORY_FORMATS.get(d.get(it, "memory_format", str, where))
        if fmt is None:
            raise d.fail(f"{where}.memory_format", f"unknown memory format {it['memory_format']!r}")
        size = d.ints(it, "size", where)
        chunks = []
        for i, c in enumerate(d.get(it, "chunks", list, where)):
            off, sz = d.ints(c, "offsets", f"{where}.chunks[{i}]"), d.ints(c, "sizes", f"{where}.chunks[{i}]")
            if len(off) != len(size) or len(sz) != len(size) or any(
                    o + s > n for o, s, n in zip(off, sz, size)):
                raise d.fail(f"{where}.chunks[{i}]", f"offsets {off} + sizes {sz} do not fit size {size}")
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(off), sizes=torch.Size(sz)))
        props = TensorProperties(dtype=dtype, layout=torch.strided,
                                 requires_grad=d.get(it, "requires_grad", bool, where),
                                 memory_format=fmt, pin_memory=d.get(it, "pin_memory", bool, where))
        state[fqn] = TensorStorageMetadata(properties=props, size=torch.Size(size), chunks=chunks)

    files = d.get(body, "files", dict, "document")
    storage: Dict[MetadataIndex, Location] = {}
    for i, s in enumerate(d.get(body, "storage", list, "document")):
        where = f"storage[{i}]"
        fqn = d.get(s, "fqn", str, where)
        if fqn not in state:
            raise d.fail(f"{where}.fqn", f"{fqn!r} is not an item of the checkpoint")
        file = d.get(s, "file", str, where)
        if file not in files or "/" in file or file.startswith("."):
            raise d.fail(f"{where}.file", f"{file!r} is not a file of the checkpoint")
        tensors = d.get(s, "tensors", list, where)
        if not tensors or not all(isinstance(t, str) for t in tensors):
            raise d.fail(f"{where}.tensors", "expected a non-empty list of names")
        rows = d.get(s, "rows", int, where, optional=True)
        if rows is not None and rows < 1:
            raise d.fail(f"{where}.rows", f"expected a positive row count, found {rows}")
        sums = d.get(s, "checksums", list, where, optional=True)
        checks = None
        if sums is not None:
            try:
                checks = [int(x, 16) for x in sums]
            except (TypeError, ValueError):
                raise d.fail(f"{where}.checksums", "expected hexadecimal strings") from None
        idx = MetadataIndex(fqn, d.ints(s, "offset", where, optional=True),
                            d.get(s, "index", int, where, optional=True))
        storage[idx] = Location(file, tensors, rows, d.get(s, "nbytes", int, where), checks)

    planner = d.get(body, "planner_data", dict, "document", optional=True)
    if planner is not None:
        for k, v in planner.items():
            if not isinstance(v, list) or not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v):
                raise d.fail(f"planner_data[{k!r}]", "expected a list of strings and integers")
        planner = {k: tuple(v) for k, v in planner.items()}
    smd = d.get(body, "storage_meta", dict, "document", optional=True)
    meta = None
    if smd is not None:
        meta = StorageMeta(checkpoint_id=d.get(smd, "checkpoint_id", str, "storage_meta", optional=True),
                           save_id=d.get(smd, "save_id", str, "storage_meta", optional=True),
                           modules=list(d.get(smd, "modules", list, "storage_meta")))
    return Metadata(state_dict_metadata=state, planner_data=planner, storage_data=storage,
                    storage_meta=meta, version=d.get(body, "dcp_version", str, "document", optional=True))


def files_of(data: bytes, path: str) -> Dict[str, Any]:
    """The ``files`` table of a document, checked as :func:`decode` does."""
    decode(data, path)
    return json.loads(data)["files"]
