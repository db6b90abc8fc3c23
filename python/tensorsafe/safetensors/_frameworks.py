"""The framework modules safetensors has besides torch and numpy (flax,
tensorflow, mlx, paddle): each converts to and from NumPy around
safetensors.numpy, as safetensors' own do."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Union

from . import numpy as _np_api
from ._core import safe_open


def make(framework: str, to_numpy: Callable[[Any], Any], from_numpy: Callable[[Any], Any]) -> Dict[str, Any]:
    """save, save_file, load and load_file for `framework`."""

    def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
        return _np_api.save({k: to_numpy(v) for k, v in tensors.items()}, metadata=metadata)

    def save_file(tensors: Dict[str, Any], filename: Union[str, os.PathLike],
                  metadata: Optional[Dict[str, str]] = None) -> None:
        return _np_api.save_file({k: to_numpy(v) for k, v in tensors.items()}, filename, metadata=metadata)

    def load(data: bytes) -> Dict[str, Any]:
        return {k: from_numpy(v) for k, v in _np_api.load(data).items()}

    def load_file(filename: Union[str, os.PathLike]) -> Dict[str, Any]:
        with safe_open(filename, framework=framework) as f:
            return f.get_tensors()

    return {"save": save, "save_file": save_file, "load": load, "load_file": load_file}
