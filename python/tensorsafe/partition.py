"""Partitioning, shuffling and resumption of sharded datasets (docs/PARTITION.md).

Pure arithmetic on sample counts, in C++: these functions only convert
arguments and return numpy int64 arrays.

Example:
    >>> from tensorsafe import partition
    >>> partition.elastic("orig", 10, 2, 1, 1, 1, 4).reshape(-1, 4).tolist()
    [[0, 5, 1, 6], [2, 7, 3, 8], [4, 9, -1, -1]]
    >>> partition.seed([8], 1, 1, 3, 0, 0, 0, batch_size=2)["max_id"]
    3
"""
from typing import Any, Dict, Optional, Sequence

import numpy as np

from . import _native

SamplerState = _native.SamplerState
default_shuffle_block_size = _native.default_shuffle_block_size

__all__ = ["seed", "elastic", "epoch_shuffle", "worker_ids", "normalize_state", "SamplerState",
           "default_shuffle_block_size"]


def seed(samples_per_shard: Sequence[int], num_nodes: int, ranks_per_node: int, workers_per_rank: int,
         node: int, rank_of_node: int, worker_of_rank: int, batch_size: Optional[int] = None) -> Dict[str, int]:
    """Composer's ``get_partition`` for one worker (PARTITION.md §2).

    Args:
        samples_per_shard: samples of each shard, in order (zeros allowed).
        num_nodes, ranks_per_node, workers_per_rank: the world.
        node, rank_of_node, worker_of_rank: this worker.
        batch_size: the per-device batch hint (None or 0: no hint).

    Returns:
        ``{"min_id", "max_id"}`` (inclusive), ``{"shard_begin", "shard_end"}`` and ``"download_end"``.

    Raises:
        InvalidArgumentError: a bad world or shard count, or an empty worker range.
    """
    return _native.partition_seed(list(samples_per_shard), num_nodes, ranks_per_node, workers_per_rank, node,
                                  rank_of_node, worker_of_rank, batch_size)


def elastic(algo: str, num_samples: int, num_canonical_nodes: int, num_nodes: int, ranks_per_node: int,
            workers_per_rank: int, batch_size: int, drop_first: int = 0,
            initial_nodes: Optional[int] = None) -> np.ndarray:
    """MosaicML's ``get_partitions`` ("orig" or "relaxed"), element for element (PARTITION.md §3).

    Returns:
        int64 array (nodes, ranks_per_node, workers_per_rank, batches, batch_size); -1 is padding.

    Raises:
        InvalidArgumentError: where MosaicML raises (divisibility, drop_first too large, ...).
    """
    return _native.partition_elastic(algo, num_samples, num_canonical_nodes, num_nodes, ranks_per_node,
                                     workers_per_rank, batch_size, drop_first, initial_nodes)


def epoch_shuffle(shard_sizes: Sequence[int], num_canonical_nodes: int, seed: int, epoch: int,
                  block_size: int) -> np.ndarray:
    """The epoch's block shuffle (PARTITION.md §4): ``out[canonical position] = sample id``.

    Raises:
        InvalidArgumentError: bad shard sizes, canonical nodes or block size.
    """
    return _native.epoch_shuffle(list(shard_sizes), num_canonical_nodes, seed, epoch, block_size)


def _as_state(state: Any) -> Any:
    if isinstance(state, _native.SamplerState):
        return state
    if isinstance(state, (str, bytes)):
        return _native.SamplerState.from_json(state if isinstance(state, str) else state.decode())
    return _native.SamplerState.from_dict(state)


def worker_ids(samples_per_shard: Sequence[int], state: Any, num_nodes: int, ranks_per_node: int,
               workers_per_rank: int, node: int, rank_of_node: int, worker_of_rank: int,
               keep_padding: bool = False) -> np.ndarray:
    """One worker's sample ids for the epoch and position in ``state`` (PARTITION.md §5): a
    :class:`SamplerState`, its dict (``state_dict()``) or its JSON text.

    Raises:
        InvalidArgumentError: a bad state (strict) or world; UnsupportedError for seed mode with shuffle or
        mid-epoch resumption.
    """
    return _native.epoch_worker_ids(list(samples_per_shard), _as_state(state), num_nodes, ranks_per_node,
                                    workers_per_rank, node, rank_of_node, worker_of_rank, keep_padding)


def normalize_state(state: Any) -> str:
    """Strictly decodes a sampler state (JSON text or dict) and re-encodes it as canonical JSON text
    (version 2, keys in order).

    Raises:
        InvalidArgumentError: naming the offending key.
    """
    return str(_as_state(state).to_json())
