"""Writing a tensorsafe dataset from Dask collections, in parallel.

Each partition is written by whichever Dask worker computes it, as its own
dataset part (``<out>/part-00000``, ...), through
:class:`tensorsafe.dataset.Writer`; the client then merges the parts'
indexes into ``<out>/index.json`` without copying shards
(:func:`tensorsafe.dataset.merge`). Workers must see ``out`` on a shared
file system (or be on one host).

Example:
    >>> import dask.bag as db
    >>> from distributed import Client, LocalCluster
    >>> from tensorsafe.dask import write_bag
    >>> with LocalCluster(n_workers=2, host="127.0.0.1") as c, Client(c):
    ...     bag = db.from_sequence(range(1000), npartitions=4).map(lambda i: {"x": i})
    ...     write_bag(bag, "ds", schema={"x": "int"})
    {'samples': 1000, 'shards': 4}
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from . import dataset as _ds
from .errors import InvalidArgumentError

__all__ = ["write_bag", "write_dataframe"]


def _part_name(i: int) -> str:
    return f"part-{i:05d}"


def _write_part(samples: Iterable[Mapping[str, Any]], out: str, index: int, kw: Dict[str, Any]) -> Optional[str]:
    """Writes one partition as the part ``out/part-<index>``; None when the
    partition is empty (an empty part would have no schema to check)."""
    it = iter(samples)
    try:
        first = next(it)
    except StopIteration:
        return None
    name = _part_name(index)
    with _ds.Writer(os.path.join(out, name), **kw) as w:
        w.add(first)
        for s in it:
            w.add(s)
    return name


def _rows(df: Any, columns: Optional[Sequence[str]]) -> Iterable[Dict[str, Any]]:
    """A pandas DataFrame's rows as sample dicts, NumPy scalars as Python
    values (so int64 columns become int fields, not 0-d tensors)."""
    cols = list(df.columns) if columns is None else list(columns)
    for row in df[cols].itertuples(index=False, name=None):
        yield {c: (v.item() if isinstance(v, np.generic) else v) for c, v in zip(cols, row)}


def _write_frame_part(df: Any, out: str, index: int, kw: Dict[str, Any],
                      columns: Optional[Sequence[str]]) -> Optional[str]:
    return _write_part(_rows(df, columns), out, index, kw)


def _run(delayed_parts: List[Any], out: str, kw: Dict[str, Any], metadata: Optional[Dict[str, Any]],
         overwrite: bool, fn, *extra) -> Dict[str, Any]:
    import dask

    if "metadata" in kw or "shard_prefix" in kw or "progress" in kw:
        raise InvalidArgumentError("metadata goes to write_*(metadata=...); shard_prefix and progress are per part")
    os.makedirs(out, exist_ok=True)
    tasks = [dask.delayed(fn)(p, out, i, kw, *extra) for i, p in enumerate(delayed_parts)]
    names = [n for n in dask.compute(*tasks) if n is not None]
    if not names:
        raise InvalidArgumentError("dask: every partition is empty; nothing to write")
    return _ds.merge(out, names, metadata=metadata, overwrite=overwrite, sync=kw.get("sync", True))


def write_bag(bag: Any, out: "os.PathLike[str] | str", *, metadata: Optional[Dict[str, Any]] = None,
              overwrite: bool = False, **writer_kwargs: Any) -> Dict[str, Any]:
    """Writes a ``dask.bag.Bag`` of sample dicts as a dataset in ``out``.

    Args:
        bag: items are sample dicts as :meth:`tensorsafe.dataset.Writer.add`
            takes.
        out: the dataset directory (parts are written inside it).
        metadata: the merged index's user metadata.
        overwrite: replace an existing index.json in ``out``.
        writer_kwargs: passed to each part's Writer (``schema``,
            ``shard_bytes``, ``shard_samples``, ``compression``, ``sync``).
            Declare the ``schema`` so that every part agrees.

    Returns:
        ``{"samples", "shards"}`` of the merged dataset. Samples keep the
        bag's order (partition by partition).

    Raises:
        FailedPreconditionError: the parts' schemas differ.
        InvalidArgumentError: a sample does not fit (from the worker).
    """
    return _run(bag.to_delayed(), os.fspath(out), writer_kwargs, metadata, overwrite, _write_part)


def write_dataframe(df: Any, out: "os.PathLike[str] | str", *, columns: Optional[Sequence[str]] = None,
                    metadata: Optional[Dict[str, Any]] = None, overwrite: bool = False,
                    **writer_kwargs: Any) -> Dict[str, Any]:
    """Writes a ``dask.dataframe.DataFrame`` as a dataset: one sample per
    row, one field per column (``columns`` selects and orders them). Integer
    columns become int fields, floats float, strings str, bytes bytes;
    cells holding arrays become tensors. Arguments and result as
    :func:`write_bag`."""
    return _run(df.to_delayed(), os.fspath(out), writer_kwargs, metadata, overwrite, _write_frame_part,
                None if columns is None else list(columns))
