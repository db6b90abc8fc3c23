"""tensorsafe.open(): read a .tsafe file (the native format)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Optional, Union

import numpy as np

from . import _arrays, _dtypes, _native
from ._slicing import normalize_key, read_slice_from_view
from .errors import FailedPreconditionError, InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]


class Reader:
    """An open .tsafe file: a read-only mapping of names to tensors.

    Use :func:`tensorsafe.open` to make one. Arrays it returns in ``"mmap"``
    mode are zero-copy views of the file, read-only, and keep the mapping
    alive on their own: they stay valid after the reader is closed or
    garbage-collected. In ``"pread"`` mode each read copies the tensor into
    fresh memory. All methods may be called from many threads at once; the
    GIL is released while reading.

    Example:
        >>> import tensorsafe as ts
        >>> with ts.open("model.tsafe") as r:
        ...     w = r["layer.0.weight"]        # numpy.ndarray, zero-copy
        ...     part = r.read_slice("layer.0.weight", np.s_[:2, ::4])
    """

    def __init__(self, path: PathLike, mode: str = "mmap", read_threads: int = 0):
        self._path = os.fspath(path)
        self._mode = mode
        self._native = _native.Reader.open(self._path, mode, read_threads)

    # -- mapping protocol --------------------------------------------------
    def __len__(self) -> int:
        return len(self._r)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._r.contains(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._r.names())

    def __getitem__(self, name: str) -> Any:
        """The tensor ``name`` as a read-only ndarray (see :meth:`get`), or a
        :class:`tensorsafe.SparseCoo` for a sparse COO tensor.

        Raises:
            NotFoundError: (a KeyError) no tensor of that name.
            UnsupportedError: a packed dtype NumPy cannot hold (use get(packed=True)).
        """
        return self._r.get(name).numpy(False)

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else f"{len(self)} tensors"
        return f"<tensorsafe.Reader {self._path!r} ({self._mode}, {state})>"

    @property
    def _r(self):
        if self._native is None:
            raise FailedPreconditionError(f"{self._path}: the reader is closed")
        return self._native

    # -- API ---------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._path

    def close(self) -> None:
        """Releases the reader. Arrays already returned stay valid."""
        self._native = None

    def names(self) -> List[str]:
        """Tensor names in file order."""
        return self._r.names()

    def keys(self) -> List[str]:
        return self.names()

    def metadata(self) -> Dict[str, Any]:
        """The file metadata as a dict ({} when none)."""
        return json.loads(self._r.metadata())

    def info(self, name: str) -> Dict[str, Any]:
        """What the index says of ``name``.

        Returns:
            dict with ``name``, ``dtype`` (tensorsafe name, e.g. ``"f32"``),
            ``shape`` (tuple), ``offset`` and ``nbytes`` (of the data in the
            file), ``checksum`` (XXH3-64) and ``metadata`` (a dict).

        Raises:
            NotFoundError: no tensor of that name.
        """
        d = self._r.find(name)
        d["metadata"] = json.loads(d["metadata"]) if d["metadata"] else {}
        return d

    def summary(self) -> Dict[str, Any]:
        """Layout facts of the file (sizes, index position, header slot...)."""
        return self._r.summary()

    def get(self, name: str, framework: str = "np", *, packed: bool = False, copy: bool = False) -> Any:
        """The tensor ``name``.

        Args:
            name: the tensor's name.
            framework: ``"np"`` for a read-only zero-copy ndarray, ``"pt"``
                for a torch tensor (a copy-on-write view of the file: writes
                never reach it), ``"buffer"`` for the raw
                :class:`TensorBuffer` (buffer protocol and DLPack). A sparse
                COO tensor is a :class:`tensorsafe.SparseCoo` for np and a
                ``torch.sparse_coo_tensor`` for pt (indices checked first:
                CorruptionError).
            packed: for packed sub-byte dtypes (f6, f4, i4, u4) that NumPy
                cannot hold, return their raw bytes as uint8 instead of
                raising.
            copy: (np) read into a fresh writable array instead of viewing
                the mapping; large copies go through pread, faster than
                faulting the mapping in.

        Raises:
            NotFoundError, UnsupportedError, CorruptionError, IOError.
        """
        if framework in ("np", "numpy"):
            if copy:
                return self._copy(name, packed)
            return self._r.get(name).numpy(packed)
        if framework == "buffer":
            return self._r.get(name)
        if framework in ("pt", "torch", "pytorch"):
            return self.get_many([name], framework="pt")[name]
        raise InvalidArgumentError(f"framework must be 'np', 'pt' or 'buffer', not {framework!r}")

    def _copy(self, name: str, packed: bool) -> Any:
        info = self._r.find(name)
        if info.get("layout") == "coo":
            s = self._r.get(name).numpy(packed)
            return s._replace(indices=np.array(s.indices), values=np.array(s.values))
        npdt = _dtypes.NUMPY[info["dtype"]]
        _native.check_shape(name, info["dtype"], info["shape"])
        if npdt is None:
            if not packed:
                return self._r.get(name).numpy(False)  # raises UnsupportedError
            out = np.empty(info["nbytes"], np.uint8)
        else:
            out = np.empty(info["shape"], npdt)
        self._r.read_into(name, out.reshape(-1).view(np.uint8))
        return out

    def tensor(self, name: str):
        """The raw :class:`TensorBuffer` of ``name``: ``torch.from_dlpack(r.tensor(n))``."""
        return self._r.get(name)

    def get_many(self, names: Optional[List[str]] = None, framework: str = "np", *,
                 packed: bool = False, copy: bool = False) -> Dict[str, Any]:
        """Several tensors (all by default, in file order) in one call; much
        faster than a loop of :meth:`get` for many small tensors. ``copy``
        as for :meth:`get`."""
        if framework in ("np", "numpy"):
            if copy:
                return {n: self._copy(n, packed) for n in (names if names is not None else self._r.names())}
            return self._r.get_many(names, True, packed)
        if framework not in ("pt", "torch", "pytorch"):
            raise InvalidArgumentError(f"framework must be 'np' or 'pt', not {framework!r}")
        bufs = self._r.get_many(names, False, packed)
        if self._mode == "pread":
            return {n: _arrays.torch_from_numpy(np.array(b.numpy(True)), b.dtype, b.shape)
                    if b.layout == "dense" else _arrays.coo_torch(b) for n, b in bufs.items()}
        cow = _arrays.CowFile(self._path)
        if not cow.matches(self._path, self.summary()["file_size"]):
            raise FailedPreconditionError(f"{self._path}: the file changed since it was opened")
        return {n: cow.tensor(b.dtype, b.shape, b.offset, b.nbytes)
                if b.layout == "dense" else _arrays.coo_torch(b, cow) for n, b in bufs.items()}

    def read_slice(self, name: str, key: Any) -> np.ndarray:
        """Reads only the part ``key`` (ints, slices with steps, ``...``) of a
        tensor into a new ndarray, like ``r[name][key]`` but without touching
        the rest (in pread mode, only the rows needed are read).

        Raises:
            OutOfRangeError: (an IndexError) an int index outside the tensor.
            InvalidArgumentError: an index of another kind.
        """
        info = self._r.find(name)
        return read_slice_from_view(self._r, info, normalize_key(key, info["shape"]))

    def verify(self) -> None:
        """Checks everything: index checksums, every entry, every tensor's
        data checksum. Raises CorruptionError naming the damaged tensors."""
        self._r.verify()


def open(path: PathLike, mode: str = "mmap", *, read_threads: int = 0) -> Reader:  # noqa: A001 - tensorsafe.open
    """Opens a .tsafe file for reading.

    Args:
        path: the file.
        mode: ``"mmap"`` (default) maps the file and serves zero-copy views;
            ``"pread"`` reads each tensor into fresh memory (network file
            systems, little RAM).
        read_threads: threads that share each read of 32 MiB or more (a
            ``copy=True`` get, or any get in ``"pread"`` mode), the caller's
            included: 0 (default) one per core up to 4; 1 the caller alone,
            as suits a data-loader worker.

    Returns:
        A :class:`Reader`; a context manager.

    Raises:
        FileNotFoundError / IOError: the file cannot be opened (an OSError).
        CorruptionError: bad bytes (a ValueError).
        UnsupportedError: a newer major version or an unknown required feature.

    Example:
        >>> with tensorsafe.open("model.tsafe") as r:
        ...     print(r.names(), r.metadata())
    """
    if mode not in ("mmap", "pread"):
        raise InvalidArgumentError(f"mode must be 'mmap' or 'pread', not {mode!r}")
    if not isinstance(read_threads, int) or isinstance(read_threads, bool) or not 0 <= read_threads <= 64:
        raise InvalidArgumentError(f"read_threads must be an int from 0 to 64, not {read_threads!r}")
    return Reader(path, mode, read_threads)
