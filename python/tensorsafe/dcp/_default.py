"""Checkpoints of DCP's own back-end (`FileSystemWriter`: a pickled
`.metadata` and `__<rank>_<k>.distcp` files), read without pickle for
`tensorsafe dcp info|ls|verify|consolidate` (docs/DCP.md, "DCP's own
checkpoints").

The metadata pickle is interpreted by the C++ restricted unpickler with
DCP's metadata dataclasses allowed as data (`_native.dcp_metadata_json`);
each item of a `.distcp` file is a torch.save archive, decoded by the same
unpickler from a mapping of the file, its zip CRC-32s checked. Python's
pickle never runs on these files.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Iterator, List, Tuple

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)

from .. import _arrays, _native
from ..errors import CorruptionError, Error, NotFoundError, UnsupportedError
from ._schema import METADATA_NAME

DEFAULT_METADATA = ".metadata"
_MEMORY_FORMATS = (torch.contiguous_format, torch.channels_last, torch.preserve_format)


def is_default_checkpoint(path: str) -> bool:
    """Whether `path` holds DCP's own pickled `.metadata` (and is no
    tensorsafe.dcp checkpoint)."""
    return (os.path.isfile(os.path.join(path, DEFAULT_METADATA))
            and not os.path.isfile(os.path.join(path, METADATA_NAME)))


def read_document(path: str) -> Dict[str, Any]:
    """The metadata as the JSON document of pytorch.h's DcpMetadataJson."""
    meta = os.path.join(path, DEFAULT_METADATA)
    try:
        with open(meta, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise NotFoundError(f"{path}: not a DCP checkpoint: {DEFAULT_METADATA} is missing") from None
    return json.loads(_native.dcp_metadata_json(data, meta))


def _torch_dtype(name: str, fqn: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise UnsupportedError(f"item {fqn!r}: dtype torch.{name} is unknown to this torch")
    return dt


def to_metadata(doc: Dict[str, Any]) -> Metadata:
    """DCP's Metadata, built from the document's plain values."""
    sdm: Dict[str, Any] = {}
    for it in doc["items"]:
        if it["kind"] == "bytes":
            sdm[it["fqn"]] = BytesStorageMetadata()
            continue
        layout = getattr(torch, it["layout"].removeprefix("torch."), None)
        if not isinstance(layout, torch.layout):
            raise UnsupportedError(f"item {it['fqn']!r}: layout {it['layout']} is unknown to this torch")
        props = TensorProperties(dtype=_torch_dtype(it["dtype"], it["fqn"]), layout=layout,
                                 requires_grad=it["requires_grad"],
                                 memory_format=_MEMORY_FORMATS[it["memory_format"]], pin_memory=it["pin_memory"])
        chunks = [ChunkStorageMetadata(offsets=torch.Size(c["offsets"]), sizes=torch.Size(c["sizes"]))
                  for c in it["chunks"]]
        sdm[it["fqn"]] = TensorStorageMetadata(properties=props, size=torch.Size(it["size"]), chunks=chunks)
    storage = {
        MetadataIndex(s["fqn"], s["offset"], s["index"]):
            _StorageInfo(s["relative_path"], s["file_offset"], s["length"], s["transforms"] or None)
        for s in doc["storage"]
    }
    planner = doc["planner_data"]
    if isinstance(planner, dict):  # the default planner's fqn -> path tuple
        planner = {k: tuple(v) if isinstance(v, list) else v for k, v in planner.items()}
    sm = doc["storage_meta"]
    meta = None if sm is None else StorageMeta(checkpoint_id=sm["checkpoint_id"], save_id=sm["save_id"],
                                               load_id=sm["load_id"], modules=sm["modules"] or [])
    return Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage, storage_meta=meta,
                    version=doc["version"])


def _storage_by_fqn(doc: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = {}
    for s in doc["storage"]:
        out.setdefault(s["fqn"], []).append(s)
    return out


def _decode(path: str, s: Dict[str, Any], verify: bool) -> Tuple[List[Any], str]:
    if s["transforms"]:
        raise UnsupportedError(f"{path}: item {s['fqn']!r} is stored through the transforms {s['transforms']} "
                               f"(DCP extensions), which tensorsafe does not undo")
    return _native.read_torch_save(os.path.join(path, s["relative_path"]), s["file_offset"], s["length"],
                                   s["fqn"], verify)


def _chunk_tensor(path: str, s: Dict[str, Any], dtype: torch.dtype, sizes: List[int], verify: bool) -> torch.Tensor:
    """The tensor stored for one chunk, checked against the metadata."""
    bufs, _ = _decode(path, s, verify)
    where = f"{os.path.join(path, s['relative_path'])}: item {s['fqn']!r} at bytes " \
            f"[{s['file_offset']}, {s['file_offset'] + s['length']})"
    if len(bufs) != 1:
        raise CorruptionError(f"{where}: holds {len(bufs)} tensors, not one")
    b = bufs[0]
    t = _arrays.torch_from_numpy(b.numpy(True).copy(), b.dtype, b.shape)
    if t.dtype != dtype or list(t.shape) != list(sizes):
        raise CorruptionError(f"{where}: a {str(t.dtype).removeprefix('torch.')} tensor of shape {list(t.shape)}, "
                              f"where the metadata has {str(dtype).removeprefix('torch.')} {list(sizes)}")
    return t


def check_tiling(fqn: str, size: List[int], chunks: List[Dict[str, Any]]) -> None:
    """The chunks cover the tensor exactly: no overlap, nothing missing."""
    def overlap(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
        return all(ao < bo + bs and bo < ao + as_ for ao, as_, bo, bs in
                   zip(a["offsets"], a["sizes"], b["offsets"], b["sizes"]))
    for i, a in enumerate(chunks):
        if math.prod(a["sizes"]) == 0:
            continue
        for b in chunks[i + 1:]:
            if math.prod(b["sizes"]) and overlap(a, b):
                raise CorruptionError(f"item {fqn!r}: chunks at offsets {a['offsets']} and {b['offsets']} overlap")
    covered = sum(math.prod(c["sizes"]) for c in chunks)
    if covered != math.prod(size):
        raise CorruptionError(f"item {fqn!r}: its chunks cover {covered} of its {math.prod(size)} elements")


def full_tensors(path: str, verify: bool = True) -> Iterator[Tuple[str, torch.Tensor]]:
    """Each tensor whole, one at a time, assembled from its chunks."""
    doc = read_document(path)
    by_fqn = _storage_by_fqn(doc)
    for it in doc["items"]:
        if it["kind"] == "bytes":
            continue
        fqn, dtype = it["fqn"], _torch_dtype(it["dtype"], it["fqn"])
        check_tiling(fqn, it["size"], it["chunks"])
        full = torch.empty(tuple(it["size"]), dtype=dtype)
        stored = {tuple(s["offset"] or [0] * len(it["size"])): s for s in by_fqn.get(fqn, [])}
        for c in it["chunks"]:
            s = stored.get(tuple(c["offsets"]))
            if s is None:
                raise CorruptionError(f"{path}: item {fqn!r}: the chunk at offsets {c['offsets']} is stored nowhere")
            dest = full[tuple(slice(o, o + n) for o, n in zip(c["offsets"], c["sizes"]))]
            dest.copy_(_chunk_tensor(path, s, dtype, c["sizes"], verify))
        yield fqn, full


def plain_value(path: str, s: Dict[str, Any], verify: bool = True) -> Dict[str, Any]:
    """A plain item (BytesStorageMetadata) as the PyTorch codec maps a
    checkpoint's values to JSON (docs/formats/pytorch.md "Values")."""
    bufs, meta = _decode(path, s, verify)
    if bufs:
        raise UnsupportedError(f"{path}: item {s['fqn']!r} holds tensors inside a plain value")
    return json.loads(meta) if meta else {}


def verify(path: str) -> Tuple[int, List[str]]:
    """Reads and checks every item: (items checked, problems)."""
    doc = read_document(path)
    by_fqn = _storage_by_fqn(doc)
    bad: List[str] = []
    n = 0
    for it in doc["items"]:
        fqn = it["fqn"]
        n += 1
        try:
            stored = by_fqn.get(fqn, [])
            if not stored:
                raise CorruptionError(f"{path}: item {fqn!r} is stored nowhere")
            if it["kind"] == "bytes":
                plain_value(path, stored[0])
                continue
            check_tiling(fqn, it["size"], it["chunks"])
            dtype = _torch_dtype(it["dtype"], fqn)
            sizes = {tuple(c["offsets"]): c["sizes"] for c in it["chunks"]}
            for s in stored:
                off = tuple(s["offset"] or [0] * len(it["size"]))
                if off not in sizes:
                    raise CorruptionError(f"{path}: item {fqn!r}: stored at offsets {list(off)}, which no chunk has")
                _chunk_tensor(path, s, dtype, sizes[off], True)
        except (Error, OSError) as e:
            bad.append(str(e))
    return n, bad
