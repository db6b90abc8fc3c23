"""Sharded datasets for training (docs/python-dataset.md, docs/DATASET.md).

- :class:`Writer` writes samples (dicts of named fields) into a dataset
  directory: columnar ``.tsafe`` shards and ``index.json``.
- :class:`Dataset` is map-style (``len``, ``ds[i]``), compatible with
  ``torch.utils.data.Dataset``.
- :class:`StreamingDataset` is a ``torch.utils.data.IterableDataset`` that
  partitions samples over nodes x ranks x DataLoader workers, shuffles them
  per epoch with a seed, and resumes mid-epoch (``state_dict`` /
  ``load_state_dict``), also on another world size.
- :func:`merge` joins independently written parts without copying shards;
  :func:`verify` checks every byte.

Field values are converted as follows on write, and come back as:

============================  ==========  ===================================
written                       kind        read back as
============================  ==========  ===================================
numpy array / scalar, torch   ``tensor``  read-only numpy array (zero-copy;
tensor (any tensorsafe dtype,             ``arr.base`` keeps the shard
incl. ml_dtypes bf16/float8)              mapped)
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

try:  # torch is optional: the classes derive from its datasets when present
    import torch as _torch
    from torch.utils.data import Dataset as _TorchDataset
    from torch.utils.data import IterableDataset as _TorchIterable
except ImportError:  # pragma: no cover - exercised without torch only
    _torch = None
    _TorchDataset = object
    _TorchIterable = object

__all__ = ["Writer", "Dataset", "StreamingDataset", "merge", "verify", "world_from_env"]

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = ("tensor", "bytes", "str", "int", "float", "json")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
DEFAULT_SEED = 9176  # MosaicML streaming's default, so seeds carry over


# ---------------------------------------------------------------------------
# Schema


def _schema_json(schema: Any) -> str:
    """The native schema JSON for a declared schema.

    Accepts ``{name: spec}`` where spec is a kind name (``"bytes"``,
    ``"str"``, ``"int"``, ``"float"``, ``"json"``), a ``(dtype, shape)`` tuple
    for a tensor (dtype a tensorsafe name such as ``"f32"`` / ``"bf16"`` or
    anything ``numpy.dtype`` accepts; ``None`` in the shape = any size), or a
    dict ``{"kind": ..., "dtype": ..., "shape": ...}``; or the list form of
    docs/DATASET.md §2.1.
    """
    if schema is None:
        return ""
    if isinstance(schema, str):
        return schema
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
            entry["dtype"] = _dtype_name(spec.get("dtype"), name)
            entry["shape"] = [None if d is None or d == -1 else int(d) for d in spec.get("shape", ())]
        out.append(entry)
    return json.dumps(out)


def _dtype_name(dtype: Any, field: str) -> str:
    if isinstance(dtype, str) and dtype in _dtypes.CODES:
        return dtype
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
            index.json yet).
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


class _Opened:
    """Opens the native dataset lazily, once per process: DataLoader workers
    (fork or spawn) get the path and options, never an open mapping."""

    def __init__(self, path: PathLike, cache_dir: Optional[PathLike], max_open_shards: int,
                 verify_on_open: bool) -> None:
        self.path = os.fspath(path)
        self.cache_dir = "" if cache_dir is None else os.fspath(cache_dir)
        self.max_open_shards = int(max_open_shards)
        self.verify_on_open = bool(verify_on_open)
        self._native = None
        self._pid = None

    @property
    def native(self):
        if self._native is None or self._pid != os.getpid():
            self._native = _native.Dataset(self.path, self.cache_dir, self.max_open_shards, self.verify_on_open)
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

    ``ds[i]`` (negative i counts from the end) returns the sample as a dict;
    tensor fields are read-only numpy views of the mapped shard (copy them
    with ``np.array`` to write). Iterating yields every sample in order, fast.

    Raises:
        FileNotFoundError: no index.json in ``path``.
        CorruptionError: a damaged index or shard (the message names it).
    """

    def __init__(self, path: PathLike, cache_dir: Optional[PathLike] = None, max_open_shards: int = 64,
                 verify_on_open: bool = False) -> None:
        self._ds = _Opened(path, cache_dir, max_open_shards, verify_on_open)
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
        return f"tensorsafe.dataset.Dataset({self.path!r}, samples={self._len}, fields={[f['name'] for f in self.schema]})"


def world_from_env() -> Tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size): from torch.distributed
    when it is initialised (rank, size), else the RANK / WORLD_SIZE
    environment variables torchrun sets; LOCAL_WORLD_SIZE (default: all
    ranks on one node) gives the node layout. Never initialises anything."""
    rank, size = None, None
    if _torch is not None:
        dist = _torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank, size = dist.get_rank(), dist.get_world_size()
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
        size = int(os.environ.get("WORLD_SIZE", "1"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
    if size < 1 or not 0 <= rank < size or local_size < 1 or size % local_size:
        raise InvalidArgumentError(
            f"world: rank {rank}, world size {size}, local world size {local_size}: need 0 <= rank < size and "
            "size a multiple of the local size")
    local_rank = rank % local_size
    if "LOCAL_RANK" in os.environ and int(os.environ["LOCAL_RANK"]) != local_rank:
        raise InvalidArgumentError(
            f"world: LOCAL_RANK={os.environ['LOCAL_RANK']} but rank {rank} with {local_size} ranks per node "
            f"is local rank {local_rank} (ranks must be numbered node by node)")
    return rank, size, local_rank, local_size


class StreamingDataset(_TorchIterable):
    """Iterates over a dataset, partitioned over nodes x ranks x DataLoader
    workers, optionally shuffled (differently every epoch, same for the same
    seed), resumable mid-epoch.

    Args:
        path: the dataset directory.
        shuffle: shuffle (within blocks of shards, so reads stay mostly
            sequential).
        seed: the shuffle seed (MosaicML's default 9176).
        batch_size: the per-rank (per-device) batch size: pass the
            DataLoader's. Batches are dealt to DataLoader workers round-robin
            as the DataLoader collects them, so the sequence of global batches
            does not depend on ``num_workers`` nor, in elastic mode, on the
            world size (for a constant global batch size). None: 1.
        mode: ``"elastic"`` (MosaicML canonical nodes; resumable on another
            world size) or ``"seed"`` (Composer's get_partition: contiguous
            ranges, no shuffle, no mid-epoch resumption).
        num_canonical_nodes: elastic mode: the number of canonical nodes
            (default: the number of physical nodes of this run). Keep it fixed
            across runs that must see the same order.
        shuffle_block_size: samples per shuffle block (default
            ``max(4_000_000 // num_canonical_nodes, 1 << 18)`` as MosaicML).
        partition_algo: ``"orig"`` or ``"relaxed"`` (elastic mode).
        cache_dir, max_open_shards, verify_on_open: as :class:`Dataset`.

    The rank and world size come from ``torch.distributed`` when it is
    initialised, else from RANK / WORLD_SIZE / LOCAL_WORLD_SIZE (this class
    never initialises a process group itself), the worker from
    ``torch.utils.data.get_worker_info()``. No shared memory, no files, no
    barriers: each worker computes its own ids.

    Epochs: call :meth:`set_epoch` before each epoch (as with
    DistributedSampler); the order depends on (seed, epoch) only.

    Resumption: ``state = ds.state_dict(batches_consumed=step)`` (or
    ``num_samples_consumed=`` the global sample count) saved with the
    checkpoint; after restart ``ds.load_state_dict(state)`` and the next
    iteration yields exactly the rest of that epoch.
    """

    def __init__(self, path: PathLike, shuffle: bool = False, seed: int = DEFAULT_SEED,
                 batch_size: Optional[int] = None, mode: str = "elastic",
                 num_canonical_nodes: Optional[int] = None, shuffle_block_size: Optional[int] = None,
                 partition_algo: str = "orig", cache_dir: Optional[PathLike] = None, max_open_shards: int = 64,
                 verify_on_open: bool = False) -> None:
        if mode not in ("elastic", "seed"):
            raise InvalidArgumentError(f"mode must be 'elastic' or 'seed', not {mode!r}")
        if partition_algo not in ("orig", "relaxed"):
            raise InvalidArgumentError(f"partition_algo must be 'orig' or 'relaxed', not {partition_algo!r}")
        if mode == "seed" and shuffle:
            raise InvalidArgumentError("mode 'seed' (Composer's get_partition) does not shuffle; use mode 'elastic'")
        if batch_size is not None and int(batch_size) < 1:
            raise InvalidArgumentError(f"batch_size must be >= 1, not {batch_size}")
        if not 0 <= int(seed) < (1 << 64):
            raise InvalidArgumentError(f"seed must be in [0, 2**64), not {seed}")
        self._ds = _Opened(path, cache_dir, max_open_shards, verify_on_open)
        self._len = len(self._ds.native)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.mode = mode
        self.num_canonical_nodes = None if num_canonical_nodes is None else int(num_canonical_nodes)
        self.shuffle_block_size = None if shuffle_block_size is None else int(shuffle_block_size)
        self.partition_algo = partition_algo
        self.epoch = 0
        self.sample_in_epoch = 0  # the resume point of `epoch`
        self.initial_nodes: Optional[int] = None

    @property
    def path(self) -> str:
        return self._ds.path

    @property
    def num_samples(self) -> int:
        """Samples in the whole dataset."""
        return self._len

    def __len__(self) -> int:
        """Samples this rank yields in the current epoch from the resume point
        (all its DataLoader workers together; padding repeats included), so
        ``len(DataLoader(...))`` counts this rank's batches."""
        w = self._world()
        rank_world = (w[0], w[1], 1, w[3], w[4], 0)
        return len(self.worker_ids(rank_world))

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration runs. A resume point loaded by
        load_state_dict is kept when ``epoch`` is its epoch."""
        epoch = int(epoch)
        if epoch < 0:
            raise InvalidArgumentError(f"epoch must be >= 0, not {epoch}")
        if epoch != self.epoch:
            self.sample_in_epoch = 0
        self.epoch = epoch

    # -- the world ------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        # DataLoader workers started with "spawn" see neither the parent's
        # process group nor, when it was set up by hand, RANK/WORLD_SIZE:
        # the world is recorded when the DataLoader pickles the dataset.
        d = dict(self.__dict__)
        d["_pickled_world"] = world_from_env()
        return d

    def _world(self) -> Tuple[int, ...]:
        pickled = self.__dict__.get("_pickled_world")
        dist_on = (_torch is not None and _torch.distributed.is_available()
                   and _torch.distributed.is_initialized())
        if pickled is not None and not dist_on:
            rank, size, local_rank, local_size = pickled
        else:
            rank, size, local_rank, local_size = world_from_env()
        workers, worker = 1, 0
        if _torch is not None:
            info = _torch.utils.data.get_worker_info()
            if info is not None:
                workers, worker = info.num_workers, info.id
        return (size // local_size, local_size, workers, rank // local_size, local_rank, worker)

    def _state(self, world: Tuple[int, ...], sample_in_epoch: int, epoch: int) -> Dict[str, Any]:
        nodes, ranks_per_node = world[0], world[1]
        ncn = self.num_canonical_nodes if self.num_canonical_nodes is not None else nodes
        block = self.shuffle_block_size
        if block is None:
            block = max(4_000_000 // ncn, 1 << 18)
        bs = self.batch_size or 1
        return {
            "version": 1,
            "mode": self.mode,
            "partition": self.partition_algo,
            "epoch": epoch,
            "sample_in_epoch": sample_in_epoch,
            "seed": self.seed,
            "num_canonical_nodes": ncn,
            "global_batch_size": bs * nodes * ranks_per_node,
            "shuffle": self.shuffle,
            "shuffle_block_size": block,
            "initial_nodes": self.initial_nodes,
        }

    def worker_ids(self, world: Optional[Sequence[int]] = None) -> np.ndarray:
        """The global sample ids this worker reads in the current epoch (from
        the resume point on), as int64. ``world`` = (nodes, ranks_per_node,
        workers_per_rank, node, rank_of_node, worker_of_rank) overrides the
        detected one (for inspection and tests)."""
        w = tuple(world) if world is not None else self._world()
        state = self._state(w, self.sample_in_epoch, self.epoch)
        # dataset_partition.cc's binding of the same EpochWorkerIds that
        # iter_epoch runs natively.
        return _native.epoch_worker_ids(self._ds.native.shard_samples, json.dumps(state), *w)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        w = self._world()
        state = self._state(w, self.sample_in_epoch, self.epoch)
        return self._ds.native.iter_epoch(json.dumps(state), list(w))

    # -- resumption -------------------------------------------------------------

    def state_dict(self, num_samples_consumed: Optional[int] = None, *,
                   batches_consumed: Optional[int] = None) -> Dict[str, Any]:
        """The resumption state after consuming part of the current epoch.

        Give either ``batches_consumed``, the number of global batches
        (optimizer steps) taken since this epoch's iteration started (the
        state adds them as ``batches * batch_size * world size``), or
        ``num_samples_consumed``, the global number of samples (summed over
        all ranks). Both count from the point this iteration started (the
        resume point, if resumed). A count reaching the end of the epoch gives
        the start of the next one. The result is a small JSON-serialisable
        dict (docs/python-dataset.md); every rank computes the same one.
        """
        w = self._world()
        bs = self.batch_size or 1
        if (num_samples_consumed is None) == (batches_consumed is None):
            raise InvalidArgumentError("state_dict: give exactly one of num_samples_consumed and batches_consumed")
        n = (int(batches_consumed) * bs * w[0] * w[1] if batches_consumed is not None
             else int(num_samples_consumed))
        if n < 0:
            raise InvalidArgumentError(f"state_dict: negative consumed count {n}")
        sample, epoch = self.sample_in_epoch + n, self.epoch
        if sample >= self._len:
            sample, epoch = 0, epoch + 1
        state = self._state(w, sample, epoch)
        if self.partition_algo == "relaxed" and state["initial_nodes"] is None:
            state["initial_nodes"] = w[0]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a state from :meth:`state_dict`: the next iteration yields
        the rest of that epoch, also with another number of DataLoader workers
        or (elastic mode, same global batch size) ranks. Checks the state
        strictly (InvalidArgumentError naming the key)."""
        state = dict(state)
        _check_state(state)
        self.mode = state["mode"]
        self.partition_algo = state["partition"]
        self.epoch = int(state["epoch"])
        self.sample_in_epoch = int(state["sample_in_epoch"])
        self.seed = int(state["seed"])
        self.num_canonical_nodes = int(state["num_canonical_nodes"])
        self.shuffle = bool(state["shuffle"])
        self.shuffle_block_size = int(state["shuffle_block_size"])
        self.initial_nodes = None if state["initial_nodes"] is None else int(state["initial_nodes"])

    def __repr__(self) -> str:
        return (f"tensorsafe.dataset.StreamingDataset({self.path!r}, samples={self._len}, mode={self.mode!r}, "
                f"shuffle={self.shuffle}, epoch={self.epoch})")


_STATE_KEYS = ("version", "mode", "partition", "epoch", "sample_in_epoch", "seed", "num_canonical_nodes",
               "global_batch_size", "shuffle", "shuffle_block_size", "initial_nodes")


def _check_state(state: Dict[str, Any]) -> None:
    missing = [k for k in _STATE_KEYS if k not in state]
    unknown = [k for k in state if k not in _STATE_KEYS]
    if missing or unknown:
        raise InvalidArgumentError(f"sampler state: missing keys {missing}, unknown keys {unknown}")
    if state["version"] != 1:
        raise InvalidArgumentError(f"sampler state: key \"version\": {state['version']} is not supported (expected 1)")
    _native.sampler_state_normalize(json.dumps(state))  # the strict native decoder


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


def verify(path: PathLike, all_problems: bool = False, cache_dir: Optional[PathLike] = None) -> List[Error]:
    """Checks every shard of the dataset: stored sizes and XXH3 hashes,
    layout, sample counts and schema against the index, data checksums.

    Returns [] when sound. Raises the first problem (a CorruptionError naming
    the shard and the numbers, ...) unless ``all_problems``, which returns
    them all instead.
    """
    nat = _native.Dataset(os.fspath(path), "" if cache_dir is None else os.fspath(cache_dir), 64, False)
    problems = nat.verify()
    if problems and not all_problems:
        raise problems[0]
    return problems
