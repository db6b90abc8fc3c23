"""safetensors.mlx on tensorsafe: save, save_file, load, load_file for MLX arrays."""

import mlx.core as mx
import numpy as np

from ._frameworks import make

_api = make("mlx", lambda a: np.asarray(a), lambda a: mx.array(a))
save, save_file, load, load_file = _api["save"], _api["save_file"], _api["load"], _api["load_file"]
__all__ = ["save", "save_file", "load", "load_file"]
