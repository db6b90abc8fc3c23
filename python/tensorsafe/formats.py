"""Every format through its C++ codec: read, write, convert, detect.

Formats: ``tsafe``, ``safetensors``, ``npy``, ``npz``, ``gguf``, ``tenbin``
(.ten), ``btf``, ``zio``, and ``pytorch`` (torch.save checkpoints, read
only, never unpickled by Python: docs/formats/pytorch.md). Reads are
zero-copy where the codec is (mapped files, stored .npz members, aligned
contiguous checkpoint storages); the arrays keep the mapping alive.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _arrays, _native
from .errors import InvalidArgumentError, UnsupportedError

PathLike = Union[str, "os.PathLike[str]"]

# The format table (include/tensorsafe/formats/registry.h), one dict a row:
# name, description, aliases, extensions, and what the format can hold.
FORMAT_TABLE: Tuple[Dict[str, Any], ...] = tuple(_native.formats())
FORMATS: Tuple[str, ...] = tuple(row["name"] for row in FORMAT_TABLE)
_BY_EXTENSION = {f".{ext}": row["name"] for row in FORMAT_TABLE for ext in row["extensions"]}


def format_for_path(path: PathLike) -> str:
    """The format a file name asks for, by its extension."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    try:
        return _BY_EXTENSION[ext]
    except KeyError:
        raise InvalidArgumentError(f"{os.fspath(path)}: cannot tell the format from the extension "
                                   f"{ext!r}; pass format= one of {', '.join(FORMATS)}") from None


def detect_format(path: PathLike) -> str:
    """The format of an existing file by its first bytes (and extension for
    .btf): one of FORMATS, or ``"unknown"``."""
    return _native.detect_format(os.fspath(path))


def read(path: PathLike, format: str = "auto", *, packed: bool = False) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Reads every tensor of a file of any supported format.

    Args:
        path: the file.
        format: one of FORMATS, or ``"auto"`` to detect it.
        packed: return packed sub-byte tensors as raw uint8 bytes instead of
            raising UnsupportedError.

    Returns:
        (tensors, metadata): name -> read-only ndarray in file order, and the
        file metadata as a dict ({} when none).

    Raises:
        FileNotFoundError / IOError, CorruptionError, UnsupportedError,
        LimitExceededError.

    Example:
        >>> tensors, meta = tensorsafe.read("model.gguf")
    """
    bufs, meta = _native.read_file(os.fspath(path), format, False)
    return {b.name: b.numpy(packed) for b in bufs}, (json.loads(meta) if meta else {})


# Consents that earlier releases of write() applied silently (BTF's
# positional names, file metadata into npy/npz/tenbin/btf): for one release,
# left unset they warn and go ahead; from the next, they refuse as convert()
# does.
_DEPRECATED_SILENT = ("drop_names", "drop_metadata")
_CONSENT_NAMED = re.compile(r"\(consent to [^:()]*: (\w+),")


def write(path: PathLike, tensors: Dict[str, Any], metadata: Optional[Dict[str, Any]] = None,
          format: Optional[str] = None, *, compress: bool = False, sync: bool = True,
          stringify_metadata: bool = False, drop_metadata: Optional[bool] = None,
          drop_tensor_metadata: bool = False, drop_names: Optional[bool] = None, densify: bool = False) -> None:
    """Writes ``tensors`` (name -> ndarray, torch tensor or SparseCoo) to
    ``path`` in ``format`` (by default, the one its extension names),
    through a temporary file renamed into place. What the format cannot hold
    is refused, naming the tensor, unless a consent flag allows losing it:
    the same checks as :func:`convert` (docs/CONVERT.md §3).

    Args:
        compress: deflate .npz members (np.savez_compressed).
        sync: fsync the file and its directory.
        stringify_metadata: safetensors: store non-string metadata values as
            their JSON text.
        drop_metadata: formats without file metadata (npy, npz, tenbin,
            btf): drop it.
        drop_tensor_metadata: formats without per-tensor metadata: drop it.
        drop_names: formats that cannot keep the names (btf; tenbin beyond
            8 ASCII bytes): write positional names.
        densify: sparse tensors into formats without them: write them dense.

    drop_names and drop_metadata left unset (None) keep this release's
    behaviour, which applied them silently, with a DeprecationWarning: pass
    True to consent, False to refuse now, as the next release will.

    Raises:
        UnsupportedError, InvalidArgumentError: what the format cannot hold,
            without consent; nothing is written then.
        IOError.
    """
    fmt = format or format_for_path(path)
    entries = [_writer_entry(k, v) for k, v in tensors.items()]
    consent = {"stringify_metadata": stringify_metadata, "drop_metadata": drop_metadata,
               "drop_tensor_metadata": drop_tensor_metadata, "drop_names": drop_names, "densify": densify}
    meta = _arrays.meta_json(metadata)
    while True:
        try:
            _native.write_file(os.fspath(path), fmt, entries, meta, sync, compress, 0, None,
                               **{k: bool(v) for k, v in consent.items()})
            return
        except (UnsupportedError, InvalidArgumentError) as e:
            # The checks run before anything is written: going on is safe.
            m = _CONSENT_NAMED.search(str(e))
            flag = m.group(1) if m else None
            if flag not in _DEPRECATED_SILENT or consent[flag] is not None:
                raise
            warnings.warn(f"{e}. tensorsafe.write() did this silently before and goes on for now; from the next "
                          f"release it raises: pass {flag}=True to consent, or {flag}=False to refuse",
                          DeprecationWarning, stacklevel=2)
            consent[flag] = True


def _writer_entry(name, value):
    if type(value).__module__.startswith("torch"):
        return _arrays.torch_entry(name, value)
    return _arrays.numpy_entry(name, value)


def convert(src: PathLike, dst: PathLike, *, src_format: str = "auto", dst_format: Optional[str] = None,
            tensors: Optional[List[str]] = None, stringify_metadata: bool = False, drop_metadata: bool = False,
            drop_tensor_metadata: bool = False, drop_names: bool = False, densify: bool = False, alignment: int = 0,
            compress: bool = False, verify: bool = True, sync: bool = True,
            progress: Optional[Callable[[Dict[str, Any]], None]] = None, dtype: Optional[str] = None,
            gguf_kv: Optional[List[str]] = None, max_shard_size: Union[int, str] = 0,
            discard_names: Optional[List[str]] = None) -> Dict[str, Any]:
    """Converts a file between formats: the C++ ``Convert()``
    (include/tensorsafe/convert.h), the same code and bytes as
    ``tensorsafe convert``, streaming each tensor from the mapped input
    with the GIL released. docs/CONVERT.md has what each target holds.

    Args:
        src: the input; its format is detected unless ``src_format`` is given.
        dst: the output (written to a temporary file renamed into place);
            its format comes from its extension unless ``dst_format`` is
            given (a name of FORMATS, or an alias: "st", "ten").
        tensors: convert only these, in this order (NotFoundError for a
            name the input lacks).
        stringify_metadata, drop_metadata, drop_tensor_metadata, drop_names,
        densify: consent to losing what the target cannot hold (else
            UnsupportedError / InvalidArgumentError naming the tensor), as
            for :func:`write`.
        alignment: tsafe data alignment, gguf general.alignment (0: default).
        compress: deflate .npz members.
        verify: check a .tsafe input's data checksums first.
        sync: fsync the output and its directory.
        progress: called with {"bytes_written", "bytes_total",
            "tensor_count", "done"} about every 4 MiB and at the end
            (on the calling thread or the writer's); an exception it raises
            is re-raised after the conversion.
        dtype: "f32", "f16" or "bf16": every floating tensor in that dtype,
            rounded as torch's ``Tensor.to()`` rounds; GGUF block-quantized
            tensors dequantised as gguf-py does (docs/CAST.md).
        gguf_kv: GGUF output: key/values to set, each "KEY=TYPE:VALUE"
            (e.g. "general.architecture=str:llama").
        max_shard_size: for a sharded output (``dst`` a directory, or a
            ``*.safetensors.index.json`` / ``*.tsafe.index.json``; ``src``
            may be one too): bytes per shard, an int or "5GB"-style string;
            0 keeps a sharded input's shards, else splits at 5 GB
            (docs/SHARDED.md). Given, a ``dst`` without a tensor file's
            extension is a directory to create, and one naming a single
            file is InvalidArgumentError.
        discard_names: PyTorch checkpoint to safetensors only: of tensors
            sharing a storage, names not to keep (safetensors' convert.py
            discard_names; ``["lm_head.weight"]`` keeps a tied model's input
            embedding, as transformers expects).

    Returns:
        {"from", "to", "tensor_count", "data_bytes", "file_size",
        "warnings"}; each warning (e.g. a GGUF output without
        general.architecture) is also issued with warnings.warn.

    Raises:
        UnsupportedError: a dtype or feature the target cannot hold (e.g.
            bf16 to tenbin); nothing is written then.
        InvalidArgumentError, NotFoundError, CorruptionError, IOError.

    Example:
        >>> tensorsafe.convert("model.safetensors", "model.tsafe")
        {'from': 'safetensors', 'to': 'tsafe', 'tensor_count': 2, ...}
    """
    from ._sharded import size_to_int

    stats = _native.convert(os.fspath(src), os.fspath(dst), dst_format or "auto", src_format,
                            list(tensors or []), stringify_metadata, drop_metadata, drop_tensor_metadata,
                            drop_names, densify, alignment, compress, verify, sync, progress, dtype or "",
                            list(gguf_kv or []), size_to_int(max_shard_size),
                            list(discard_names or []))
    for w in stats["warnings"]:
        warnings.warn(w, stacklevel=2)
    return stats


def read_npy(path: PathLike, *, packed: bool = False) -> np.ndarray:
    """The array of a .npy file (never unpickles: object arrays are refused)."""
    tensors, _ = read(path, "npy", packed=packed)
    return next(iter(tensors.values()))


def write_npy(path: PathLike, array: Any, *, sync: bool = True) -> None:
    """Writes one array as .npy, byte-identical to numpy.save for C-order
    little-endian arrays; others are written in C order, little-endian
    (np.load reads the same values)."""
    write(path, {"array": array}, None, "npy", sync=sync)


def read_npz(path: PathLike, *, packed: bool = False) -> Dict[str, np.ndarray]:
    """The arrays of an .npz archive (stored or deflated members)."""
    return read(path, "npz", packed=packed)[0]


def write_npz(path: PathLike, arrays: Dict[str, Any], *, compress: bool = False, sync: bool = True) -> None:
    """Writes arrays as .npz, byte-identical to numpy.savez (or, with
    compress, numpy.savez_compressed) for C-order little-endian arrays."""
    write(path, arrays, None, "npz", compress=compress, sync=sync)


def _reader(fmt: str):
    def read_fmt(path: PathLike, *, packed: bool = False) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        return read(path, fmt, packed=packed)
    read_fmt.__name__ = f"read_{fmt}"
    read_fmt.__doc__ = f"(tensors, metadata) of a {fmt} file; see tensorsafe.read."
    return read_fmt


def _writer(fmt: str):
    def write_fmt(path: PathLike, tensors: Dict[str, Any], metadata: Optional[Dict[str, Any]] = None, *,
                  sync: bool = True) -> None:
        write(path, tensors, metadata, fmt, sync=sync)
    write_fmt.__name__ = f"write_{fmt}"
    write_fmt.__doc__ = f"Writes tensors (and metadata) as {fmt}; see tensorsafe.write."
    return write_fmt


read_gguf, write_gguf = _reader("gguf"), _writer("gguf")
read_tenbin, write_tenbin = _reader("tenbin"), _writer("tenbin")
read_btf, write_btf = _reader("btf"), _writer("btf")
read_zio, write_zio = _reader("zio"), _writer("zio")
