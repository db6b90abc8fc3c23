"""StorageReader: the JSON metadata, then only the row blocks each rank
needs, checksums verified (docs/DCP.md §5, §6)."""

from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch
from torch.distributed.checkpoint import storage as _storage
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from .. import _native
from ..errors import CorruptionError, Error, InvalidArgumentError, NotFoundError
from . import _schema
from ._schema import METADATA_NAME, Location
from ._writer import RANK_FILE, _is_url, _join

# The metadata is read whole: at most this much (a checkpoint of millions of
# items has a metadata document of a few hundred MB).
_MAX_DOCUMENT = 1 << 30

PathLike = Union[str, "os.PathLike[str]"]


def read_document(path: str) -> bytes:
    """The bytes of the committed metadata of checkpoint ``path``.

    Raises:
        NotFoundError: the directory has no committed checkpoint.
    """
    meta = _join(path, METADATA_NAME)
    if _is_url(path):
        try:
            return _native.read_whole(meta, _MAX_DOCUMENT)
        except NotFoundError:
            try:
                ranks = any(RANK_FILE.match(u[u.rfind("/") + 1:]) for u in _native.list_urls(_join(path, "__")))
                what = ("holds rank files but no committed metadata: an interrupted save, never loadable" if ranks
                        else "holds no checkpoint")
            except Error:  # a server that lists nothing (http)
                what = "has no committed metadata"
            raise NotFoundError(f"{path}: not a tensorsafe checkpoint: {METADATA_NAME} is missing; "
                                f"the prefix {what}") from None
    try:
        with open(meta, "rb") as f:
            return f.read()
    except FileNotFoundError:
        what = "does not exist" if not os.path.exists(path) else (
            "holds rank files but no committed metadata: an interrupted save, never loadable"
            if any(n.startswith("__") and ".tsafe" in n for n in os.listdir(path)) else "has no committed metadata")
        raise NotFoundError(f"{path}: not a tensorsafe checkpoint: {METADATA_NAME} is missing; "
                            f"the directory {what}") from None


def load_metadata(path: PathLike) -> Metadata:
    """The DCP Metadata of the checkpoint in directory ``path``."""
    path = os.fspath(path)
    return _schema.decode(read_document(path), _join(path, METADATA_NAME))


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    return t.reshape(-1).view(torch.uint8).numpy()


class StorageReader(_storage.StorageReader):
    """Loads a checkpoint written by :class:`StorageWriter`, on any number of
    ranks (DCP's planners do the resharding).

    Each rank opens only the files holding items it needs and reads only
    the row blocks those items overlap. Every block read is checked against
    its XXH3-64 checksum unless ``verify=False``, which reads the exact
    byte ranges instead (less I/O when resharding, no check). Plain Python
    values come back through DCP's own ``torch.load(weights_only=False)`` in
    its planner: load checkpoints with Python values only from sources you
    trust (docs/DCP.md §6).

    Args:
        path: the checkpoint directory, or its URL prefix.
        verify: check the checksum of every block read (default True).
        read_threads: threads sharing each read of 32 MiB or more (0: up
            to 4).

    Raises (from dcp.load, wrapped in DCP's CheckpointException):
        NotFoundError: no committed checkpoint in ``path``.
        CorruptionError: damaged metadata, or a damaged block, naming the
            file, the tensor, the item and its offsets.
    """

    def __init__(self, path: PathLike, *, verify: bool = True, read_threads: int = 0):
        super().__init__()
        self.path = os.fspath(path)
        self.verify = verify
        self.read_threads = read_threads
        self.storage_data: Dict[Any, Location] = {}
        self.metadata: Optional[Metadata] = None

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        self.storage_data = {}
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        md = load_metadata(self.path)
        if md.storage_meta is None:
            md.storage_meta = StorageMeta()
        return md

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.metadata = metadata
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        if not isinstance(checkpoint_id, (str, os.PathLike)):
            return False
        path = os.fspath(checkpoint_id)
        return _is_url(path) or os.path.isfile(os.path.join(path, METADATA_NAME))

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        per_file: Dict[str, List[ReadItem]] = {}
        for req in plan.items:
            loc = self.storage_data.get(req.storage_index)
            if loc is None:
                raise CorruptionError(f"{_join(self.path, METADATA_NAME)}: no storage entry for item "
                                      f"{req.storage_index.fqn!r} at offsets {list(req.storage_index.offset or [])}")
            per_file.setdefault(loc.file, []).append(req)
        for file, reqs in per_file.items():
            path = _join(self.path, file)
            try:
                r = _native.Reader.open(path, "pread", self.read_threads)
            except Error as e:
                raise type(e)(f"checkpoint file {path}: {e}") if isinstance(e, CorruptionError) else e
            for req in reqs:
                loc = self.storage_data[req.storage_index]
                if req.type == LoadItemType.BYTE_IO:
                    buf = np.empty(loc.nbytes, np.uint8)
                    self._read_into(r, path, loc.tensors[0], req, buf, 0)
                    planner.load_bytes(req, io.BytesIO(buf.tobytes()))
                else:
                    target = planner.resolve_tensor(req).detach()
                    self._read_tensor(r, path, loc, req, target)
                    planner.commit_tensor(req, target)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    # -- internals ----------------------------------------------------------
    def _stored_dtype(self, req: ReadItem) -> torch.dtype:
        sm = self.metadata.state_dict_metadata[req.storage_index.fqn]
        return sm.properties.dtype

    def _read_into(self, r, path: str, name: str, req: ReadItem, out: np.ndarray, row0: int,
                   verify: Optional[bool] = None) -> None:
        try:
            r.read_into(name, out, self.verify if verify is None else verify)
        except Error as e:
            raise self._named(e, r, path, name, req, row0) from e

    def _named(self, e: Error, r, path: str, name: str, req: ReadItem, row0: int) -> Error:
        try:
            info = r.find(name)
            where = f"data at file offset {info['offset']} + {info['nbytes']} bytes"
        except Error:
            where = "not in the file"
        off = list(req.storage_index.offset) if req.storage_index.offset is not None else None
        msg = (f"checkpoint file {path}: tensor {name!r} (item {req.storage_index.fqn!r}, chunk offsets {off}, "
               f"from row {row0}; {where}): {e}")
        return CorruptionError(msg) if isinstance(e, CorruptionError) else NotFoundError(msg) \
            if isinstance(e, NotFoundError) else e

    def _read_tensor(self, r, path: str, loc: Location, req: ReadItem, target: torch.Tensor) -> None:
        so, ln = list(req.storage_offsets), list(req.lengths)
        if list(target.shape) != ln:
            raise InvalidArgumentError(f"item {req.storage_index.fqn!r}: the planner asks for {ln} elements "
                                       f"but its target has shape {list(target.shape)}")
        if target.numel() == 0:
            return
        stored = self._stored_dtype(req)
        if target.dim() == 0 or loc.rows is None:
            blocks = [(loc.tensors[0], 0)]
        else:
            k0, k1 = so[0] // loc.rows, -(-(so[0] + ln[0]) // loc.rows)
            if k1 > len(loc.tensors):
                raise CorruptionError(f"checkpoint file {path}: item {req.storage_index.fqn!r} needs row block "
                                      f"{k1 - 1} but the metadata lists {len(loc.tensors)}")
            blocks = [(loc.tensors[k], k * loc.rows) for k in range(k0, k1)]
        for name, start in blocks:
            try:
                shape = list(r.find(name)["shape"])
            except Error as e:
                raise self._named(e, r, path, name, req, start) from e
            if target.dim() == 0:
                lo, hi, dest = [], [], target
            else:
                a = max(so[0], start) - start
                b = min(so[0] + ln[0], start + shape[0]) - start
                lo = [a] + so[1:]
                hi = [b] + [s + n for s, n in zip(so[1:], ln[1:])]
                dest = target.narrow(0, start + a - so[0], b - a)
                if len(shape) != len(lo) or any(h > s for h, s in zip(hi, shape)):
                    raise CorruptionError(f"checkpoint file {path}: tensor {name!r} has shape {shape}; item "
                                          f"{req.storage_index.fqn!r} needs rows/columns up to {hi}")
            whole = not any(lo) and hi == shape
            if whole and dest.is_contiguous() and stored == target.dtype:
                self._read_into(r, path, name, req, _bytes_of(dest), start)
            elif self.verify or whole:
                buf = torch.empty(shape, dtype=stored)
                self._read_into(r, path, name, req, _bytes_of(buf), start)
                dest.copy_(buf[tuple(slice(x, y) for x, y in zip(lo, hi))])
            else:
                out = dest if dest.is_contiguous() and stored == target.dtype else torch.empty(
                    dest.shape, dtype=stored)
                try:
                    r.read_slice(name, lo, hi, [1] * len(lo), _bytes_of(out))
                except Error as e:
                    raise self._named(e, r, path, name, req, start) from e
                if out is not dest:
                    dest.copy_(out)
