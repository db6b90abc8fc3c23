"""safe_open: safetensors' lazy-loading API, on .safetensors and .tsafe files
(and any other format tensorsafe reads).

Same names, arguments and results as ``safetensors.safe_open``; errors are
tensorsafe's exceptions (``tensorsafe.Error`` subclasses that are also the
matching builtins: a missing tensor is a KeyError, a missing file a
FileNotFoundError). Differences are listed in docs/python.md.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _arrays, _dtypes, _native
from ._slicing import normalize_key, read_slice_from_view, slice_array
from .errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnsupportedError

_FRAMEWORKS = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt", "pytorch": "pt"}
_OTHER_FRAMEWORKS = {"tf", "tensorflow", "flax", "jax", "mlx", "paddle"}


def _framework(name: Any) -> str:
    fw = _FRAMEWORKS.get(str(name).lower()) if isinstance(name, str) else None
    if fw:
        return fw
    if isinstance(name, str) and name.lower() in _OTHER_FRAMEWORKS:
        raise UnsupportedError(f"framework {name} is not supported by tensorsafe (use 'np' or 'pt')")
    raise InvalidArgumentError(f"framework {name} is invalid (use 'np', 'numpy', 'pt', 'torch' or 'pytorch')")


def _device(framework: str, device: Any) -> Any:
    if device in ("cpu", None):
        return "cpu"
    if framework != "pt":
        raise InvalidArgumentError(f"device {device!r} is invalid for framework np: only 'cpu'")
    return device


class safe_open:  # noqa: N801 - the name safetensors uses
    """Opens a tensor file lazily and returns tensors as asked.

    Args:
        filename: a .safetensors or .tsafe file (or npz, gguf, ...: any
            format tensorsafe reads).
        framework: ``"np"``/``"numpy"`` or ``"pt"``/``"torch"``/``"pytorch"``.
        device: ``"cpu"`` (default); for torch, any torch device (tensors
            are moved there after loading).
        backend: ``"mmap"`` (default: zero-copy views of the file) or
            ``"pread"`` (each tensor read into fresh memory).

    Raises:
        FileNotFoundError / IOError, CorruptionError, UnsupportedError,
        InvalidArgumentError (unknown framework or backend).

    Example:
        >>> from tensorsafe import safe_open
        >>> with safe_open("model.safetensors", framework="pt") as f:
        ...     emb = f.get_slice("embedding")[:, :64]
        ...     w = f.get_tensor("lm_head.weight")
    """

    def __init__(self, filename: Union[str, "os.PathLike[str]"], framework: str, device: Any = "cpu", *,
                 backend: str = "mmap"):
        self._fw = _framework(framework)
        self._device = _device(self._fw, device)
        if backend not in ("mmap", "pread"):
            raise InvalidArgumentError(f"backend {backend!r} is invalid: use 'mmap' or 'pread'")
        self._path = os.fspath(filename)
        self._backend = backend
        self._cow = None
        fmt = self._fmt = _native.detect_format(self._path)
        self._bufs: Optional[Dict[str, Any]] = None
        if fmt == "tsafe":
            # Nothing per tensor is decoded here: opening costs the same for
            # 10 tensors or 100,000.
            self._reader = _native.Reader.open(self._path, backend)
            meta = self._reader.metadata()
            self._meta = json.loads(meta) if meta != "{}" else None
            self._file_size = self._reader.summary()["file_size"]
        else:
            self._reader = None
            bufs, meta = _native.read_file(self._path, "auto", backend == "pread")
            self._bufs = {b.name: b for b in bufs}
            self._meta = json.loads(meta) if meta else None
            self._file_size = os.stat(self._path).st_size
        self._closed = False
        self._keys: Optional[List[str]] = None
        self._offset_order: Optional[List[str]] = None

    # -- context manager ------------------------------------------------------
    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._reader = self._bufs = self._cow = None

    def _check(self) -> None:
        if self._closed:
            raise FailedPreconditionError(f"{self._path}: the file is closed")

    # -- listing ---------------------------------------------------------------
    def keys(self) -> List[str]:
        """The tensor names, sorted."""
        self._check()
        if self._keys is None:
            self._keys = sorted(self._reader.names() if self._reader is not None else self._bufs)
        return list(self._keys)

    def offset_keys(self) -> List[str]:
        """The tensor names in the order of their data in the file (tensors
        of zero bytes that share an offset keep their index order)."""
        self._check()
        if self._offset_order is None:
            if self._reader is not None:
                pairs = [(i["offset"], i["name"]) for i in self._reader.infos()]
            else:
                pairs = [(b.offset, b.name) for b in self._bufs.values()]
            self._offset_order = [n for _, n in sorted(pairs, key=lambda p: p[0])]
        return list(self._offset_order)

    def metadata(self) -> Optional[Dict[str, Any]]:
        """The file metadata (a dict of str for safetensors files; any JSON for
        .tsafe), or None when the file has none."""
        self._check()
        return None if self._meta is None else dict(self._meta)

    # -- tensors ---------------------------------------------------------------
    def _buffer(self, name: str):
        self._check()
        if self._reader is not None:
            return self._reader.get(name)
        try:
            return self._bufs[name]
        except (KeyError, TypeError):
            raise NotFoundError(f"File does not contain tensor {name}") from None

    def _to_device(self, t):
        return t if self._device == "cpu" else t.to(self._device)

    def get_tensor(self, name: str) -> Any:
        """The whole tensor ``name``: a read-only zero-copy ndarray for np; a
        torch tensor viewing a copy-on-write mapping for pt (writes are fine
        and never reach the file). A sparse COO tensor (.tsafe) is a
        :class:`tensorsafe.SparseCoo` for np and a ``torch.sparse_coo_tensor``
        (``is_coalesced`` as stored) for pt.

        Raises:
            NotFoundError: (a KeyError) no tensor of that name.
            UnsupportedError: a dtype the framework lacks (f6, i4, u4; f4 in NumPy).
        """
        buf = self._buffer(name)
        if self._fw == "np":
            return buf.numpy(False)
        return self._to_device(self._torch(buf))

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, in offset order, in one native call."""
        self._check()
        if self._reader is not None:
            if self._fw == "np":  # arrays made natively, already in data order
                with _arrays.no_gc():
                    return self._reader.get_many(None, True, False, True)
            if self._device == "cpu" and self._backend == "mmap":
                # Writable views of the copy-on-write mapping, made natively.
                cow = self._cow_file()
                if cow.mm is not None:
                    return cow.from_views(self._reader.get_many(None, False, False, True, cow.mm), self._torch)
            bufs = list(self._reader.get_many(None, False, False, True).values())
        else:
            bufs = sorted(self._bufs.values(), key=lambda b: b.offset)  # stable, as offset_keys()
        if self._fw == "np":
            return {b.name: b.numpy(False) for b in bufs}
        if self._device == "cpu":
            return {b.name: self._torch(b) for b in bufs}
        return {b.name: self._to_device(self._torch(b)) for b in bufs}

    def _torch(self, buf):
        if buf.layout == "coo":
            cow = self._cow_file() if self._backend == "mmap" and self._fmt == "tsafe" else None
            return _arrays.coo_torch(buf, cow)
        dname = buf.dtype
        # Offsets are file offsets for these two formats, whose tensors always
        # view the file; other codecs may decode into memory of their own.
        if self._backend != "mmap" or not buf.nbytes or self._fmt not in ("tsafe", "safetensors"):
            _arrays.torch_dtype(dname)  # UnsupportedError before any copy
            return _arrays.torch_from_numpy(np.array(buf.numpy(True)), dname, buf.shape)
        return self._cow_file().tensor(dname, buf.shape, buf.offset, buf.nbytes)

    def _cow_file(self):
        if self._cow is None:
            cow = _arrays.CowFile(self._path)
            if not cow.matches(self._path, self._file_size):
                raise FailedPreconditionError(f"{self._path}: the file changed since it was opened")
            self._cow = cow
        return self._cow

    def get_slice(self, name: str) -> "SafeSlice":
        """A lazy handle on ``name`` to index: ``f.get_slice("w")[:, 1:3]``."""
        buf = self._buffer(name)
        if buf.layout == "coo":
            raise UnsupportedError(f"tensor {name!r} is sparse COO: get_slice reads dense tensors; use "
                                   "get_tensor(name) (a torch sparse tensor or tensorsafe.SparseCoo)")
        return SafeSlice(self, name, {"name": name, "dtype": buf.dtype, "shape": buf.shape}, buf)


class SafeSlice:
    """What safe_open.get_slice returns: index it to read part of a tensor.

    Indexes: ints (negative from the end), slices with any step, one ``...``,
    ``()`` for everything, ``[]`` for nothing. The result is a fresh array or
    tensor (a copy), as in safetensors.

    Raises (on indexing):
        OutOfRangeError: (an IndexError) an int outside its dimension, or
            more indexes than dimensions.
        InvalidArgumentError: another kind of index, two ellipses, step 0.
    """

    def __init__(self, owner: safe_open, name: str, info: dict, buf):
        self._owner, self._name, self._info, self._buf = owner, name, info, buf

    def get_shape(self) -> List[int]:
        """The tensor's shape as a list."""
        return list(self._info["shape"])

    def get_dtype(self) -> str:
        """The dtype's safetensors code ("F32", "BF16", ...)."""
        d = self._info["dtype"]
        return _dtypes.SAFETENSORS.get(d, d.upper())

    def __getitem__(self, key: Any) -> Any:
        owner = self._owner
        owner._check()
        ops = normalize_key(key, self._info["shape"])
        if owner._reader is not None:
            arr = read_slice_from_view(owner._reader, self._info, ops)
        else:
            arr = slice_array(self._buf.numpy(False), ops)
        if owner._fw == "np":
            return arr
        return owner._to_device(_arrays.torch_from_numpy(arr, self._info["dtype"]))
