"""tensorsafe: safe, zero-copy tensor storage.

- The native format: :func:`open` (a :class:`Reader`), :class:`Writer`,
  :class:`Updater`, :func:`compact`, :func:`verify`.
- safetensors' API, on .safetensors and .tsafe files alike:
  :class:`safe_open`, and the modules ``tensorsafe.numpy`` and
  ``tensorsafe.torch`` (save, save_file, load, load_file, save_model,
  load_model; storage_ptr and storage_size).
- Every format through its codec: :func:`read`, :func:`write`,
  :func:`convert`, :func:`detect_format`, ``read_npy``/``write_npy``,
  ``read_npz``/``write_npz``, and likewise for gguf, tenbin, btf and zio;
  :func:`read_gguf` dequantises on request, and ``tensorsafe.gguf`` has
  gguf-py-exact ``quantize``/``dequantize``; :func:`cast` rounds dtypes as
  torch does.
- Errors: :class:`Error` and its subclasses (tensorsafe.errors).

Example:
    >>> import numpy as np, tensorsafe as ts
    >>> with ts.Writer("model.tsafe") as w:
    ...     w.add("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> ts.open("model.tsafe")["w"]
    array([[0., 1., 2.],
           [3., 4., 5.]], dtype=float32)
"""

from . import errors
from ._native import TensorBuffer
from .errors import (
    CorruptionError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IOError,
    LimitExceededError,
    NotFoundError,
    OutOfRangeError,
    UnsupportedError,
)
from . import _arrays  # noqa: F401  (registers the NumPy dtype table)
from .formats import (
    FORMATS,
    convert,
    detect_format,
    read,
    read_btf,
    read_npy,
    read_npz,
    read_tenbin,
    read_zio,
    write,
    write_btf,
    write_gguf,
    write_npy,
    write_npz,
    write_tenbin,
    write_zio,
)
from .gguf import read_gguf
from ._cast import cast
from . import gguf  # noqa: F401  (tensorsafe.gguf: quantize, dequantize, TYPES)
from .reader import Reader, open
from .safe_open import SafeSlice, safe_open
from .writer import Updater, Writer, compact, verify
from ._load import load  # docs/LOAD.md
from . import _fsspec  # noqa: F401,E402  (gs://, hf://, ... through fsspec: docs/REMOTE.md)

__version__ = "0.1.0"

__all__ = [
    "open", "Reader", "Writer", "Updater", "compact", "verify", "TensorBuffer",
    "safe_open", "SafeSlice", "load",
    "read", "write", "convert", "detect_format", "FORMATS", "cast", "gguf",
    "read_npy", "write_npy", "read_npz", "write_npz", "read_gguf", "write_gguf",
    "read_tenbin", "write_tenbin", "read_btf", "write_btf", "read_zio", "write_zio",
    "errors", "Error", "InvalidArgumentError", "NotFoundError", "CorruptionError", "UnsupportedError",
    "IOError", "OutOfRangeError", "LimitExceededError", "FailedPreconditionError", "InternalError",
]

# Sparse COO tensors for NumPy (issue 5).
from ._arrays import SparseCoo  # noqa: E402
__all__ += ["SparseCoo"]


def __getattr__(name):
    # The submodules that import torch / dask / ZeroMQ when present load on
    # first use, so that `import tensorsafe` stays light.
    if name in ("dataset", "dask", "dcp", "lmdb", "partition", "stream", "streaming"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tensorsafe' has no attribute {name!r}")
