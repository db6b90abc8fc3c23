from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union
import os

import numpy as np

from ._native import SamplerState as SamplerState

PathLike = Union[str, "os.PathLike[str]"]
Sample = Dict[str, Any]
DEFAULT_SEED: int

def world_from_env() -> Tuple[int, int, int, int]: ...

class StreamingDataset:
    shuffle: bool
    seed: int
    batch_size: Optional[int]
    mode: str
    num_canonical_nodes: Optional[int]
    shuffle_block_size: Optional[int]
    partition_algo: str
    epoch: int
    sample_in_epoch: int
    initial_nodes: Optional[int]
    def __init__(self, path: PathLike, shuffle: bool = ..., seed: int = ..., batch_size: Optional[int] = ...,
                 mode: str = ..., num_canonical_nodes: Optional[int] = ..., shuffle_block_size: Optional[int] = ...,
                 partition_algo: str = ..., cache_dir: Optional[PathLike] = ..., max_open_shards: int = ...,
                 verify_on_open: bool = ..., cache_limit: int = ...) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def num_samples(self) -> int: ...
    def __len__(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def worker_ids(self, world: Optional[Sequence[int]] = ...) -> np.ndarray: ...
    def epoch_order(self, epoch: Optional[int] = ...) -> np.ndarray: ...
    def __iter__(self) -> Iterator[Sample]: ...
    def state_dict(self, num_samples_consumed: Optional[int] = ..., *,
                   batches_consumed: Optional[int] = ...) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Union[Mapping[str, Any], SamplerState]) -> None: ...

