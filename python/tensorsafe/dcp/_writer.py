"""StorageWriter: each rank's items into its own .tsafe file(s); the
coordinator commits the JSON metadata last (docs/DCP.md §4)."""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.distributed.checkpoint import storage as _storage
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.futures import Future

from .. import _native
from .._load import is_url as _is_url  # the package's test: file:// is local
from ..errors import InvalidArgumentError, UnsupportedError
from ..writer import Writer
from . import _schema
from ._schema import METADATA_NAME, Location

PathLike = Union[str, "os.PathLike[str]"]

# Rank files: __<rank>_<save id>[_<part>].tsafe (a save id is 16 hex digits).
RANK_FILE = re.compile(r"^__\d+_[0-9a-f]{16}(?:_\d+)?\.tsafe$")
# Leftovers a killed save may leave: the metadata's temp file and the
# Writer's own temp files (<name>.tsafe.tmp...).
_TEMP_FILE = re.compile(r"^(?:\.tensorsafe-dcp\.json\.[0-9a-f]{16}\.tmp|__\d+_[0-9a-f]{16}(?:_\d+)?\.tsafe\..+)$")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _join(checkpoint: str, name: str) -> str:
    """A file of a checkpoint: in its directory, or under its URL prefix."""
    return checkpoint.rstrip("/") + "/" + name if _is_url(checkpoint) else os.path.join(checkpoint, name)


def _file_size(path: str) -> int:
    return _native.url_object_size(path) if _is_url(path) else os.stat(path).st_size


def _tensor_name(item: WriteItem) -> str:
    idx = item.index
    if item.type == WriteItemType.BYTE_IO or idx.offset is None:
        return idx.fqn
    td = item.tensor_data
    if td is not None and list(td.chunk.sizes) == list(td.size) and not any(idx.offset):
        return idx.fqn  # the whole tensor: its plain name
    return f"{idx.fqn}[{','.join(str(o) for o in idx.offset)}]"


class StorageWriter(_storage.StorageWriter):
    """Saves a DCP checkpoint as .tsafe files plus a JSON metadata document.

    Each rank writes its items into ``__<rank>_<save id>.tsafe`` (aligned,
    every tensor checksummed, temp + fsync + rename); the coordinator then
    writes ``tensorsafe-dcp.json`` the same way. That rename is the commit:
    before it the directory holds the previous checkpoint, untouched, and
    after it the new one; files the new metadata does not name are removed
    only then. No pickle is written: plain Python values reach us as the
    bytes of DCP's ``torch.save`` and are stored as uint8 tensors.

    Args:
        path: the checkpoint directory (created when missing), or a URL
            prefix (``s3://bucket/ckpt/step100``, or a scheme fsspec
            stores): each file is staged under $TMPDIR and uploaded whole,
            the metadata last (docs/DCP.md, "At a URL").
        sync: fsync every file and the directory (default True; without it
            a power loss may lose the checkpoint, never a process crash).
        block_bytes: tensors larger than this are stored as row blocks, each
            with its own checksum, so a resharded load reads and verifies
            only the blocks it needs (default 64 MiB).
        thread_count: files each rank writes in parallel threads (default 1).
        alignment: file alignment of each tensor's data (default 64).
        incremental_from: a committed checkpoint directory (or URL): items
            whose bytes equal its item of the same name and offsets (XXH3-64
            of each block) are not written again; the new metadata names
            that checkpoint's rank file, hard-linked (or copied) into
            ``path``, or at URLs copied on the server (s3://) or through a
            local file, so deleting either checkpoint never breaks the
            other.

    Example:
        >>> import torch.distributed.checkpoint as dcp
        >>> from tensorsafe.dcp import StorageWriter, StorageReader
        >>> dcp.save(model.state_dict(), storage_writer=StorageWriter("ckpt/step100"))
        >>> dcp.load(sd, storage_reader=StorageReader("ckpt/step100"))
    """

    def __init__(self, path: PathLike, *, sync: bool = True, block_bytes: int = 64 << 20,
                 thread_count: int = 1, alignment: int = 64, incremental_from: Optional[PathLike] = None):
        super().__init__()
        if not isinstance(block_bytes, int) or block_bytes < 1:
            raise InvalidArgumentError(f"block_bytes must be a positive int, not {block_bytes!r}")
        if not isinstance(thread_count, int) or not 1 <= thread_count <= 64:
            raise InvalidArgumentError(f"thread_count must be an int from 1 to 64, not {thread_count!r}")
        self.path = os.fspath(path)
        self.sync = sync
        self.block_bytes = block_bytes
        self.thread_count = thread_count
        self.alignment = alignment
        self.incremental_from = None if incremental_from is None else os.fspath(incremental_from)
        self.save_id = uuid.uuid4().hex[:16]
        self.rank = 0
        self.is_coordinator = True

    # -- DCP's StorageWriter ------------------------------------------------
    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = uuid.uuid4().hex[:16]

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank") or 0
        if not kwargs.get("use_collectives", True):
            raise UnsupportedError("tensorsafe.dcp needs use_collectives=True: one coordinator commits "
                                   "the metadata of every rank")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not _is_url(self.path):  # a URL prefix needs no folder
            os.makedirs(self.path, exist_ok=True)
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # The coordinator's save id names every rank's files, so that a new
        # save never overwrites a file the committed metadata names.
        return [dataclasses.replace(p, storage_data=f"__{i}_{self.save_id}") for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        prefix = plan.storage_data
        if not isinstance(prefix, str):
            raise UnsupportedError("tensorsafe.dcp: the plan has no file prefix (prepare_global_plan did not run)")
        prev = None
        if self.incremental_from is not None:
            from ._incremental import Previous

            prev = Previous(self.incremental_from)
        buckets = self._buckets(plan.items)
        names = [f"{prefix}.tsafe"] if len(buckets) == 1 else [f"{prefix}_{k}.tsafe" for k in range(len(buckets))]
        if len(buckets) <= 1:
            results = [r for b, n in zip(buckets, names) for r in self._write_file(n, b, planner, prev)]
        else:
            lock = threading.Lock()  # resolve_data is not documented thread-safe
            with ThreadPoolExecutor(len(buckets)) as pool:
                parts = pool.map(lambda bn: self._write_file(bn[1], bn[0], planner, prev, lock),
                                 zip(buckets, names))
                results = [r for part in parts for r in part]
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[_storage.WriteResult]]) -> None:
        from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION

        metadata.version = CURRENT_DCP_VERSION
        storage = {}
        for wr_list in results:
            for wr in wr_list:
                storage[wr.index] = wr.storage_data
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        files: Dict[str, Dict[str, Any]] = {}
        for loc in storage.values():
            if loc.file not in files:
                # As the writing rank saw it: a coordinator of a thousand ranks
                # asks the store nothing (reused files of an incremental save
                # are stat'ed).
                size = getattr(loc, "file_size", None)
                files[loc.file] = {"size": size if size is not None else _file_size(_join(self.path, loc.file))}
        doc = _schema.encode(metadata, self.save_id, files)
        if _is_url(self.path):  # one upload, which is the commit: the object appears whole or not at all
            _native.publish_bytes(_join(self.path, METADATA_NAME), doc, self.sync)
            self._collect(set(files))
            return
        tmp = os.path.join(self.path, f".{METADATA_NAME}.{self.save_id}.tmp")
        final = os.path.join(self.path, METADATA_NAME)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                view = memoryview(doc)
                while view:
                    view = view[os.write(fd, view):]
                if self.sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)  # the commit
        except BaseException:
            # A failed commit leaves the previous checkpoint and no temp file.
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        if self.sync:
            _fsync_dir(self.path)
        self._collect(set(files))

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    # -- internals ----------------------------------------------------------
    def _collect(self, keep: set) -> None:
        """After the commit: removes rank files of earlier saves and the
        leftovers of interrupted ones (one save at a time per directory)."""
        if _is_url(self.path):  # staged files never reach the store: only rank files to look at
            for url in _native.list_urls(_join(self.path, "__")):
                name = url[url.rfind("/") + 1:]
                if RANK_FILE.match(name) and name not in keep:
                    _native.remove_path(url)
            return
        for name in os.listdir(self.path):
            if (RANK_FILE.match(name) and name not in keep) or _TEMP_FILE.match(name):
                try:
                    os.unlink(os.path.join(self.path, name))
                except FileNotFoundError:
                    pass

    def _buckets(self, items: List[WriteItem]) -> List[List[WriteItem]]:
        if not items:
            return []
        n = min(self.thread_count, len(items))
        if n == 1:
            return [list(items)]
        sizes = [0] * n
        out: List[List[WriteItem]] = [[] for _ in range(n)]
        for it in sorted(items, key=_item_bytes, reverse=True):
            k = sizes.index(min(sizes))
            out[k].append(it)
            sizes[k] += _item_bytes(it)
        return [b for b in out if b]

    def _write_file(self, name: str, items: List[WriteItem], planner: SavePlanner, prev,
                    lock: Optional[threading.Lock] = None) -> List[_storage.WriteResult]:
        path = _join(self.path, name)
        pending: List[Tuple[WriteItem, List[str], Optional[int], int]] = []
        reused: List[_storage.WriteResult] = []
        w: Optional[Writer] = None  # created for the first item not reused
        try:
            for item in items:
                if lock is not None:
                    with lock:
                        data = planner.resolve_data(item)
                else:
                    data = planner.resolve_data(item)
                base = _tensor_name(item)
                if item.type == WriteItemType.BYTE_IO:
                    arr = np.frombuffer(data.getvalue(), np.uint8)
                    w = w or Writer(path, alignment=self.alignment, sync=self.sync)
                    w.add(base, arr)
                    pending.append((item, [base], None, arr.nbytes))
                    continue
                t = data.detach()
                if t.device.type != "cpu":
                    t = t.to("cpu")
                t = t.contiguous()
                if prev is not None:
                    from ._incremental import try_reuse

                    hit = try_reuse(prev, self.path, item, t, self.sync)
                    if hit is not None:
                        reused.append(hit)
                        continue
                w = w or Writer(path, alignment=self.alignment, sync=self.sync)
                tensor_names, rows = self._add_tensor(w, base, t)
                pending.append((item, tensor_names, rows, t.numel() * t.element_size()))
            if w is not None:
                w.finish()
        except BaseException:
            if w is not None:
                w.abandon()
            raise
        if w is None:
            return reused
        # The checksums the writer computed, from the file's index: the
        # metadata records them for incremental saves and for verification.
        written = _native.Reader.open(path, "pread")
        sums = {i["name"]: i["checksum"] for i in written.infos()}
        size = written.summary()["file_size"]
        return [_storage.WriteResult(index=item.index, size_in_bytes=nbytes,
                                     storage_data=Location(name, tn, rows, nbytes, [sums[n] for n in tn], size))
                for item, tn, rows, nbytes in pending] + reused

    def _add_tensor(self, w: Writer, base: str, t: torch.Tensor) -> Tuple[List[str], Optional[int]]:
        nbytes = t.numel() * t.element_size()
        if t.dim() == 0 or nbytes <= self.block_bytes or t.shape[0] < 2:
            w.add(base, t)
            return [base], None
        row_bytes = nbytes // t.shape[0]
        rows = max(1, self.block_bytes // max(1, row_bytes))
        names = []
        for k, start in enumerate(range(0, t.shape[0], rows)):
            n = f"{base}#{k}"
            w.add(n, t[start:start + rows])
            names.append(n)
        return names, rows


def _item_bytes(item: WriteItem) -> int:
    if item.type == WriteItemType.BYTE_IO or item.tensor_data is None:
        return 1 << 10
    n = 1
    for s in item.tensor_data.chunk.sizes:
        n *= s
    return n * torch.empty((), dtype=item.tensor_data.properties.dtype).element_size()
