"""Incremental saves: items whose bytes equal an item of a previous
checkpoint are not written again; the new metadata names the previous rank
file, hard-linked (or copied) into the new directory, or at URLs copied
(on the server between s3:// objects) under the new prefix (docs/DCP.md
§7)."""

from __future__ import annotations

import errno
import os
import shutil
from typing import Dict, List, Optional, Tuple

import torch
from torch.distributed.checkpoint import storage as _storage
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.planner import WriteItem

from .. import _native
from ._schema import Location

Key = Tuple[str, Tuple[int, ...]]


class Previous:
    """What a committed checkpoint holds, by (fqn, chunk offsets)."""

    def __init__(self, path: str):
        from ._reader import load_metadata

        self.path = path
        md = load_metadata(path)
        self.items: Dict[Key, Tuple[Location, torch.dtype, Tuple[int, ...]]] = {}
        for idx, loc in md.storage_data.items():
            sm = md.state_dict_metadata[idx.fqn]
            if not isinstance(sm, TensorStorageMetadata) or loc.checksums is None or idx.offset is None:
                continue
            off = tuple(idx.offset)
            sizes = next((tuple(c.sizes) for c in sm.chunks if tuple(c.offsets) == off), None)
            if sizes is not None:
                self.items[(idx.fqn, off)] = (loc, sm.properties.dtype, sizes)


def checksums(t: torch.Tensor, rows: Optional[int]) -> List[int]:
    """XXH3-64 of a contiguous tensor's bytes, per row block of `rows` rows."""
    if rows is None:
        return [_native.data_checksum(t.reshape(-1).view(torch.uint8).numpy())]
    return [_native.data_checksum(t[s:s + rows].reshape(-1).view(torch.uint8).numpy())
            for s in range(0, t.shape[0], rows)]


def _link(src_dir: str, dst_dir: str, name: str, sync: bool) -> None:
    from ._writer import _is_url, _join

    if _is_url(src_dir) or _is_url(dst_dir):  # objects: copied (on the server between s3:// ones)
        _copy_object(_join(src_dir, name), _join(dst_dir, name), _is_url(dst_dir), sync)
        return
    dst = os.path.join(dst_dir, name)
    if os.path.exists(dst):
        return  # the same directory, or another rank linked it first
    src = os.path.join(src_dir, name)
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        return
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    # Another file system: a copy, published as the Writer publishes files.
    tmp = f"{dst}.tmp-{os.getpid()}"
    shutil.copyfile(src, tmp)
    if sync:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, dst)


def _copy_object(src: str, dst: str, dst_is_url: bool, sync: bool) -> None:
    """A rank file of the previous checkpoint into the new one, unless it is
    there already (the same prefix, or another rank copied it first)."""
    from ..errors import NotFoundError

    try:
        _native.url_object_size(dst) if dst_is_url else os.stat(dst)
        return
    except (NotFoundError, FileNotFoundError):
        pass
    _native.copy_path(src, dst, sync)


def try_reuse(prev: Previous, dst_dir: str, item: WriteItem, t: torch.Tensor,
              sync: bool) -> Optional[_storage.WriteResult]:
    """The WriteResult naming the previous checkpoint's copy of `item` when
    its bytes are unchanged (same dtype, chunk and checksums), else None."""
    if item.index.offset is None or item.tensor_data is None:
        return None
    hit = prev.items.get((item.index.fqn, tuple(item.index.offset)))
    if hit is None:
        return None
    loc, dtype, sizes = hit
    if dtype != t.dtype or sizes != tuple(t.shape) or (loc.rows is not None and t.dim() == 0):
        return None
    if checksums(t, loc.rows) != loc.checksums:
        return None
    _link(prev.path, dst_dir, loc.file, sync)
    return _storage.WriteResult(index=item.index, size_in_bytes=loc.nbytes,
                                storage_data=Location(loc.file, loc.tensors, loc.rows, loc.nbytes, loc.checksums))
