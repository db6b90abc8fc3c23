"""safetensors.tensorflow on tensorsafe: save, save_file, load, load_file for TF tensors."""

import tensorflow as tf

from ._frameworks import make

_api = make("tensorflow", lambda t: t.numpy(), lambda a: tf.convert_to_tensor(a))
save, save_file, load, load_file = _api["save"], _api["save_file"], _api["load"], _api["load_file"]
__all__ = ["save", "save_file", "load", "load_file"]
