"""Writing and updating .tsafe files: Writer, Updater, compact, verify."""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, Optional, Tuple, Union

from . import _arrays, _native
from .errors import FailedPreconditionError

PathLike = Union[str, "os.PathLike[str]"]


def _entry(name: str, array: Any, metadata: Optional[Dict[str, Any]]):
    mod = type(array).__module__
    if mod.startswith("torch"):
        return _arrays.torch_entry(name, array, metadata)
    return _arrays.numpy_entry(name, array, metadata)


class Writer:
    """Writes a new .tsafe file in one pass; a context manager.

    The file is written to a temporary name beside ``path`` and renamed over
    it by :meth:`finish`, so no reader ever sees a partial file. Leaving the
    ``with`` block normally finishes; leaving it by an exception discards
    everything and leaves ``path`` untouched.

    Args:
        path: where the file appears on success.
        alignment: file offset alignment of each tensor's data (a power of
            two, default 64).
        sync: fsync the file and its directory on finish (default True).

    Raises:
        IOError: the temporary file cannot be created.
        InvalidArgumentError: a bad alignment.

    Example:
        >>> with tensorsafe.Writer("model.tsafe") as w:
        ...     w.add("w", np.ones((2, 3), np.float32), metadata={"role": "weight"})
        ...     w.set_metadata({"framework": "np"})
    """

    def __init__(self, path: PathLike, *, alignment: int = 64, sync: bool = True):
        self.path = os.fspath(path)
        self._w = _native.Writer.create(self.path, alignment, sync)
        self._lock = threading.Lock()  # a native Writer is used by one thread at a time
        self._done = False

    def add(self, name: str, array: Any, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Adds a tensor: a NumPy array (ml_dtypes for bf16/float8) or a CPU
        torch tensor. Non-contiguous NumPy arrays are copied first.

        Args:
            name: unique UTF-8 name.
            array: the data; its dtype picks the stored dtype.
            metadata: a JSON-serialisable dict stored with the tensor.

        Raises:
            InvalidArgumentError: duplicate or invalid name, bad metadata.
            UnsupportedError: a dtype tensorsafe cannot store.
            IOError: the write failed.
        """
        entry = _entry(name, array, metadata)
        with self._lock:
            self._open().add(entry)

    def add_many(self, tensors: Dict[str, Any]) -> None:
        """Adds every ``name: array`` of a dict in one native call."""
        entries = [_entry(k, v, None) for k, v in tensors.items()]
        with self._lock:
            self._open().add_many(entries)

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """Sets the file metadata: a dict of any JSON-serialisable values."""
        text = _arrays.meta_json(metadata)
        with self._lock:
            self._open().set_metadata(text)

    def finish(self) -> None:
        """Writes the index, syncs and renames the file into place."""
        with self._lock:
            w = self._open()
            self._done = True
            w.finish()

    def abandon(self) -> None:
        """Discards the file; ``path`` is untouched."""
        with self._lock:
            if not self._done:
                self._done = True
                self._w.abandon()

    @property
    def tensor_count(self) -> int:
        return self._w.tensor_count

    def _open(self):
        if self._done:
            raise FailedPreconditionError(f"{self.path}: the writer is finished")
        return self._w

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._done:
                self.finish()
        else:
            self.abandon()


class Updater:
    """Atomic in-place changes to an existing .tsafe file; a context manager.

    Changes are staged and become visible all at once on :meth:`commit`;
    leaving the ``with`` block normally commits, leaving it by an exception
    aborts (the file stays as it was). Only one updater may hold a file at a
    time; readers opened earlier keep their snapshot.

    Args:
        path: an existing .tsafe file.
        lock_timeout: seconds to wait for another updater (0: fail at once
            with FailedPreconditionError).
        sync: fsync around the commit (default True).

    Example:
        >>> with tensorsafe.Updater("model.tsafe") as u:
        ...     u.replace("w", np.zeros((2, 3), np.float32))
        ...     u.rename("b", "bias")
        ...     u.remove("old")
        ...     u.update_metadata({"step": 1000})
    """

    def __init__(self, path: PathLike, *, lock_timeout: float = 0.0, sync: bool = True):
        self.path = os.fspath(path)
        self._u = _native.Updater.open(self.path, lock_timeout, sync)
        self._lock = threading.Lock()

    def add(self, name: str, array: Any, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Adds a new tensor (InvalidArgumentError when the name exists)."""
        entry = _entry(name, array, metadata)
        with self._lock:
            self._u.add(entry)

    def replace(self, name: str, array: Any, metadata: Optional[Dict[str, Any]] = None) -> None:
        """Replaces a tensor's data, dtype and shape; keeps its metadata unless
        ``metadata`` is given. NotFoundError when absent."""
        entry = _entry(name, array, metadata)
        with self._lock:
            self._u.replace(entry, metadata is None)

    def remove(self, name: str) -> None:
        with self._lock:
            self._u.remove(name)

    def rename(self, old: str, new: str) -> None:
        with self._lock:
            self._u.rename(old, new)

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """Replaces the file metadata."""
        with self._lock:
            self._u.set_metadata(_arrays.meta_json(metadata))

    def update_metadata(self, patch: Dict[str, Any]) -> None:
        """Merges ``patch`` into the file metadata (RFC 7386: None deletes a key)."""
        with self._lock:
            self._u.merge_metadata(_arrays.meta_json(patch))

    def set_tensor_metadata(self, name: str, metadata: Optional[Dict[str, Any]]) -> None:
        with self._lock:
            self._u.set_tensor_metadata(name, _arrays.meta_json(metadata))

    def metadata(self) -> Dict[str, Any]:
        """The staged file metadata."""
        return json.loads(self._u.metadata())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._u.contains(name)

    def commit(self) -> None:
        """Makes every staged change visible at once."""
        with self._lock:
            self._u.commit()

    def abort(self) -> None:
        """Discards the staged changes."""
        with self._lock:
            self._u.abort()

    @property
    def sequence(self) -> int:
        return self._u.sequence

    def __enter__(self) -> "Updater":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        self._u = None  # releases the lock now


def compact(path: PathLike, *, sync: bool = True) -> Tuple[int, int]:
    """Rewrites the live tensors of a .tsafe file, reclaiming space that
    updates left behind.

    Returns:
        (bytes_before, bytes_after).
    """
    return _native.compact(os.fspath(path), sync)


def verify(path: PathLike) -> Dict[str, Any]:
    """Checks every byte of a .tsafe file (index checksums, entries, each
    tensor's data checksum), or of a sharded checkpoint (its index, its
    directory, or their URL: docs/SHARDED.md): every shard's structure and,
    for .tsafe shards, every tensor's data checksum, as `tensorsafe verify`
    does.

    Returns:
        {"tensors": count, "data_bytes": bytes verified}.

    Raises:
        CorruptionError: the first problem found, naming the file and the
            damaged tensors.
    """
    from ._load import checkpoint_format

    resolved, fmt = checkpoint_format(os.fspath(path))
    if fmt == "sharded":
        view = _native.TensorSetView.open(resolved)
        view.verify()
        return {"tensors": len(view), "data_bytes": sum(s["nbytes"] for s in view.infos())}
    r = _native.Reader.open(resolved, "pread")
    r.verify()
    s = r.summary()
    return {"tensors": s["tensor_count"], "data_bytes": s["data_bytes"]}
