"""safetensors.paddle on tensorsafe: save, save_file, load(data, device),
load_file(filename, device) for Paddle tensors."""

import os
from typing import Any, Dict, Optional, Union

import paddle

from . import numpy as _np_api
from ._core import safe_open

__all__ = ["save", "save_file", "load", "load_file"]


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> bytes:
    return _np_api.save({k: v.numpy() for k, v in tensors.items()}, metadata=metadata)


def save_file(tensors: Dict[str, Any], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    return _np_api.save_file({k: v.numpy() for k, v in tensors.items()}, filename, metadata=metadata)


def load(data: bytes, device: str = "cpu") -> Dict[str, Any]:
    return {k: paddle.to_tensor(v, place=device) for k, v in _np_api.load(data).items()}


def load_file(filename: Union[str, os.PathLike], device: str = "cpu") -> Dict[str, Any]:
    with safe_open(filename, framework="paddle", device=device) as f:
        return f.get_tensors()
