"""Sharded datasets for training (docs/python-dataset.md, docs/DATASET.md).

- :class:`Writer` writes samples (dicts of named fields) into a dataset
  directory: columnar ``.tsafe`` shards and ``index.json``.
- :class:`Dataset` is map-style (``len``, ``ds[i]``), compatible with
  ``torch.utils.data.Dataset``.
- :class:`StreamingDataset` (module ``tensorsafe.streaming``, re-exported
  here) is a ``torch.utils.data.IterableDataset`` that partitions samples
  over nodes x ranks x DataLoader workers, shuffles them per epoch with a
  seed, and resumes mid-epoch (``state_dict`` / ``load_state_dict``), also
  on another world size.
- :func:`merge` joins independently written parts without copying shards;
  :func:`verify` checks every byte.

Field values are converted as follows on write, and come back as:

============================  ==========  ===================================
written                       kind        read back as
============================  ==========  ===================================
numpy array / scalar, torch   ``tensor``  read-only numpy array, a
tensor (any tensorsafe dtype,             :class:`SampleArray` (zero-copy;
incl. ml_dtypes bf16/float8)              ``arr.base`` keeps the shard
                                          mapped)
bytes, bytearray, memoryview  ``bytes``   bytes
str                           ``str``     str
int (fits int64)              ``int``     int
float                         ``float``   float
dict, list, tuple, bool,      ``json``    the JSON value (tuples as lists)
None
============================  ==========  ===================================

Example:
    >>> import numpy as np
    >>> from tensorsafe import dataset
    >>> with dataset.Writer("ds") as w:
    ...     for i in range(100):
    ...         w.add({"x": np.full(4, i, np.float32), "label": i})
    >>> ds = dataset.Dataset("ds")
    >>> ds[-1]["label"]
    99
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays, _dtypes, _native
from .errors import Error, InvalidArgumentError, OutOfRangeError
from .streaming import DEFAULT_SEED, SamplerState, StreamingDataset, world_from_env

try:  # torch is optional: the classes derive from its datasets when present
    import torch as _torch
    from torch.utils.data import Dataset as _TorchDataset
except ImportError:  # pragma: no cover - exercised without torch only
    _torch = None
    _TorchDataset = object

__all__ = ["Writer", "Dataset", "StreamingDataset", "SampleArray", "SamplerState", "merge", "verify",
           "world_from_env", "DEFAULT_SEED"]

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = ("tensor", "bytes", "str", "int", "float", "json")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------------------
# Schema


def _schema_json(schema: Any) -> str:
    """The native schema JSON for a declared schema.

    Accepts ``{name: spec}`` where spec is a kind name (``"bytes"``,
    ``"str"``, ``"int"``, ``"float"``, ``"json"``), a ``(dtype, shape)`` tuple
    for a tensor (``None`` in the shape = any size), or a dict ``{"kind":
    ..., "dtype": ..., "shape": ...}``. A dtype is a NumPy or torch dtype, a
    string with NumPy's meaning (``"int64"``, ``"<f4"``, ``"i8"`` is int64),
    or a tensorsafe name NumPy does not read otherwise (``"bf16"``,
    ``"f32"``); a string both read differently (``"i8"``, ``"u8"``,
    ``"i4"``, ``"u4"``, ``"f16"``) is refused, naming both readings. Or the
    list form of docs/DATASET.md §2.1 (what :attr:`Dataset.schema` returns),
    whose dtype strings are the format's names (``"i8"`` is int8).
    """
    if schema is None:
        return ""
    if isinstance(schema, str):
        return schema
    numpy_strings = isinstance(schema, Mapping)
    if isinstance(schema, Mapping):
        items = list(schema.items())
    else:
        items = [(f.get("name"), f) for f in schema]
    out = []
    for name, spec in items:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"schema: field names must be str, not {type(name).__name__}")
        if isinstance(spec, str):
            if spec not in _KINDS or spec == "tensor":
                raise InvalidArgumentError(
                    f"schema: field {name!r}: kind {spec!r} is not one of bytes, str, int, float, json"
                    " (tensors are declared as (dtype, shape))")
            out.append({"name": name, "kind": spec})
            continue
        if isinstance(spec, tuple):
            spec = {"kind": "tensor", "dtype": spec[0], "shape": spec[1]}
        if not isinstance(spec, Mapping):
            raise InvalidArgumentError(f"schema: field {name!r}: unusable spec {spec!r}")
        kind = spec.get("kind", "tensor")
        entry: Dict[str, Any] = {"name": name, "kind": kind}
        if kind == "tensor":
            entry["dtype"] = _dtype_name(spec.get("dtype"), name, numpy_strings)
            entry["shape"] = [None if d is None or d == -1 else int(d) for d in spec.get("shape", ())]
        out.append(entry)
    return json.dumps(out)


def _dtype_name(dtype: Any, field: str, numpy_strings: bool = True) -> str:
    if isinstance(dtype, str):
        if not numpy_strings and dtype in _dtypes.CODES:
            return dtype
        return _dtypes.name_of_string(dtype, f"schema: field {field!r}")
    if _torch is not None and isinstance(dtype, _torch.dtype):
        return _dtypes.torch_tables()[1][dtype]
    try:
        return _dtypes.FROM_NUMPY[np.dtype(dtype)]
    except (TypeError, KeyError):
        raise InvalidArgumentError(f"schema: field {field!r}: unknown dtype {dtype!r}") from None


def _parse_schema(text: str) -> List[Dict[str, Any]]:
    return json.loads(text) if text else []


# ---------------------------------------------------------------------------
# Writer


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)


class _Converter:
    """Turns one sample dict into the native writer's (name, kind, value)
    triples. Kinds are inferred per value, or taken from the schema once it is
    known, so that e.g. a field declared "json" accepts a str."""

    def __init__(self) -> None:
        self.kinds: Dict[str, str] = {}
        self.keep: List[Any] = []  # tensors whose address is passed

    def field(self, name: str, value: Any) -> Tuple[str, str, Any]:
        kind = self.kinds.get(name)
        if kind is None:
            kind = self.infer(value)
        if kind == "tensor":
            if _torch is not None and isinstance(value, _torch.Tensor):
                t = value.detach()
                if t.device.type != "cpu":
                    t = t.cpu()
                if not t.is_contiguous():
                    t = t.contiguous()
                self.keep.append(t)  # the native side reads its address during add()
                return (name, kind, _arrays.torch_entry(name, t))
            return (name, kind, _arrays.numpy_entry(name, value))
        if kind == "bytes":
            if isinstance(value, str):
                raise InvalidArgumentError(f"field {name!r}: expected bytes, got str")
            return (name, kind, value if isinstance(value, (bytes, bytearray)) else memoryview(value).cast("B"))
        if kind == "str":
            if not isinstance(value, str):
                raise InvalidArgumentError(f"field {name!r}: expected str, got {type(value).__name__}")
            return (name, kind, value)
        if kind == "int":
            if isinstance(value, float) or not isinstance(value, (int, np.integer)):
                raise InvalidArgumentError(f"field {name!r}: expected int, got {type(value).__name__}")
            v = int(value)
            if not _I64_MIN <= v <= _I64_MAX:
                raise InvalidArgumentError(f"field {name!r}: int {v} does not fit in int64 (use kind json)")
            return (name, kind, v)
        if kind == "float":
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise InvalidArgumentError(f"field {name!r}: expected float, got {type(value).__name__}")
            return (name, kind, float(value))
        if kind == "json":
            try:
                return (name, kind, _to_json(value))
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(f"field {name!r}: not JSON-serialisable: {e}") from None
        raise InvalidArgumentError(f"field {name!r}: unknown kind {kind!r}")

    @staticmethod
    def infer(value: Any) -> str:
        if isinstance(value, (np.ndarray, np.generic)):
            return "tensor"
        if _torch is not None and isinstance(value, _torch.Tensor):
            return "tensor"
        if isinstance(value, (bytes, bytearray, memoryview)):
            return "bytes"
        if isinstance(value, str):
            return "str"
        if isinstance(value, bool) or value is None:
            return "json"  # a bool stored as int would come back as 0/1
        if isinstance(value, int):
            return "int" if _I64_MIN <= value <= _I64_MAX else "json"
        if isinstance(value, float):
            return "float"
        if isinstance(value, (dict, list, tuple)):
            return "json"
        raise InvalidArgumentError(
            f"cannot store a {type(value).__name__}: use a numpy array, torch tensor, bytes, str, int, "
            "float, or a JSON value (dict/list)")


class _Progress:
    """progress=True: a tqdm bar when tqdm is installed, else a counter on
    stderr; or any object with update(n) (and optionally close())."""

    def __init__(self, progress: Any, total: Optional[int]) -> None:
        self.bar = None
        self.count = 0
        self.plain = False
        if progress is True:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, unit="sample", desc="writing")
            except ImportError:
                self.plain = True
        elif progress:
            self.bar = progress

    def update(self, n: int = 1) -> None:
        self.count += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.plain and self.count % 10000 == 0:
            print(f"\rwriting: {self.count} samples", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None and hasattr(self.bar, "close"):
            self.bar.close()
        elif self.plain:
            print(f"\rwriting: {self.count} samples", file=sys.stderr, flush=True)


class Writer:
    """Writes a sharded dataset into the directory ``out``.

    A context manager: leaving the block normally finishes the dataset
    (closes the last shard, writes ``index.json``); an exception abandons it
    (removes the shards written). Nothing is visible as a dataset until
    ``index.json`` exists.

    Args:
        out: the dataset directory (created if missing; must not hold an
            index.json yet), or an ``s3://bucket/prefix``: each shard is
            built in a staging directory under ``$TMPDIR``, uploaded and
            removed; ``index.json`` is uploaded last (docs/REMOTE.md).
        schema: the fields, declared up front (see :func:`_schema_json`);
            None: the first sample fixes them (tensor shapes exactly as in
            that sample: declare ``None`` dims for shapes that vary).
        shard_bytes: a shard closes when its payload reaches this many bytes
            (0 = no limit). Default 64 MiB.
        shard_samples: a shard closes at this many samples (0 = no limit).
        compression: None or ``"zstd"`` (each shard compressed; readers
            decompress it once into the dataset directory or ``cache_dir``).
        compression_level: zstd level 1..22.
        progress: True for a progress bar (tqdm if installed, else stderr);
            or a tqdm-like object with ``update(n)``.
        total: the expected sample count, for the progress bar.
        metadata: a JSON-serialisable dict stored in index.json.
        shard_prefix: shard file names are ``<prefix>-00000.tsafe``; writers
            sharing a directory need distinct prefixes.
        sync: fsync shards and index (off for scratch data).

    Raises:
        FailedPreconditionError: ``out`` already holds a dataset.
        InvalidArgumentError: a bad option or schema; in :meth:`add`, a sample
            that does not fit the schema (the sample is skipped, the writer
            stays usable).

    Example:
        >>> with Writer("ds", shard_samples=1000, compression="zstd") as w:
        ...     w.add({"image": np.zeros((32, 32, 3), np.uint8), "label": 7})
    """

    def __init__(self, out: PathLike, schema: Any = None, shard_bytes: int = 64 << 20, shard_samples: int = 0,
                 compression: Optional[str] = None, compression_level: int = 3, progress: Any = False,
                 total: Optional[int] = None, metadata: Optional[Dict[str, Any]] = None,
                 shard_prefix: str = "shard", first_shard: int = 0, sync: bool = True) -> None:
        if compression not in (None, "zstd"):
            raise InvalidArgumentError(f"compression must be None or 'zstd', not {compression!r}")
        level = 0
        if compression == "zstd":
            if not 1 <= int(compression_level) <= 22:
                raise InvalidArgumentError(f"compression_level must be in 1..22, not {compression_level}")
            level = int(compression_level)
        self.path = os.fspath(out)
        self._w = _native.DatasetWriter(self.path, _schema_json(schema), int(shard_bytes), int(shard_samples),
                                        shard_prefix, int(first_shard), level,
                                        "" if metadata is None else _arrays.meta_json(metadata), bool(sync))
        self._conv = _Converter()
        self._conv.kinds = {f["name"]: f["kind"] for f in _parse_schema(self._w.schema_json)}
        self._progress = _Progress(progress, total) if progress else None
        self._done = False
        self.result: Optional[Dict[str, Any]] = None

    def add(self, sample: Mapping[str, Any]) -> None:
        """Adds one sample: a dict of field name -> value (every schema field,
        no other). Raises InvalidArgumentError (naming the field) when it does
        not fit; the writer stays usable."""
        if type(sample) is not dict and not isinstance(sample, Mapping):
            raise InvalidArgumentError(f"a sample must be a dict, not {type(sample).__name__}")
        conv = self._conv
        try:
            if type(sample) is dict:
                self._w.add_dict(sample, conv.field)  # bytes/str/int/float converted natively
            else:
                self._w.add([conv.field(k, v) for k, v in sample.items()])
        finally:
            conv.keep.clear()
        if not conv.kinds:
            conv.kinds = {f["name"]: f["kind"] for f in _parse_schema(self._w.schema_json)}
        if self._progress is not None:
            self._progress.update(1)

    def add_many(self, samples: Any) -> None:
        """Adds every sample of an iterable."""
        for s in samples:
            self.add(s)

    def finish(self) -> Dict[str, Any]:
        """Closes the last shard and writes index.json. Returns
        ``{"samples", "shards", "schema"}``."""
        if self._done:
            raise Error("dataset writer: already finished")
        self._done = True
        try:
            self.result = self._w.finish()
        finally:
            if self._progress is not None:
                self._progress.close()
        return self.result

    def abandon(self) -> None:
        """Removes every shard written; no dataset is left behind."""
        if not self._done:
            self._done = True
            self._w.abandon()
            if self._progress is not None:
                self._progress.close()

    @property
    def samples_written(self) -> int:
        return self._w.samples_written

    @property
    def shards_written(self) -> int:
        return self._w.shards_written

    @property
    def schema(self) -> List[Dict[str, Any]]:
        """The schema (empty until the first sample fixes it)."""
        return _parse_schema(self._w.schema_json)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._done:
                self.finish()
        else:
            self.abandon()


# ---------------------------------------------------------------------------
# Reading


class SampleArray(np.ndarray):
    """The type of the tensor fields a dataset yields: an ordinary ndarray,
    read-only and zero-copy over the mapped shard (``base`` keeps it mapped).

    Its own type lets torch's ``default_collate`` stack a batch of them
    without ``torch.as_tensor`` on each read-only view (which would warn that
    PyTorch does not support non-writable tensors): the batch is stacked
    with NumPy into a new tensor (in a DataLoader worker, straight into
    shared memory, as torch does), one copy as before, and dtypes
    ``torch.as_tensor`` refuses (ml_dtypes bf16, float8) stack too.
    Operations on it give ordinary results (``np.asarray(x)`` is a plain
    ndarray view).
    """

    __slots__ = ()


_native._set_sample_array_type(SampleArray)


def _collate_sample_arrays(batch: Sequence[np.ndarray], *, collate_fn_map: Any = None) -> Any:
    elem = batch[0]
    shape = (len(batch),) + tuple(elem.shape)
    name = _dtypes.FROM_NUMPY.get(elem.dtype)
    tdt = None if name is None else _dtypes.torch_tables()[0].get(name)
    if tdt is None or tdt.itemsize != elem.dtype.itemsize:
        return _torch.as_tensor(np.stack(batch))  # a writable copy
    numel = int(np.prod(shape, dtype=np.int64))
    proto = _torch.empty(0, dtype=tdt)
    if _torch.utils.data.get_worker_info() is not None:
        # As torch's collate_tensor_fn: a worker writes the batch into shared
        # memory, so sending it to the main process copies nothing more.
        out = proto.new(proto._typed_storage()._new_shared(numel, device=proto.device)).resize_(shape)
    else:
        out = _torch.empty(shape, dtype=tdt)
    if numel:
        dst = out.view(_torch.uint8).numpy().view(elem.dtype).reshape(shape)
        np.stack(batch, out=dst)
    return out


if _torch is not None:
    from torch.utils.data._utils.collate import default_collate_fn_map as _collate_map

    # torch's documented extension point for default_collate.
    _collate_map[SampleArray] = _collate_sample_arrays


class _Opened:
    """Opens the native dataset lazily, once per process: DataLoader workers
    (fork or spawn) get the path and options, never an open mapping."""

    def __init__(self, path: PathLike, cache_dir: Optional[PathLike], max_open_shards: int,
                 verify_on_open: bool, cache_limit: int = 0) -> None:
        self.path = os.fspath(path)
        self.cache_dir = "" if cache_dir is None else os.fspath(cache_dir)
        self.max_open_shards = int(max_open_shards)
        self.verify_on_open = bool(verify_on_open)
        self.cache_limit = int(cache_limit)
        if self.cache_limit < 0:
            raise InvalidArgumentError(f"cache_limit must be >= 0 bytes (0: no limit), not {cache_limit}")
        self._native = None
        self._pid = None

    @property
    def native(self):
        if self._native is None or self._pid != os.getpid():
            self._native = _native.Dataset(self.path, self.cache_dir, self.max_open_shards, self.verify_on_open,
                                           self.cache_limit)
            self._pid = os.getpid()
        return self._native

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_native"] = None
        d["_pid"] = None
        return d


class Dataset(_TorchDataset):
    """A dataset opened for random access (map-style; works as a
    ``torch.utils.data.Dataset`` with any sampler).

    Args:
        path: any dataset location (docs/DATASET.md §6.1): a native or MDS
            directory (holding index.json), an http(s) base URL of a native
            dataset, a WebDataset .tar, brace pattern or directory of .tar.
        cache_dir: where compressed shards (native zstd; MDS br, bz2, gz,
            snappy, zstd) are decompressed (default: the dataset
            directory) and remote shards downloaded (default:
            ``$TENSORSAFE_CACHE_DIR`` or ``~/.cache/tensorsafe/shards``).
        max_open_shards: shards kept mapped at once.
        verify_on_open: hash each shard against the index when first opened.
        cache_limit: remote datasets: the bytes of downloaded shards the
            cache directory may hold (0: no limit); least recently used
            shards are evicted, never one a process on the host has open
            (docs/REMOTE.md, "Eviction"). The processes sharing a cache
            directory should give the same limit.

    ``ds[i]`` (negative i counts from the end) returns the sample as a dict;
    tensor fields are read-only numpy views of the mapped shard (copy them
    with ``np.array`` to write). Iterating yields every sample in order, fast.

    Raises:
        FileNotFoundError: no index.json in ``path``.
        CorruptionError: a damaged index or shard (the message names it).
    """

    def __init__(self, path: PathLike, cache_dir: Optional[PathLike] = None, max_open_shards: int = 64,
                 verify_on_open: bool = False, cache_limit: int = 0) -> None:
        self._ds = _Opened(path, cache_dir, max_open_shards, verify_on_open, cache_limit)
        nat = self._ds.native
        self._len = len(nat)
        self.schema: List[Dict[str, Any]] = _parse_schema(nat.schema_json)
        self.metadata: Optional[Dict[str, Any]] = json.loads(nat.metadata_json) if nat.metadata_json else None

    @property
    def path(self) -> str:
        return self._ds.path

    @property
    def shards(self) -> List[Dict[str, Any]]:
        """The shards as listed in index.json (name, samples, bytes, xxh3, zstd)."""
        return self._ds.native.shards

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Dict[str, Any]:
        i = int(index) if isinstance(index, (int, np.integer)) else None
        if i is None:
            raise TypeError(f"dataset indices must be integers, not {type(index).__name__}")
        n = self._len
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise OutOfRangeError(f"{self.path}: sample {index} is outside [{-n}, {n})")
        return self._ds.native.read(i)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self._ds.native.iter_range(0, self._len)

    def iter(self, ids: Any = None) -> Iterator[Dict[str, Any]]:
        """Iterates over the samples with the given global ids (any order,
        repeats allowed), or all of them in order."""
        if ids is None:
            return self._ds.native.iter_range(0, self._len)
        return self._ds.native.iter_ids(np.asarray(ids, dtype=np.int64))

    def __repr__(self) -> str:
        fields = [f["name"] for f in self.schema]
        return f"tensorsafe.dataset.Dataset({self.path!r}, samples={self._len}, fields={fields})"


# ---------------------------------------------------------------------------
# merge, verify


def merge(out: PathLike, parts: Sequence[PathLike], metadata: Optional[Dict[str, Any]] = None,
          overwrite: bool = False, sync: bool = True) -> Dict[str, Any]:
    """Joins the datasets in ``parts`` (directories inside ``out``) into one
    dataset rooted at ``out``, in the order given, without copying shards.
    Returns ``{"samples", "shards"}``.

    Raises:
        FailedPreconditionError: the parts' schemas differ (the message names
            both and the first difference), or ``out`` already holds an index
            and not ``overwrite``.
        InvalidArgumentError: a part outside ``out``, listed twice, or none.
    """
    return _native.dataset_merge(os.fspath(out), [os.fspath(p) for p in parts],
                                 "" if metadata is None else _arrays.meta_json(metadata), bool(overwrite), bool(sync))


def verify(path: PathLike, all_problems: bool = False, cache_dir: Optional[PathLike] = None,
           cache_limit: int = 0) -> List[Error]:
    """Checks every shard of the dataset: stored sizes and XXH3 hashes,
    layout, sample counts and schema against the index, data checksums.

    Returns [] when sound. Raises the first problem (a CorruptionError naming
    the shard and the numbers, ...) unless ``all_problems``, which returns
    them all instead.
    """
    # One shard open at a time: verification walks them in turn, and a
    # remote shard stays pinned in the cache while open.
    nat = _native.Dataset(os.fspath(path), "" if cache_dir is None else os.fspath(cache_dir), 1, False,
                          int(cache_limit))
    problems = nat.verify()
    if problems and not all_problems:
        raise problems[0]
    return problems
