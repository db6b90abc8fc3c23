"""An LMDB store of tensor batches: key -> batch (named tensors + JSON
metadata), each value one checksummed native stream message
(include/tensorsafe/stream/lmdb.h, docs/STREAM.md §10), with the semantics of
``tensorsafe lmdb put | get | ls | rm``.

Reads are zero-copy: :meth:`Store.get` returns read-only NumPy views (or
torch tensors through DLPack) of LMDB's memory map, each batch holding the
read transaction it came from open as long as any of its arrays lives (so a
view can never outlive the data). An open transaction keeps LMDB from
reusing the pages it sees and takes one of ``max_readers`` reader slots:
read many keys through one :meth:`Store.snapshot`, or use ``copy=True`` for
data kept long.

Example:
    >>> from tensorsafe.lmdb import Store
    >>> with Store("db") as db:
    ...     db.put("batch-0", {"x": np.arange(4, dtype=np.float32)}, {"step": 0})
    ...     x = db["batch-0"]["x"]                 # a view of the map
    ...     db.load("model.tsafe", group=1)        # one key per tensor, as `lmdb put`
    ...     [e.key for e in db.ls()]
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

from . import _arrays, _native
from .errors import _from_status
from .stream import Batch, batch_entries, decode_batch

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["Store", "Snapshot", "Entry"]

_IO_ERROR = 5  # StatusCode::kIOError (errors.py maps ENOENT to FileNotFoundError)


class Entry(NamedTuple):
    """One key's size facts (from its message header only), as ``lmdb ls``."""

    key: str
    tensors: int
    bytes: int


def _decode(got: Tuple[List[Any], str], framework: str, with_metadata: bool) -> Any:
    buffers, meta = got
    batch = decode_batch(buffers, framework)
    if with_metadata:
        return batch, (json.loads(meta) if meta else None)
    return batch


class Snapshot:
    """A read transaction: one consistent view of the whole store. Batches
    from :meth:`get` view the map and keep the transaction open after
    :meth:`close` until they are gone."""

    def __init__(self, native: Any, framework: str) -> None:
        self._s = native
        self.framework = framework

    def get(self, key: str, framework: Optional[str] = None, *, with_metadata: bool = False) -> Any:
        """The batch at ``key`` (views); with ``with_metadata`` a pair
        (batch, metadata or None). NotFoundError (a KeyError) when absent."""
        return _decode(self._s.get(str(key)), framework or self.framework, with_metadata)

    def ls(self, prefix: str = "") -> List[Entry]:
        """Entries in key order whose key starts with ``prefix``."""
        return [Entry(*e) for e in self._s.list(prefix)]

    def close(self) -> None:
        self._s.close()

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Store:
    """An LMDB store at ``path`` (a directory, created when missing; with
    ``subdir=False`` the data file itself).

    Args:
        map_size: the most bytes the store may hold (virtual address space;
            the file grows as needed). A put beyond it raises
            LimitExceededError.
        read_only: open without write access (the store must exist).
        max_readers: concurrent read transactions (snapshots and batches
            viewing the map) of all processes together.
        sync: fsync each commit.
        verify: check each value's data checksums when read.
        framework: what reads return by default: ``"np"`` (read-only
            views), ``"pt"`` (torch tensors, zero-copy through DLPack) or
            ``"buffer"``.

    Raises:
        FileNotFoundError: ``read_only`` and no store at ``path``.
        IOError, InvalidArgumentError: as LMDB refuses.
    """

    def __init__(self, path: PathLike, *, map_size: int = 64 << 30, read_only: bool = False, subdir: bool = True,
                 max_readers: int = 126, sync: bool = True, verify: bool = True, framework: str = "np") -> None:
        self.path = os.fspath(path)
        if read_only and not os.path.exists(self.path):
            raise _from_status(_IO_ERROR, f"{self.path}: no such store", errno.ENOENT)
        self.framework = framework
        self._s = _native.LmdbStore.open(self.path, int(map_size), bool(read_only), bool(subdir), int(max_readers),
                                         bool(sync), bool(verify))

    # -- writing (lmdb put, lmdb rm) ---------------------------------------------
    def put(self, key: str, batch: Batch, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Stores ``batch`` (a dict or list of arrays / tensors, as a stream
        batch) at ``key`` (1..511 bytes), replacing any value, in its own
        transaction."""
        keep: List[Any] = []
        self._s.put(str(key), batch_entries(batch, keep), _arrays.meta_json(metadata))

    def put_many(self, items: Union[Mapping[str, Batch], Iterable[Tuple[Any, ...]]]) -> None:
        """Stores many batches in one transaction (all or nothing): a mapping
        key -> batch, or (key, batch) / (key, batch, metadata) tuples."""
        keep: List[Any] = []
        rows = []
        for item in (items.items() if isinstance(items, Mapping) else items):
            key, batch, meta = (tuple(item) + (None,))[:3]
            rows.append((str(key), batch_entries(batch, keep), _arrays.meta_json(meta)))
        self._s.put_many(rows)

    def load(self, source: PathLike, *, group: int = 1, prefix: str = "", key: Optional[str] = None) -> int:
        """``lmdb put DB SOURCE``: stores a .tsafe file, or every .tsafe file
        of a directory, as batches; returns how many. ``group`` tensors per
        batch: 1 = one per tensor (key = prefix + name), N, 0 = the whole
        file (key = prefix + file name); a directory's keys get
        ``<file name>/`` after the prefix. ``key``: the whole file (any format
        tensorsafe reads) as one batch under ``prefix + key``. Data checksums
        are checked on the way (a damaged file is not stored)."""
        src = os.fspath(source)
        if key is not None:
            from .formats import detect_format, read
            from .writer import verify

            if detect_format(src) == "tsafe":
                verify(src)
            tensors, meta = read(src)
            self.put(prefix + key, tensors, meta or None)
            return 1
        if os.path.isdir(src):
            return int(self._s.load_directory(src, int(group), prefix))
        return int(self._s.load(src, int(group), prefix))

    def rm(self, key: str) -> None:
        """``lmdb rm``: deletes ``key``; NotFoundError (a KeyError) when absent."""
        self._s.delete(str(key))

    def __delitem__(self, key: str) -> None:
        self.rm(key)

    # -- reading (lmdb get, lmdb ls) --------------------------------------------------
    def get(self, key: str, framework: Optional[str] = None, *, copy: bool = False,
            with_metadata: bool = False) -> Any:
        """``lmdb get``: the batch at ``key``, viewing the map in a read
        transaction of its own (``copy=True``: arrays that own a copy and hold
        no transaction); with ``with_metadata`` a pair (batch, metadata or
        None). NotFoundError (a KeyError) when absent; CorruptionError when
        the value fails its checks."""
        fw = framework or self.framework
        if copy:
            return _decode(self._s.get_copy(str(key)), fw, with_metadata)
        snap = self._s.snapshot()
        try:
            return _decode(snap.get(str(key)), fw, with_metadata)
        finally:
            snap.close()  # the batch's arrays keep the transaction open

    def __getitem__(self, key: str) -> Batch:
        return self.get(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and any(e.key == key for e in self.ls(key))

    def ls(self, prefix: str = "") -> List[Entry]:
        """``lmdb ls``: entries in key order whose key starts with ``prefix``."""
        return [Entry(*e) for e in self._s.list(prefix)]

    def keys(self, prefix: str = "") -> List[str]:
        return [e.key for e in self.ls(prefix)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.ls())

    def snapshot(self, framework: Optional[str] = None) -> Snapshot:
        """A read transaction for many consistent zero-copy reads."""
        return Snapshot(self._s.snapshot(), framework or self.framework)

    def close(self) -> None:
        """Closes the store (batches already read stay valid)."""
        self._s.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"tensorsafe.lmdb.Store({self.path!r})"
