"""StreamingDataset: a dataset partitioned over nodes x ranks x DataLoader
workers, shuffled per epoch, resumable mid-epoch (docs/python-dataset.md).

``tensorsafe.dataset`` re-exports everything public here. The sampler itself
(partition, shuffle, state, checks, defaults) is C++: include/tensorsafe/
dataset/sampler.h, bound as :class:`SamplerState`; this module finds the
world, keeps the epoch and position, and carries them to DataLoader workers.

Workers and the main process. DataLoader workers hold copies of the dataset
made when they start; with ``persistent_workers=True`` they live across
epochs, so a ``set_epoch`` or ``load_state_dict`` made later in the main
process would never reach them. The dataset therefore shares a small block
of anonymous shared memory (``multiprocessing.RawArray``, no name, no file)
with its workers: the main process writes its configuration and position
there on every change, and each worker reads it when an iteration starts.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.context
import os
import pickle
import time
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import FailedPreconditionError, InvalidArgumentError

try:  # torch is optional: the class derives from its IterableDataset when present
    import torch as _torch
    from torch.utils.data import IterableDataset as _TorchIterable
except ImportError:  # pragma: no cover - exercised without torch only
    _torch = None
    _TorchIterable = object

__all__ = ["StreamingDataset", "SamplerState", "world_from_env", "DEFAULT_SEED"]

PathLike = Union[str, "os.PathLike[str]"]
DEFAULT_SEED = 9176  # MosaicML's default, so seeds carry over
SamplerState = _native.SamplerState

# (nodes, ranks_per_node, workers_per_rank, node, rank_of_node, worker_of_rank)
World = Tuple[int, int, int, int, int, int]


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


def _worker_info() -> Any:
    return None if _torch is None else _torch.utils.data.get_worker_info()


class _Control:
    """The main process's configuration and position, shared with its
    DataLoader workers: 8 KiB of anonymous shared memory. Only the process
    that made it writes (a seqlock: an odd generation while writing); the
    others read. Int64 header: generation, blob length, and the generation
    (+1) that DataLoader workers last started iterating."""

    SIZE = 8192
    HEADER = 3 * 8

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._mem: Any = multiprocessing.RawArray(ctypes.c_char, self.SIZE)
        self._view()

    def _view(self) -> None:
        self._hdr = (ctypes.c_int64 * 3).from_buffer(self._mem)

    def __getstate__(self) -> Dict[str, Any]:
        return {"pid": self.pid, "_mem": self._mem}

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._view()

    @property
    def owner(self) -> bool:
        return os.getpid() == self.pid

    def publish(self, blob: bytes) -> int:
        if len(blob) > self.SIZE - self.HEADER:
            raise InvalidArgumentError(f"dataset configuration of {len(blob)} bytes does not fit the shared block")
        gen = self._hdr[0] + 1
        self._hdr[0] = gen  # odd: being written
        ctypes.memmove(ctypes.addressof(self._mem) + self.HEADER, blob, len(blob))
        self._hdr[1] = len(blob)
        self._hdr[0] = gen + 1
        return gen + 1

    def read(self) -> Tuple[int, bytes]:
        while True:
            gen = self._hdr[0]
            if gen & 1:
                time.sleep(0)
                continue
            blob = bytes(self._mem[self.HEADER:self.HEADER + self._hdr[1]])
            if self._hdr[0] == gen:
                return gen, blob

    @property
    def generation(self) -> int:
        return self._hdr[0]

    def mark_worker_iteration(self, gen: int) -> None:
        self._hdr[2] = gen + 1

    def workers_iterated(self, gen: int) -> bool:
        return self._hdr[2] == gen + 1


# What the main process shares with its workers (and a worker adopts).
_CONFIG = ("mode", "partition_algo", "epoch", "sample_in_epoch", "seed", "num_canonical_nodes", "shuffle",
           "shuffle_block_size", "initial_nodes", "batch_size")


class StreamingDataset(_TorchIterable):
    """Iterates over a dataset, partitioned over nodes x ranks x DataLoader
    workers, optionally shuffled (differently every epoch, same for the same
    seed), resumable mid-epoch.

    Args:
        path: the dataset directory (or any location :class:`Dataset` takes).
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
            ranges, no shuffle, no mid-epoch resumption of the whole).
        num_canonical_nodes: elastic mode: the number of canonical nodes
            (default: the number of physical nodes of this run). Keep it fixed
            across runs that must see the same order.
        shuffle_block_size: samples per shuffle block (default, in C++:
            ``max(4_000_000 // num_canonical_nodes, 1 << 18)`` as MosaicML).
        partition_algo: ``"orig"`` or ``"relaxed"`` (elastic mode).
        cache_dir, max_open_shards, verify_on_open, cache_limit: as :class:`Dataset`.

    The rank and world size come from ``torch.distributed`` when it is
    initialised, else from RANK / WORLD_SIZE / LOCAL_WORLD_SIZE (this class
    never initialises a process group itself), the worker from
    ``torch.utils.data.get_worker_info()``. No files, no barriers: each
    worker computes its own ids.

    Epochs: call :meth:`set_epoch` before each epoch (as with
    DistributedSampler); the order depends on (seed, epoch) only. It reaches
    DataLoader workers also when they persist across epochs.

    Resumption (Stateful: ``state_dict()`` / ``load_state_dict()``): see
    :meth:`state_dict` for where the consumed count comes from.
    """

    def __init__(self, path: PathLike, shuffle: bool = False, seed: int = DEFAULT_SEED,
                 batch_size: Optional[int] = None, mode: str = "elastic",
                 num_canonical_nodes: Optional[int] = None, shuffle_block_size: Optional[int] = None,
                 partition_algo: str = "orig", cache_dir: Optional[PathLike] = None, max_open_shards: int = 64,
                 verify_on_open: bool = False, cache_limit: int = 0) -> None:
        from .dataset import _Opened

        if batch_size is not None and int(batch_size) < 1:
            raise InvalidArgumentError(f"batch_size must be >= 1, not {batch_size}")
        self.mode = mode
        self.partition_algo = partition_algo
        self.epoch = 0
        self.sample_in_epoch = 0  # the global resume point of `epoch`
        self.seed = int(seed)
        self.num_canonical_nodes = None if num_canonical_nodes is None else int(num_canonical_nodes)
        self.shuffle = bool(shuffle)
        self.shuffle_block_size = None if shuffle_block_size is None else int(shuffle_block_size)
        self.initial_nodes: Optional[int] = None
        self.batch_size = None if batch_size is None else int(batch_size)
        # The C++ checks, once, on a state of this configuration.
        self._state((1, 1, 1, 0, 0, 0), self.epoch, self.sample_in_epoch).check()
        self._ds = _Opened(path, cache_dir, max_open_shards, verify_on_open, cache_limit)
        self._len = len(self._ds.native)
        self._worker_pos: Optional[Tuple[World, int]] = None  # loaded into a DataLoader worker
        self._it: Any = None  # the current iteration: native iterator, its start state and world
        self._it_state: Any = None
        self._it_world: Optional[World] = None
        self._ctl = _Control()
        self._ctl_gen = self._publish()

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

    # -- configuration shared with DataLoader workers -------------------------------

    def _config(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in _CONFIG}

    def _publish(self) -> int:
        """The main process's configuration, for its workers to read."""
        if self._ctl.owner:
            self._ctl_gen = self._ctl.publish(pickle.dumps(self._config()))
        return self._ctl_gen

    def _sync(self) -> None:
        """In a DataLoader worker: adopt what the main process published since
        this copy was made, keeping a worker position loaded here (torchdata's
        StatefulDataLoader loads one per worker) when the epoch and
        configuration are the same, as set_epoch keeps a resume point."""
        if self._ctl.owner:
            return
        gen, blob = self._ctl.read()
        if gen == self._ctl_gen:
            return
        self._ctl_gen = gen
        cfg = pickle.loads(blob)
        if self._worker_pos is not None and cfg["epoch"] == self.epoch:
            return  # the position loaded here, and its configuration, stand
        for k, v in cfg.items():
            setattr(self, k, v)
        self._worker_pos = None

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration runs. A resume point loaded by
        load_state_dict is kept when ``epoch`` is its epoch."""
        epoch = int(epoch)
        if epoch < 0:
            raise InvalidArgumentError(f"epoch must be >= 0, not {epoch}")
        if epoch != self.epoch:
            self.sample_in_epoch = 0
            self._worker_pos = None
        self.epoch = epoch
        self._it = None
        self._publish()

    # -- the world ------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        # DataLoader workers started with "spawn" see neither the parent's
        # process group nor, when it was set up by hand, RANK/WORLD_SIZE:
        # the world is recorded when the DataLoader pickles the dataset.
        d = dict(self.__dict__)
        d["_pickled_world"] = world_from_env()
        d["_it"] = d["_it_state"] = d["_it_world"] = None
        # The shared block goes only to processes being started (workers);
        # any other copy (pickle, deepcopy, a checkpoint) is a main of its own.
        if multiprocessing.context.get_spawning_popen() is None:
            d["_ctl"] = None
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        if self._ctl is None:
            self._ctl = _Control()
            self._ctl_gen = self._publish()

    def _world(self) -> World:
        pickled = self.__dict__.get("_pickled_world")
        dist_on = (_torch is not None and _torch.distributed.is_available()
                   and _torch.distributed.is_initialized())
        if pickled is not None and not dist_on:
            rank, size, local_rank, local_size = pickled
        else:
            rank, size, local_rank, local_size = world_from_env()
        workers, worker = 1, 0
        info = _worker_info()
        if info is not None:
            workers, worker = info.num_workers, info.id
        return (size // local_size, local_size, workers, rank // local_size, local_rank, worker)

    def _state(self, world: Sequence[int], epoch: int, sample_in_epoch: int,
               worker: Optional[Tuple[Sequence[int], int]] = None) -> Any:
        nodes, ranks_per_node = world[0], world[1]
        fields: Dict[str, Any] = dict(
            mode=self.mode, partition=self.partition_algo, epoch=epoch, sample_in_epoch=sample_in_epoch,
            seed=self.seed, num_canonical_nodes=self.num_canonical_nodes or nodes,
            global_batch_size=(self.batch_size or 1) * nodes * ranks_per_node, shuffle=self.shuffle,
            shuffle_block_size=self.shuffle_block_size, initial_nodes=self.initial_nodes)
        if self.partition_algo == "relaxed" and self.initial_nodes is None:
            fields["initial_nodes"] = nodes
        if worker is not None:
            (wn, wr, ww, n, r, k), samples = worker
            fields.update(worker_num_nodes=wn, worker_ranks_per_node=wr, worker_workers_per_rank=ww,
                          worker_node=n, worker_rank_of_node=r, worker_of_rank=k, worker_samples=samples)
        return SamplerState(**fields)

    def _start_state(self, world: Sequence[int]) -> Any:
        """The state the next iteration in `world` starts from."""
        return self._state(world, self.epoch, self.sample_in_epoch, self._worker_pos)

    def worker_ids(self, world: Optional[Sequence[int]] = None) -> np.ndarray:
        """The global sample ids this worker reads in the current epoch (from
        the resume point on), as int64. ``world`` = (nodes, ranks_per_node,
        workers_per_rank, node, rank_of_node, worker_of_rank) overrides the
        detected one (for inspection and tests)."""
        self._sync()
        w = tuple(world) if world is not None else self._world()
        return _native.epoch_worker_ids(self._ds.native.shard_samples, self._start_state(w), *w)

    def epoch_order(self, epoch: Optional[int] = None) -> np.ndarray:
        """The documented order of an epoch (default: the current one) for one
        rank read by one worker from the start: the global sample ids this
        rank yields, batch after batch, whatever ``num_workers`` (batches are
        dealt to workers round-robin). PARTITION.md §5."""
        w = self._world()
        st = self._state(w, self.epoch if epoch is None else int(epoch), 0)
        return _native.epoch_worker_ids(self._ds.native.shard_samples, st, w[0], w[1], 1, w[3], w[4], 0)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._sync()
        w = self._world()
        st = self._start_state(w)
        it = self._ds.native.iter_epoch(st, list(w))
        self._it, self._it_state, self._it_world = it, st, w
        if not self._ctl.owner:
            self._ctl.mark_worker_iteration(self._ctl_gen)
        return it

    # -- resumption -------------------------------------------------------------

    def state_dict(self, num_samples_consumed: Optional[int] = None, *,
                   batches_consumed: Optional[int] = None) -> Dict[str, Any]:
        """The resumption state: a small dict of plain values
        (``SamplerState.to_dict()``, PARTITION.md §5.1); a
        ``torch.distributed.checkpoint`` ``Stateful``.

        Where the consumed count comes from:

        * Given: ``batches_consumed`` global batches (optimizer steps) since
          this epoch's iteration started (the state adds ``batches x
          batch_size x world size``), or ``num_samples_consumed`` global
          samples. Every rank computes the same state.
        * Not given, iterated in this process (``num_workers=0``, or
          torchdata's StatefulDataLoader, which calls this in the main
          process or in each worker): the samples this process's iterator
          has yielded, which at a batch boundary are exactly those the loop
          consumed. In the main process the state is global (any world and
          worker count may resume it); in a DataLoader worker it is that
          worker's position (the same world and workers must resume it, as
          StatefulDataLoader does).
        * Not given, read by plain DataLoader workers: they read ahead of the
          loop (prefetch), so the count is unknown here and this raises
          FailedPreconditionError rather than guess.

        A count reaching the end of the epoch gives the start of the next.
        """
        w = self._world()
        if num_samples_consumed is not None or batches_consumed is not None:
            if (num_samples_consumed is None) == (batches_consumed is None):
                raise InvalidArgumentError("state_dict: give at most one of num_samples_consumed and batches_consumed")
            n = (int(batches_consumed) * (self.batch_size or 1) * w[0] * w[1] if batches_consumed is not None
                 else int(num_samples_consumed))
            if n < 0:
                raise InvalidArgumentError(f"state_dict: negative consumed count {n}")
            return self._global_state(w, self.sample_in_epoch + n).to_dict()
        if _worker_info() is not None:
            return self._worker_state().to_dict()
        if self._it is None:
            if self._ctl.workers_iterated(self._ctl_gen):
                raise FailedPreconditionError(
                    "StreamingDataset.state_dict(): this epoch is read by DataLoader workers, which run ahead of the "
                    "training loop, so the dataset cannot tell how far the loop got. Give the count "
                    "(state_dict(batches_consumed=step)), or use torchdata's StatefulDataLoader and save its "
                    "state_dict() (docs/python-dataset.md, Resumption)")
            return self._start_state(w).to_dict()
        st, yielded, total = self._it_state, int(self._it.yielded), int(self._it.yielded + self._it.__length_hint__())
        if st.worker_samples is not None:
            return self._worker_state().to_dict()
        ranks = w[0] * w[1]
        if yielded >= total:
            return self._global_state(w, self._len).to_dict()
        bs = self.batch_size or 1
        if ranks > 1 and yielded % bs:
            raise InvalidArgumentError(
                f"state_dict(): {yielded} samples yielded, not a whole number of batches of {bs}: with {ranks} "
                "ranks a global position exists only between batches")
        return self._global_state(w, st.sample_in_epoch + yielded * ranks).to_dict()

    def _global_state(self, world: Sequence[int], sample: int) -> Any:
        epoch = self.epoch
        if sample >= self._len:
            sample, epoch = 0, epoch + 1
        return self._state(world, epoch, sample)

    def _worker_state(self) -> Any:
        """This worker's position: where its iteration started plus what it
        yielded (or, before iterating, what it would start from)."""
        if self._it is None:
            w = self._world()
            return self._start_state(w) if self._worker_pos else self._state(w, self.epoch, self.sample_in_epoch,
                                                                              (w, 0))
        st, w = self._it_state, self._it_world
        return self._state(w, st.epoch, st.sample_in_epoch, (w, (st.worker_samples or 0) + int(self._it.yielded)))

    def load_state_dict(self, state: Union[Mapping[str, Any], Any]) -> None:
        """Restores a state from :meth:`state_dict` (a dict, or a
        :class:`SamplerState`): the next iteration yields the rest of that
        epoch, also with another number of DataLoader workers or (elastic
        mode, same global batch size) ranks for a global state. Checked
        strictly, in C++ (InvalidArgumentError naming the key)."""
        st = state if isinstance(state, SamplerState) else SamplerState.from_dict(state)
        self.mode = st.mode
        self.partition_algo = st.partition
        self.epoch = int(st.epoch)
        self.sample_in_epoch = int(st.sample_in_epoch)
        self.seed = int(st.seed)
        self.num_canonical_nodes = int(st.num_canonical_nodes)
        self.shuffle = bool(st.shuffle)
        self.shuffle_block_size = st.shuffle_block_size
        self.initial_nodes = st.initial_nodes
        self._worker_pos = None if st.worker_samples is None else (tuple(st.worker_world), int(st.worker_samples))
        self._it = None
        self._publish()

    def __repr__(self) -> str:
        return (f"tensorsafe.dataset.StreamingDataset({self.path!r}, samples={self._len}, mode={self.mode!r}, "
                f"shuffle={self.shuffle}, epoch={self.epoch})")
