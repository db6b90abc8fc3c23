"""URLs of other schemes through fsspec (docs/REMOTE.md, "fsspec URLs").

tensorsafe reads s3://, http:// and https:// itself. Any other
``scheme://`` path (gs://, hf://, az://, abfs://, memory://, ...) is sent by
the native file seam to the two functions below, which ask fsspec for the
object's size and for byte ranges. Every tensor-file API then takes such a
URL the way it takes an s3:// one: ``tensorsafe.open``, ``safe_open``,
``load``, ``read``, the ``load_file`` functions; a .tsafe index costs a few
requests whatever the tensor count, and each tensor only its own range.
Datasets at such URLs (``tensorsafe.dataset.Dataset``, ``StreamingDataset``,
``Writer``) go through the shard cache, which also lists a WebDataset prefix
and, for writers, stores and removes objects with the functions below.
fsspec is imported on first use: without it, such a URL is an
UnsupportedError saying what to install.
"""

from __future__ import annotations

import atexit
from typing import Any, List, Tuple

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
    return int(info["size"]), _version(info)


def _version(info: dict) -> str:
    return next((str(info[k]) for k in ("ETag", "etag", "mtime", "LastModified", "last_modified", "modify", "created")
                 if info.get(k) is not None), "")


def _read(url: str, offset: int, n: int) -> bytes:
    fs, path = _fs(url)
    return bytes(fs.cat_file(path, start=offset, end=offset + n))


def _list(prefix: str) -> List[Tuple[str, int, str]]:
    # Every object under the prefix's directory whose URL starts with it.
    folder = prefix[:prefix.rfind("/") + 1]
    fs, path = _fs(folder)
    root = path.rstrip("/")
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return []
    out = []
    for p, info in found.items():
        if info.get("type") == "directory" or not p.startswith(root + "/"):
            continue
        url = folder + p[len(root) + 1:]
        if url.startswith(prefix):
            out.append((url, int(info["size"]), _version(info)))
    return out


def _put(url: str, local_path: str) -> None:
    fs, path = _fs(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    fs.put_file(local_path, path)


def _remove(url: str) -> None:
    fs, path = _fs(url)
    fs.rm_file(path)


_native.set_url_handler(_stat, _read, _list, _put, _remove)
# The handler holds Python functions: drop it before the interpreter goes.
atexit.register(_native.set_url_handler, None, None)
