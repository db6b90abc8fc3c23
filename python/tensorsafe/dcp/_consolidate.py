"""`tensorsafe dcp consolidate`: a checkpoint's full tensors, assembled one at
a time from their chunks (memory: the largest tensor), streamed into one
.tsafe, one safetensors file, or a Hugging Face sharded safetensors
checkpoint (docs/DCP.md, "Tools").

safetensors puts its header, with every tensor's offsets, before the data.
The metadata gives every tensor's dtype and shape before any byte is read,
so the header is written first and the tensors after it in one pass. Every
file is written to a temporary name and renamed once complete and synced;
an HF checkpoint's index is written last.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

from .. import _native
from ..errors import InvalidArgumentError, UnsupportedError
from ..writer import Writer
from . import _default
from ._reader import load_metadata
from ._writer import _join

# torch dtype -> safetensors code (the formats' shared dtype table, docs/FORMAT.md).
_ST = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
       torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
       torch.bool: "BOOL"}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"), ("uint16", "U16"),
                     ("uint32", "U32"), ("uint64", "U64"), ("complex64", "C64")):
    if hasattr(torch, _name):
        _ST[getattr(torch, _name)] = _code


def any_metadata(path: str) -> Any:
    """DCP's Metadata of a tensorsafe.dcp checkpoint, or of one of DCP's own
    back-end (read without pickle)."""
    if _default.is_default_checkpoint(path):
        return _default.to_metadata(_default.read_document(path))
    return load_metadata(path)


def tensor_items(path: str) -> List[Tuple[str, Any]]:
    """(fqn, TensorStorageMetadata) of every tensor, in the metadata's order."""
    md = any_metadata(path)
    return [(fqn, sm) for fqn, sm in md.state_dict_metadata.items() if not isinstance(sm, BytesStorageMetadata)]


def full_tensors(path: str) -> Iterator[Tuple[str, torch.Tensor]]:
    """Each tensor whole, one at a time, every block verified on read."""
    if _default.is_default_checkpoint(path):
        yield from _default.full_tensors(path)
        return
    md = load_metadata(path)
    readers: Dict[str, Any] = {}
    chunks: Dict[str, list] = {}
    for idx, loc in md.storage_data.items():
        chunks.setdefault(idx.fqn, []).append((idx, loc))
    for fqn, sm in md.state_dict_metadata.items():
        if isinstance(sm, BytesStorageMetadata):
            continue
        full = torch.empty(tuple(sm.size), dtype=sm.properties.dtype)
        for idx, loc in chunks.get(fqn, []):
            r = readers.get(loc.file)
            if r is None:
                r = readers[loc.file] = _native.Reader.open(_join(path, loc.file), "pread")
            off = list(idx.offset)
            sizes = next(c.sizes for c in sm.chunks if list(c.offsets) == off)
            dest = full[tuple(slice(o, o + s) for o, s in zip(off, sizes))]
            starts = [0] if loc.rows is None else range(0, sizes[0] if sizes else 1, loc.rows)
            for name, s in zip(loc.tensors, starts):
                part = dest if loc.rows is None else dest[s:s + loc.rows]
                buf = torch.empty(part.shape, dtype=full.dtype)
                r.read_into(name, buf.reshape(-1).view(torch.uint8).numpy(), True)
                part.copy_(buf)
        yield fqn, full


def _nbytes(sm: Any) -> int:
    return math.prod(sm.size) * torch.empty((), dtype=sm.properties.dtype).element_size()


class _AtomicOut:
    """A file written under a temporary name in its directory, renamed into
    place by commit() after fsync; removed when not committed."""

    def __init__(self, path: str):
        self.path = path
        d = os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
        self.f = os.fdopen(fd, "wb")

    def commit(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if not self.f.closed:
            self.f.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def _write_safetensors(path: str, items: List[Tuple[str, Any]], tensors: Iterator[Tuple[str, torch.Tensor]],
                       metadata: Optional[Dict[str, str]]) -> int:
    """Streams `items` (their tensors arriving in the same order from
    `tensors`) into one safetensors file; returns its data bytes."""
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    for fqn, sm in items:
        code = _ST.get(sm.properties.dtype)
        if code is None:
            raise UnsupportedError(f"{fqn}: dtype {sm.properties.dtype} has no safetensors code")
        n = _nbytes(sm)
        header[fqn] = {"dtype": code, "shape": list(sm.size), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data 8-byte aligned, as safetensors pads
    out = _AtomicOut(path)
    try:
        out.f.write(len(text).to_bytes(8, "little"))
        out.f.write(text)
        for fqn, _sm in items:
            name, t = next(tensors)
            assert name == fqn, (name, fqn)
            if t.numel():
                out.f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        out.commit()
    except BaseException:
        out.discard()
        raise
    return off


def consolidate(path: str, out: str, fmt: str = "auto", max_shard_size: int = 5 * 10**9) -> Dict[str, Any]:
    """Writes the checkpoint at `path` as `fmt`: "tsafe", "safetensors" or
    "hf" (a directory: model-0000k-of-0000n.safetensors split in order, a
    new shard when the next tensor would pass max_shard_size, as
    huggingface_hub splits, and model.safetensors.index.json; one
    model.safetensors when everything fits). "auto": by `out`'s suffix,
    else "hf". Returns {"files", "tensors", "bytes"}."""
    if fmt == "auto":
        fmt = "tsafe" if out.endswith(".tsafe") else "safetensors" if out.endswith(".safetensors") else "hf"
    if fmt not in ("tsafe", "safetensors", "hf"):
        raise InvalidArgumentError(f"format must be tsafe, safetensors or hf, not {fmt!r}")
    items = tensor_items(path)
    tensors = full_tensors(path)
    total = sum(_nbytes(sm) for _, sm in items)
    if fmt == "tsafe":
        with Writer(out) as w:
            for fqn, t in tensors:
                w.add(fqn, t)
        return {"files": [out], "tensors": len(items), "bytes": total}
    if fmt == "safetensors":
        _write_safetensors(out, items, tensors, {"format": "pt"})
        return {"files": [out], "tensors": len(items), "bytes": total}
    if max_shard_size <= 0:
        raise InvalidArgumentError(f"max_shard_size must be positive, not {max_shard_size}")
    groups: List[List[Tuple[str, Any]]] = [[]]
    size = 0
    for fqn, sm in items:
        n = _nbytes(sm)
        if groups[-1] and size + n > max_shard_size:
            groups.append([])
            size = 0
        groups[-1].append((fqn, sm))
        size += n
    os.makedirs(out, exist_ok=True)
    index_path = os.path.join(out, "model.safetensors.index.json")
    if len(groups) == 1:
        name = os.path.join(out, "model.safetensors")
        _write_safetensors(name, groups[0], tensors, {"format": "pt"})
        return {"files": [name], "tensors": len(items), "bytes": total}
    files, weight_map = [], {}
    for k, group in enumerate(groups):
        name = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        _write_safetensors(os.path.join(out, name), group, tensors, {"format": "pt"})
        files.append(os.path.join(out, name))
        weight_map.update({fqn: name for fqn, _ in group})
    idx = _AtomicOut(index_path)  # last: the shards it names are complete
    try:
        idx.f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode())
        idx.commit()
    except BaseException:
        idx.discard()
        raise
    return {"files": files + [index_path], "tensors": len(items), "bytes": total}
