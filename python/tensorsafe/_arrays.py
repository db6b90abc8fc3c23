"""Conversions between NumPy arrays / torch tensors and the native module's
tensors: the (name, dtype, shape, data, metadata_json) entries it writes, and
the zero-copy TensorBuffers it reads."""

from __future__ import annotations

import contextlib
import gc
import json
import mmap
import os
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _dtypes, _native
from .errors import InvalidArgumentError, UnsupportedError

_native._set_numpy_dtypes(_dtypes.numpy_table_by_code())

# (name, dtype name, shape, data, metadata JSON); the shape may be None when
# data is a C-contiguous ndarray (the native side reads the array's own).
Entry = Tuple[str, str, Optional[Tuple[int, ...]], Any, str]

# Standard NumPy dtypes export the buffer protocol themselves; ml_dtypes
# types do not, so those go through a uint8 view.
_BUFFER_OK = {np.dtype(t) for t in (np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8,
                                    np.int16, np.int32, np.int64, np.float16, np.float32, np.float64,
                                    np.complex64, np.complex128)}


@contextlib.contextmanager
def no_gc():
    """Pauses the cyclic garbage collector while many objects are made.

    Making an entry or a view per tensor allocates a few objects each; with
    100,000 tensors the collections this triggers traverse every live tensor
    again and again (torch tensors are GC-tracked) and took 3/4 of a save's
    time. Nothing made here forms cycles.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def meta_json(metadata: Optional[Dict[str, Any]]) -> str:
    """JSON text of a metadata dict ("" for None)."""
    if metadata is None:
        return ""
    if not isinstance(metadata, dict):
        raise InvalidArgumentError(f"metadata must be a dict, not {type(metadata).__name__}")
    _check_keys(metadata)
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)


def _check_keys(d: Dict[Any, Any]) -> None:
    # json.dumps would write 1, None or True as the keys "1", "null", "true".
    for k, v in d.items():
        if not isinstance(k, str):
            raise InvalidArgumentError(f"metadata key {k!r} is a {type(k).__name__}, not a str")
        if isinstance(v, dict):
            _check_keys(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, dict):
                    _check_keys(x)


class SparseCoo(NamedTuple):
    """A sparse COO tensor for NumPy, which has no sparse arrays: what
    ``framework="np"`` readers return for a sparse tensor, and what
    :class:`tensorsafe.Writer` accepts to write one.

    Attributes:
        indices: int64 ``[rank, nnz]``: column k is the coordinate of
            ``values[k]`` (the layout of ``torch.sparse_coo_tensor`` and
            ``scipy.sparse.coo_array``). From a reader: a read-only view of
            the file (the stored ``[nnz, rank]`` rows, transposed).
        values: ``[nnz]`` of the tensor's dtype (read-only view).
        shape: the dense shape.
        coalesced: the coordinates are sorted (row-major) and unique.

    Example:
        >>> s = tensorsafe.open("m.tsafe")["sparse"]
        >>> dense = s.to_dense()
    """

    indices: np.ndarray
    values: np.ndarray
    shape: Tuple[int, ...]
    coalesced: bool = False

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    def to_dense(self) -> np.ndarray:
        """A new dense ndarray; repeated coordinates (uncoalesced) are summed,
        as torch's ``to_dense`` does."""
        out = np.zeros(self.shape, self.values.dtype)
        if self.nnz:
            if self.values.dtype == np.bool_:
                np.logical_or.at(out, tuple(self.indices), self.values)
            else:
                np.add.at(out, tuple(self.indices), self.values)
        return out


def coo_numpy(buf: Any, packed: bool = False) -> SparseCoo:
    """The :class:`SparseCoo` of a sparse TensorBuffer (indices checked)."""
    indices, values, _ = buf.coo(packed)
    return SparseCoo(indices.T, values, tuple(buf.shape), bool(buf.coalesced))


def coo_torch(buf: Any, cow: Optional["CowFile"] = None):
    """A ``torch.sparse_coo_tensor`` of a sparse TensorBuffer. The values view
    ``cow`` (the file's copy-on-write mapping) when given and aligned, else
    are copied; the indices are checked before torch sees them (torch does
    not bound-check) and copied (torch wants them [rank, nnz]: the file
    stores [nnz, rank])."""
    import torch

    indices, values, values_offset = buf.coo(False)
    dname = buf.dtype
    if dname == "f4_e2m1":
        raise UnsupportedError(f"tensor {buf.name!r}: sparse f4_e2m1 has no torch layout (float4_e2m1fn_x2 "
                               "packs two values per element)")
    tdtype = torch_dtype(dname)
    if cow is not None and values.nbytes:
        tvalues = cow.tensor(dname, (values.shape[0],), values_offset, values.nbytes)
    else:
        tvalues = torch.from_numpy(np.array(values).view(np.uint8)).view(tdtype)
    tindices = torch.from_numpy(np.array(indices.T, order="C"))  # always a writable copy
    # check_invariants=False: CheckCooIndices (in buf.coo) did the bound and order checks.
    return torch.sparse_coo_tensor(tindices, tvalues, tuple(buf.shape), is_coalesced=bool(buf.coalesced),
                                   check_invariants=False)


def coo_entry(name: str, dname: str, shape: Tuple[int, ...], indices_nr: np.ndarray, values_bytes: Any,
              coalesced: bool, metadata: Optional[Dict[str, Any]]) -> Tuple[Any, ...]:
    """The 7-tuple the native writer takes for a sparse tensor; ``indices_nr``
    is int64 [nnz, rank] C-contiguous."""
    return (name, dname, tuple(int(d) for d in shape), values_bytes, meta_json(metadata),
            indices_nr, bool(coalesced))


def sparse_numpy_entry(name: str, s: SparseCoo, metadata: Optional[Dict[str, Any]] = None) -> Tuple[Any, ...]:
    values = np.asarray(s.values)
    dname = _FROM_NUMPY_GET(values.dtype)
    if dname is None:
        raise UnsupportedError(f"tensor {name!r}: NumPy dtype {values.dtype} has no tensorsafe dtype")
    shape = tuple(int(d) for d in s.shape)
    indices = np.asarray(s.indices)
    if indices.ndim != 2 or indices.shape[0] != len(shape) or indices.shape[1] != values.shape[0] or \
            values.ndim != 1:
        raise InvalidArgumentError(
            f"tensor {name!r}: SparseCoo needs indices [rank, nnz] = [{len(shape)}, {values.shape[0]}] and "
            f"values [nnz]; got indices {list(indices.shape)} and values {list(values.shape)}")
    rows = np.ascontiguousarray(indices.T, dtype=np.int64)
    vbytes = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    return coo_entry(name, dname, shape, rows, vbytes, s.coalesced, metadata)


def numpy_entry(name: str, array: Any, metadata: Optional[Dict[str, Any]] = None) -> Entry:
    """The entry for a NumPy array (anything np.asarray accepts), or a
    :class:`SparseCoo`."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"tensor names must be str, not {type(name).__name__}")
    if type(array) is SparseCoo:
        return sparse_numpy_entry(name, array, metadata)  # type: ignore[return-value]
    arr = array if type(array) is np.ndarray else np.asarray(array)
    dt = arr.dtype
    dname = _FROM_NUMPY_GET(dt)  # None for big-endian and unsupported dtypes
    if dname is None:
        if not dt.isnative and dt.newbyteorder("=") in _dtypes.FROM_NUMPY:
            dt = dt.newbyteorder("=")  # big-endian input is stored little-endian
            arr = arr.astype(dt)
            dname = _dtypes.FROM_NUMPY[dt]
        else:
            hint = (" (ml_dtypes' unpacked int4/uint4/float4/float6 are not stored: pack them first)"
                    if dt.name in _UNPACKED_ML_DTYPES else "")
            raise UnsupportedError(f"tensor {name!r}: NumPy dtype {dt} has no tensorsafe dtype{hint}")
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    data = arr if dt in _BUFFER_OK else arr.reshape(-1).view(np.uint8)
    return (name, dname, arr.shape, data, "" if metadata is None else meta_json(metadata))


_FROM_NUMPY_GET = _dtypes.FROM_NUMPY.get
# ml_dtypes' sub-byte types, one element a byte: tensorsafe stores them packed.
_UNPACKED_ML_DTYPES = frozenset({"int4", "uint4", "int2", "uint2", "float4_e2m1fn", "float6_e2m3fn",
                                 "float6_e3m2fn"})
# Native-order standard dtypes -> names: arrays of these go to the writer as
# they are (the native side reads their pointer from the array struct).
_PLAIN_NUMPY = {dt: n for dt, n in _dtypes.FROM_NUMPY.items() if dt in _BUFFER_OK and dt.isnative}


def torch_entry(name: str, tensor: Any, metadata: Optional[Dict[str, Any]] = None) -> Entry:
    """The entry for a contiguous CPU torch tensor (ValueError otherwise, as
    safetensors raises)."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(tensor)}")
    # Cheap attributes first: this runs once per tensor of a state dict
    # (`is_cpu` costs 75 ns, `device.type` 540 ns).
    layout = tensor.layout
    if layout is not torch.strided:
        if layout is torch.sparse_coo:
            return sparse_torch_entry(name, tensor, metadata)  # type: ignore[return-value]
        raise InvalidArgumentError(f"tensor {name!r} is sparse ({layout}); only sparse COO is stored: "
                                   "call .to_sparse() or .to_dense() first")
    if not tensor.is_contiguous():
        raise InvalidArgumentError(
            f"tensor {name!r} is not contiguous; call .contiguous() on it (or use save_model)")
    copied = not tensor.is_cpu
    if copied:
        tensor = tensor.to("cpu")
    dname = _TORCH_TO_NAME().get(tensor.dtype)
    if dname is None:
        raise UnsupportedError(f"tensor {name!r}: torch dtype {tensor.dtype} has no tensorsafe dtype")
    shape = tensor.shape  # a tuple subclass
    if dname == "f4_e2m1":  # float4_e2m1fn_x2 holds two values per element
        shape = tuple(shape[:-1]) + (shape[-1] * 2,) if shape else (2,)
    meta = "" if metadata is None else meta_json(metadata)
    if copied:
        # Nothing else holds the CPU copy: the entry holds its bytes (an
        # ndarray whose base keeps the tensor alive), not an address.
        return (name, dname, shape, tensor.reshape(-1).view(torch.uint8).numpy(), meta)
    # The address of the contiguous CPU data: the native side computes the
    # size from dtype and shape; `tensor` stays alive in the caller's dict.
    return (name, dname, shape, tensor.data_ptr(), meta)


def _TORCH_TO_NAME() -> Dict[Any, str]:
    return _dtypes.torch_tables()[1]


def sparse_torch_entry(name: str, tensor: Any, metadata: Optional[Dict[str, Any]] = None) -> Tuple[Any, ...]:
    """The native entry of a ``torch.sparse_coo_tensor`` (native COO)."""
    import torch

    if tensor.dense_dim() != 0:
        raise UnsupportedError(f"tensor {name!r} is a hybrid sparse tensor ({tensor.sparse_dim()} sparse and "
                               f"{tensor.dense_dim()} dense dimensions); tensorsafe stores scalar values: "
                               "call .to_dense().to_sparse() first")
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    to_name = _dtypes.torch_tables()[1]
    dname = to_name.get(tensor.dtype)
    if dname is None or dname == "f4_e2m1":
        raise UnsupportedError(f"tensor {name!r}: torch dtype {tensor.dtype} has no tensorsafe dtype for sparse "
                               "values")
    coalesced = tensor.is_coalesced()
    rows = tensor._indices().t().contiguous().numpy()  # [nnz, rank]: a copy that keeps its own memory
    values = tensor._values().contiguous()
    vbytes = values.view(torch.uint8).numpy() if values.numel() else np.empty(0, np.uint8)
    return coo_entry(name, dname, tuple(tensor.shape), rows, vbytes, coalesced, metadata)


def to_numpy(buf, packed: bool = False) -> np.ndarray:
    """A read-only zero-copy ndarray over a TensorBuffer."""
    return buf.numpy(packed)


def torch_from_numpy(arr: np.ndarray, dname: str, shape: Optional[Tuple[int, ...]] = None):
    """A torch tensor viewing ``arr``, which must be writable memory of its own
    (a slice or pread copy); ``shape`` is the logical shape when ``arr`` holds
    the raw bytes of a packed dtype."""
    import torch

    tdtype = torch_dtype(dname)
    tshape = torch_shape(dname, tuple(arr.shape) if shape is None else tuple(shape))
    flat = torch.from_numpy(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return flat.view(tdtype).reshape(tshape)


def torch_dtype(dname: str):
    to = _dtypes.torch_tables()[0]
    try:
        return to[dname]
    except KeyError:
        raise UnsupportedError(f"dtype {dname} has no PyTorch equivalent") from None


def torch_shape(dname: str, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    if dname == "f4_e2m1":
        if not shape or shape[-1] % 2:
            raise UnsupportedError(f"f4_e2m1 tensor of shape {list(shape)}: torch's float4_e2m1fn_x2 "
                                   "needs an even last dimension")
        return tuple(shape[:-1]) + (shape[-1] // 2,)
    return tuple(shape)


class CowFile:
    """A private copy-on-write mapping of a whole file as a torch uint8 tensor.

    Torch has no read-only tensors, and writing into a read-only mapping
    kills the process; so tensors handed to torch view this mapping instead:
    zero-copy until written, and writes never reach the file (the pages are
    copied), as safetensors does. ``matches`` tells whether the mapping is of
    the same file (inode and size) as the one the native reader validated.
    """

    def __init__(self, path: str, expect_size: Optional[int] = None):
        import torch

        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            self.size = st.st_size
            self._ident = (st.st_dev, st.st_ino)
            self._typed: Dict[Any, Any] = {}
            if self.size == 0:
                self.base = torch.empty(0, dtype=torch.uint8)
                self.mm = None
                return
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            # Reads go in offset order: larger readahead, as safetensors
            # advises its mapping (docs/LOAD.md, the mapped path).
            with contextlib.suppress(AttributeError, OSError):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self.mm: Optional[mmap.mmap] = mm
        self.base = torch.frombuffer(mm, dtype=torch.uint8)  # keeps `mm` alive
        self.path = path

    def prefault(self) -> None:
        """Reads the whole file in and maps it, in the kernel's large batches
        (MADV_POPULATE_READ, Linux 5.14) rather than a page fault per 64 KiB,
        32 MiB pieces on several threads: for load_file, whose caller wants
        every tensor. Older kernels get MADV_WILLNEED (readahead only)."""
        if self.mm is not None:
            from . import _native

            _native.populate(self.mm)

    def matches(self, path: str, size: Optional[int]) -> bool:
        st = os.stat(path)
        return (st.st_dev, st.st_ino) == self._ident and (size is None or size == self.size)

    @staticmethod
    def from_views(views: Dict[str, Any], slow: Any) -> Dict[str, Any]:
        """Torch tensors of ``views``: writable ndarrays viewing ``self.mm``
        (``Reader.get_many(cow=...)``) go through ``torch.from_numpy``, the
        cheapest way to a tensor (1.2 us against 2 us for ``as_strided``);
        other values (TensorBuffers) through ``slow``."""
        import torch

        from_numpy = torch.from_numpy
        ndarray = np.ndarray
        out = {}
        with no_gc():
            for name, v in views.items():
                if type(v) is not ndarray:
                    out[name] = slow(v)
                elif v.dtype in _TORCH_FROM_NUMPY:
                    out[name] = from_numpy(v)
                else:  # ml_dtypes (bf16, float8): same-size ints, then torch's dtype
                    tdtype = torch_dtype(_dtypes.FROM_NUMPY[v.dtype])
                    out[name] = from_numpy(v.view(_SAME_SIZE_INT[v.dtype.itemsize])).view(tdtype)
        return out

    def tensor(self, dname: str, shape: Tuple[int, ...], offset: int, nbytes: int):
        """The tensor at [offset, offset + nbytes) of the file (a view when the
        offset is aligned to the element size, else a copy)."""
        typed = self._typed.get(dname)
        if typed is None:
            tdtype = torch_dtype(dname)
            item = tdtype.itemsize
            usable = self.size - self.size % item
            typed = self._typed[dname] = (self.base[:usable].view(tdtype), item, tdtype)
        base, item, tdtype = typed
        tshape = torch_shape(dname, shape) if dname == "f4_e2m1" else shape
        if nbytes == 0 or offset % item:
            import torch
            if nbytes == 0:
                return torch.empty(tshape, dtype=tdtype)
            return self.base[offset:offset + nbytes].clone().view(tdtype).view(tshape)
        strides = []
        acc = 1
        for d in reversed(tshape):
            strides.append(acc)
            acc *= d if d else 1
        strides.reverse()
        return base.as_strided(tshape, strides, offset // item)


# NumPy dtypes torch.from_numpy takes as they are.
_TORCH_FROM_NUMPY = {np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
                                           np.float16, np.float32, np.float64, np.complex64, np.complex128,
                                           np.uint16, np.uint32, np.uint64)}
_SAME_SIZE_INT = {1: np.dtype(np.uint8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def entries_from_dict(tensors: Dict[str, Any], *, framework: str,
                      tensor_metadata: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Entry]:
    if not isinstance(tensors, dict):
        raise InvalidArgumentError(f"Expected a dict of [str, tensor] but received {type(tensors)}")
    make = torch_entry if framework == "pt" else numpy_entry
    with no_gc():
        if tensor_metadata:
            return [make(k, v, tensor_metadata.get(k)) for k, v in tensors.items()]
        if framework == "pt":
            return torch_entries(tensors)[0]
        return _numpy_entries(tensors)


def _numpy_entries(tensors: Dict[str, Any]) -> List[Entry]:
    """numpy_entry for each item, with the common case (a C-contiguous
    ndarray of a little-endian standard dtype, a str name) inlined: its
    shape is left to the native side (None), and the dtype's table lookup
    is skipped while arrays share one dtype object."""
    out: List[Entry] = []
    append = out.append
    ndarray, plain = np.ndarray, _PLAIN_NUMPY
    last_dtype, last_name = None, None
    for name, a in tensors.items():
        if type(a) is ndarray and type(name) is str:
            dt = a.dtype
            if dt is not last_dtype:
                last_dtype, last_name = dt, plain.get(dt)
            if last_name is not None and a.flags.c_contiguous:
                append((name, last_name, None, a, ""))
                continue
        append(numpy_entry(name, a))
    return out


def torch_entries(tensors: Dict[str, Any]) -> Tuple[List[Entry], bool]:
    """(torch_entry for each item, whether every tensor was a dense CPU
    tensor, so that the entries point at the caller's own memory). The
    common case (a contiguous dense CPU tensor of a plain dtype, a str name)
    is inlined: a state dict of 100,000 small tensors spent more time here
    than in writing the file."""
    import torch

    Tensor, strided = torch.Tensor, torch.strided
    to_name = _dtypes.torch_tables()[1]
    out: List[Entry] = []
    append = out.append
    all_cpu = True
    with no_gc():
        for name, t in tensors.items():
            if type(t) is Tensor and type(name) is str and t.layout is strided and t.is_cpu and t.is_contiguous():
                dname = to_name.get(t.dtype)
                if dname is not None and dname != "f4_e2m1":
                    append((name, dname, t.shape, t.data_ptr(), ""))
                    continue
            all_cpu = all_cpu and isinstance(t, Tensor) and t.is_cpu
            append(torch_entry(name, t))
    return out, all_cpu


def iter_names(entries: Iterable[Entry]) -> List[str]:
    return [e[0] for e in entries]
