"""Shared pieces of tensorsafe.torch / tensorsafe.numpy: the format a
save_file name asks for, and sharded checkpoints (docs/SHARDED.md)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _native
from .formats import _BY_EXTENSION
from .errors import InvalidArgumentError, UnsupportedError

PathLike = Union[str, "os.PathLike[str]"]

# What a save_file name asks for: the format table's extensions
# (formats._BY_EXTENSION), and the pickle names it refuses.
_PICKLE_EXTENSIONS = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")


def format_for_save(filename: str) -> str:
    """The format save_file writes to `filename`: the one its extension names
    (.tsafe, .safetensors, .npz, .gguf, ...), safetensors for a name with no
    known extension (as safetensors' save_file); UnsupportedError for a
    PyTorch pickle name (.pt, .bin, ...), which tensorsafe never writes."""
    ext = os.path.splitext(filename)[1].lower()
    if ext in _PICKLE_EXTENSIONS:
        raise UnsupportedError(
            f"{filename}: a {ext} name is a PyTorch pickle checkpoint, which tensorsafe does not write; use "
            "torch.save for a pickle, or a .safetensors or .tsafe name")
    return _BY_EXTENSION.get(ext, "safetensors")


def size_to_int(size: Union[int, str]) -> int:
    """huggingface_hub's max_shard_size: an int of bytes, or "5GB", "200KB"..."""
    if isinstance(size, bool):
        raise InvalidArgumentError(f"max_shard_size must be an int or a size string, not {size!r}")
    if isinstance(size, int):
        if size < 0:
            raise InvalidArgumentError(f"max_shard_size must not be negative, not {size}")
        return size
    if isinstance(size, str):
        return _native.parse_size(size)
    raise InvalidArgumentError(f"max_shard_size must be an int or a size string, not {size!r}")


def pattern_and_format(filename_pattern: Optional[str], format: Optional[str]) -> Tuple[str, str]:
    if format is not None and format not in ("safetensors", "tsafe"):
        raise InvalidArgumentError(f"format must be 'safetensors' or 'tsafe', not {format!r}")
    if filename_pattern is None:
        fmt = format or "safetensors"
        return f"model{{suffix}}.{fmt}", fmt
    if format is None:
        format = "tsafe" if filename_pattern.lower().endswith(".tsafe") else "safetensors"
    return filename_pattern, format


def write(save_directory: PathLike, entries: List[tuple], storages: Optional[Sequence[tuple]], *,
          fmt: str, pattern: str, max_shard_size: Union[int, str], shard_metadata: Optional[Dict[str, Any]],
          single_metadata: Optional[Dict[str, Any]], index_metadata: Optional[Dict[str, Any]],
          always_index: bool = False) -> Dict[str, Any]:
    def dump(d):
        return "" if d is None else json.dumps(d, separators=(",", ":"), ensure_ascii=False)

    return _native.write_sharded(os.fspath(save_directory), entries, storages, fmt, pattern,
                                 size_to_int(max_shard_size), dump(shard_metadata), dump(single_metadata),
                                 dump(index_metadata), always_index, True, 0)
