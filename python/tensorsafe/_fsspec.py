"""URLs of other schemes through fsspec (docs/REMOTE.md, "fsspec URLs").

tensorsafe reads s3://, http:// and https:// itself. Any other
``scheme://`` path (gs://, hf://, az://, abfs://, memory://, ...) is sent by
the native file seam to the two functions below, which ask fsspec for the
object's size and for byte ranges. Every tensor-file API then takes such a
URL the way it takes an s3:// one: ``tensorsafe.open``, ``safe_open``,
``load``, ``read``, the ``load_file`` functions; a .tsafe index costs a few
requests whatever the tensor count, and each tensor only its own range.
fsspec is imported on first use: without it, such a URL is an
UnsupportedError saying what to install.
"""

from __future__ import annotations

import atexit
from typing import Any, Tuple

from . import _native
from .errors import UnsupportedError


def _fs(url: str) -> Tuple[Any, str]:
    try:
        import fsspec
    except ImportError:
        raise UnsupportedError("reading this URL scheme needs fsspec (pip install fsspec, and the filesystem's "
                               "own package: gcsfs, adlfs, huggingface_hub, ...)") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:
        raise UnsupportedError(f"fsspec cannot serve this URL: {e}") from None


def _stat(url: str) -> Tuple[int, str]:
    fs, path = _fs(url)
    info = fs.info(path)
    if info.get("type") == "directory":
        raise IsADirectoryError("a directory, not a file")
    version = next((str(info[k]) for k in ("ETag", "etag", "mtime", "LastModified", "last_modified", "created")
                    if info.get(k) is not None), "")
    return int(info["size"]), version


def _read(url: str, offset: int, n: int) -> bytes:
    fs, path = _fs(url)
    return bytes(fs.cat_file(path, start=offset, end=offset + n))


_native.set_url_handler(_stat, _read)
# The handler holds Python functions: drop it before the interpreter goes.
atexit.register(_native.set_url_handler, None, None)
