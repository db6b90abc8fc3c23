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
from ._load import checkpoint_format, is_url
from ._slicing import Op, normalize_key, read_slice_from_view, slice_array
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
        self._open(os.fspath(filename), backend)

    def _open(self, path: str, backend: str) -> None:
        self._path = path
        # A URL cannot be mapped (docs/REMOTE.md): its tensors are always read
        # into memory of their own, as backend="pread" reads a file.
        self._url = is_url(path)
        self._backend = "pread" if self._url else backend
        self._closed = False
        self._keys: Optional[List[str]] = None
        self._offset_order: Optional[List[str]] = None
        self._reader = self._view = None
        path, fmt = checkpoint_format(path)
        if fmt == "tsafe":
            # Nothing per tensor is decoded here: opening costs the same for
            # 10 tensors or 100,000.
            self._reader = _native.Reader.open(path, backend)
            meta = self._reader.metadata()
            self._meta = json.loads(meta) if meta != "{}" else None
            self._shard_paths = [path]
            self._file_sizes = [self._reader.summary()["file_size"]]
            self._fmt = "tsafe"
        else:
            # Every other format, and sharded checkpoints (an index or its
            # directory: docs/SHARDED.md), through one lazy native view:
            # tensors become Python objects only when asked for.
            view = self._view = _native.TensorSetView.open(path)
            shards = view.shards()
            meta = view.metadata()
            self._meta = json.loads(meta) if meta else None
            self._shard_paths = [s["path"] for s in shards]
            self._file_sizes = [s["file_size"] for s in shards]
            self._fmt = view.format  # of the shards, for a sharded checkpoint
        self._cows: List[Any] = [None] * len(self._shard_paths)

    # -- context manager ------------------------------------------------------
    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self._reader = self._view = None
        self._cows = []

    def _check(self) -> None:
        if self._closed:
            raise FailedPreconditionError(f"{self._path}: the file is closed")

    # -- listing ---------------------------------------------------------------
    def keys(self) -> List[str]:
        """The tensor names, sorted."""
        self._check()
        if self._keys is None:
            self._keys = sorted(self._reader.names()) if self._reader is not None else self._view.sorted_names()
        return list(self._keys)

    def offset_keys(self) -> List[str]:
        """The tensor names in the order of their data in the file (tensors
        of zero bytes that share an offset keep their index order)."""
        self._check()
        if self._offset_order is None:
            if self._reader is not None:
                pairs = [(i["offset"], i["name"]) for i in self._reader.infos()]
                self._offset_order = [n for _, n in sorted(pairs, key=lambda p: p[0])]
            else:  # shard by shard, each in data order
                self._offset_order = self._view.offset_names()
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
        if not self._view.contains(name):
            raise NotFoundError(f"File does not contain tensor {name}")
        return self._view.get(name)

    def _info(self, name: str) -> Dict[str, Any]:
        """What the header or index says of ``name``; nothing is read."""
        self._check()
        if self._reader is not None:
            return self._reader.find(name)
        if not self._view.contains(name):
            raise NotFoundError(f"File does not contain tensor {name}")
        return self._view.find(name)

    def _shard(self, name: str) -> int:
        """The shard that holds ``name`` (0 unless the checkpoint is sharded)."""
        return self._view.shard_of(name) if len(self._shard_paths) > 1 else 0

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
        if self._fw != "np" and self._backend == "pread":
            info = self._info(name)
            if info.get("layout") != "coo" and info["nbytes"]:
                # One read straight into the tensor, not into a buffer copied again.
                if self._reader is not None:
                    return self._to_device(self._read_tsafe(info))
                if self._fmt in ("tsafe", "safetensors"):
                    return self._read_fresh([info])[name]
        buf = self._buffer(name)
        if self._fw == "np":
            return buf.numpy(False)
        return self._to_device(self._torch(buf, self._shard(name) if self._view is not None else 0))

    def _read_tsafe(self, info: Dict[str, Any]) -> Any:
        """A dense .tsafe tensor read into a fresh torch tensor (pread backend)."""
        import torch

        name, dname, shape = info["name"], info["dtype"], tuple(info["shape"])
        _native.check_shape(name, dname, shape)
        t = torch.empty(_arrays.torch_shape(dname, shape), dtype=_arrays.torch_dtype(dname))
        self._reader.read_into(name, t.reshape(-1).view(torch.uint8).numpy())
        return t

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, in offset order (shard by shard for a sharded
        checkpoint), in one native call."""
        self._check()
        if self._backend == "pread" and self._fw != "np" and self._fmt in ("tsafe", "safetensors"):
            # One read of each byte, straight into the tensors' own memory
            # (docs/LOAD.md): not a reader's buffer copied again by np.array.
            fresh = self._load_fresh()
            if fresh is not None:
                return fresh
        if self._reader is not None:
            if self._fw == "np":  # arrays made natively, already in data order
                with _arrays.no_gc():
                    return self._reader.get_many(None, True, False, True)
            if self._device == "cpu" and self._backend == "mmap":
                # Writable views of the copy-on-write mapping, made natively.
                cow = self._cow_file(0)
                cow.prefault()
                if cow.mm is not None:
                    return cow.from_views(self._reader.get_many(None, False, False, True, cow.mm), self._torch)
            bufs = list(self._reader.get_many(None, False, False, True).values())
            if self._fw == "np":
                return {b.name: b.numpy(False) for b in bufs}
            return {b.name: self._to_device(self._torch(b)) for b in bufs}
        view = self._view
        if self._fw == "np":
            with _arrays.no_gc():
                return view.get_many(None, True, False)
        if self._device == "cpu" and self._backend == "mmap" and self._fmt in ("tsafe", "safetensors"):
            cows = [self._cow_file(i) for i in range(len(self._shard_paths))]
            for c in cows:
                c.prefault()
            views = view.get_many(None, False, False, [c.mm for c in cows])
            return _arrays.CowFile.from_views(views, lambda b: self._torch(b, self._shard(b.name)))
        if self._backend == "pread" and self._fmt in ("tsafe", "safetensors"):
            return self._read_fresh([i for i in view.infos()])
        bufs = list(view.get_many(None, False, False).values())
        return {b.name: self._to_device(self._torch(b, self._shard(b.name))) for b in bufs}

    def _load_fresh(self) -> Optional[Dict[str, Any]]:
        """Every tensor through tensorsafe.load (no checksum check: the mmap
        backend makes none either), in offset order; None when the loader
        cannot take the file (sparse tensors), for the per-tensor path."""
        from ._load import load

        try:
            out = load(self._path, verify=False)
        except UnsupportedError:
            return None
        if self._device != "cpu":
            return {k: self._to_device(v) for k, v in out.items()}
        return out

    def _read_fresh(self, infos: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Torch tensors in fresh memory, filled by positional reads of the
        files spread over threads (no page faults of a mapping)."""
        import torch

        out: Dict[str, Any] = {}
        names, addresses = [], []
        with _arrays.no_gc():
            for info in infos:
                name, dname = info["name"], info["dtype"]
                if info.get("layout") == "coo":
                    out[name] = _arrays.coo_torch(self._view.get(name))
                    continue
                _native.check_shape(name, dname, info["shape"])
                t = torch.empty(_arrays.torch_shape(dname, tuple(info["shape"])), dtype=_arrays.torch_dtype(dname))
                out[name] = t
                if info["nbytes"]:
                    names.append(name)
                    addresses.append(t.data_ptr())
        self._view.read_into(names, addresses)
        if self._device != "cpu":
            return {k: self._to_device(v) for k, v in out.items()}
        return out

    def _torch(self, buf, shard: int = 0):
        if buf.layout == "coo":
            cow = self._cow_file(shard) if self._backend == "mmap" and self._fmt == "tsafe" else None
            return _arrays.coo_torch(buf, cow)
        dname = buf.dtype
        # Offsets are file offsets for these two formats, whose tensors always
        # view the file; other codecs may decode into memory of their own. A
        # PyTorch checkpoint's tensor views the file when its offset is not 0
        # (copies have offset 0: formats/pytorch.md).
        views_file = self._fmt in ("tsafe", "safetensors") or (self._fmt == "pytorch" and buf.offset != 0)
        if self._backend != "mmap" or not buf.nbytes or not views_file:
            _arrays.torch_dtype(dname)  # UnsupportedError before any copy
            return _arrays.torch_from_numpy(np.array(buf.numpy(True)), dname, buf.shape)
        return self._cow_file(shard).tensor(dname, buf.shape, buf.offset, buf.nbytes)

    def _cow_file(self, shard: int = 0):
        cow = self._cows[shard]
        if cow is None:
            path = self._shard_paths[shard]
            cow = _arrays.CowFile(path)
            if not cow.matches(path, self._file_sizes[shard]):
                raise FailedPreconditionError(f"{path}: the file changed since it was opened")
            self._cows[shard] = cow
        return cow

    def get_slice(self, name: str) -> "SafeSlice":
        """A lazy handle on ``name`` to index: ``f.get_slice("w")[:, 1:3]``.
        Nothing is read until it is indexed (a tensor at a URL is fetched
        then)."""
        info = self._info(name)
        if info.get("layout") == "coo":
            raise UnsupportedError(f"tensor {name!r} is sparse COO: get_slice reads dense tensors; use "
                                   "get_tensor(name) (a torch sparse tensor or tensorsafe.SparseCoo)")
        return SafeSlice(self, name, {"name": name, "dtype": info["dtype"], "shape": tuple(info["shape"])})


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

    def __init__(self, owner: safe_open, name: str, info: dict):
        self._owner, self._name, self._info, self._buf = owner, name, info, None

    def _rows(self, ops: List[Op]) -> np.ndarray:
        """ops of a tensor at a URL: the rows of dimension 0 they span,
        fetched alone (one ranged read), then sliced."""
        first = ops[0]
        rows = [first] if isinstance(first, int) else range(*first)
        lo = min(rows) if len(rows) else 0
        n = max(rows) + 1 - lo if len(rows) else 0
        if isinstance(first, int):
            shifted: Op = first - lo
        elif n:
            start, _, step = first
            shifted = (start - lo, (rows[-1] - lo) + (1 if step > 0 else -1), step)
        else:
            shifted = (0, 0, 1)
        block = self._owner._view.get_rows(self._name, lo, n).numpy(False)
        return slice_array(block, [shifted] + list(ops[1:]))

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
        elif owner._url and ops and _dtypes.NUMPY.get(self._info["dtype"]) is not None:
            arr = self._rows(ops)
        else:
            if self._buf is None:
                self._buf = owner._buffer(self._name)
            arr = slice_array(self._buf.numpy(False), ops)
        if owner._fw == "np":
            return arr
        return owner._to_device(_arrays.torch_from_numpy(arr, self._info["dtype"]))
