"""safetensors.flax on tensorsafe: save, save_file, load, load_file for JAX arrays."""

import jax.numpy as jnp  # noqa: F401  (ImportError without jax, as safetensors.flax)
import numpy as np

from ._frameworks import make

_api = make("flax", lambda a: np.asarray(a), lambda a: jnp.array(a))
save, save_file, load, load_file = _api["save"], _api["save_file"], _api["load"], _api["load_file"]
__all__ = ["save", "save_file", "load", "load_file"]
