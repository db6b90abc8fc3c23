"""safetensors.numpy's API on tensorsafe: save, save_file, load, load_file.

The file's format follows its extension: ``*.tsafe`` writes the native
format, ``*.safetensors`` (or a name of no known format) a safetensors file
byte-identical to what the safetensors package writes, ``*.npz``,
``*.gguf``... that format; a PyTorch pickle name (``*.pt``, ``*.bin``) is
refused. load_file also takes a sharded checkpoint (an index file or its
directory), and save_sharded writes one (docs/SHARDED.md).

Example:
    >>> from tensorsafe.numpy import save_file, load_file
    >>> save_file({"w": np.zeros((2, 3), np.float32)}, "model.safetensors")
    >>> load_file("model.safetensors")["w"].shape
    (2, 3)
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import numpy as np

from . import _arrays, _native, _sharded
from .safe_open import safe_open

PathLike = Union[str, "os.PathLike[str]"]


def _format(filename: str) -> str:
    return _sharded.format_for_save(filename)


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding ``tensor_dict``.

    Args:
        tensor_dict: name -> ndarray (big-endian arrays are stored little-endian).
        metadata: text-only metadata (str -> str) for the header.

    Returns:
        The file's bytes.

    Raises:
        InvalidArgumentError: (a ValueError) metadata values that are not str.
        UnsupportedError: a dtype safetensors cannot hold (complex128).
    """
    entries = _arrays.entries_from_dict(tensor_dict, framework="np")
    return _native.encode("safetensors", entries, _arrays.meta_json(metadata), False)


def save_file(tensor_dict: Dict[str, np.ndarray], filename: PathLike,
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes ``tensor_dict`` to ``filename`` (a temporary file renamed into
    place): safetensors bytes, or the native format for ``*.tsafe``.

    Raises:
        As :func:`save`, and IOError.
    """
    filename = os.fspath(filename)
    entries = _arrays.entries_from_dict(tensor_dict, framework="np")
    _native.write_file(filename, _format(filename), entries, _arrays.meta_json(metadata), True, False, 0)


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The tensors of safetensors (or .tsafe) bytes, as read-only arrays
    viewing one private copy of ``data``.

    Raises:
        CorruptionError: bytes that are not a valid file.
    """
    fmt = "tsafe" if bytes(data[:4]) == b"\x89TSF" else "safetensors"
    bufs, _ = _native.decode(bytes(data), fmt, "<bytes>")
    return {b.name: b.numpy(False) for b in bufs}


def load_file(filename: PathLike, *, backend: str = "mmap") -> Dict[str, np.ndarray]:
    """The tensors of a .safetensors or .tsafe file, in offset order.

    Args:
        backend: ``"mmap"`` (read-only zero-copy views) or ``"pread"``.

    Raises:
        FileNotFoundError / IOError, CorruptionError, UnsupportedError.
    """
    with safe_open(filename, framework="np", backend=backend) as f:
        return f.get_tensors()


def save_sharded(tensor_dict: Dict[str, np.ndarray], save_directory: PathLike, *,
                 max_shard_size: Union[int, str] = "5GB", filename_pattern: Optional[str] = None,
                 metadata: Optional[Dict[str, str]] = None, format: Optional[str] = None) -> Dict[str, Any]:
    """Saves arrays as a sharded checkpoint in huggingface_hub's layout
    (``model-00001-of-00002.safetensors`` + ``model.safetensors.index.json``,
    or one ``model.safetensors``), split as the hub splits: in order, a new
    shard when the next array would pass ``max_shard_size``. Each shard
    carries ``metadata``; the index records ``total_size``.

    Returns:
        {"files", "index", "total_size"} as tensorsafe.torch.save_sharded.
    """
    pattern, fmt = _sharded.pattern_and_format(filename_pattern, format)
    entries = _arrays.entries_from_dict(tensor_dict, framework="np")
    return _sharded.write(save_directory, entries, None, fmt=fmt, pattern=pattern, max_shard_size=max_shard_size,
                          shard_metadata=metadata, single_metadata=metadata, index_metadata=None)
