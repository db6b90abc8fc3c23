"""`tensorsafe dcp info|ls|verify|consolidate DIR`: checkpoints of
tensorsafe.dcp, and of DCP's own back-end (FileSystemWriter, read without
pickle), from the command line (also `python -m tensorsafe.dcp`).

Exit codes: 0 success, 1 a check failed (verify), 2 bad usage, 3 not a
checkpoint or damaged metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from torch.distributed.checkpoint.metadata import BytesStorageMetadata

from .. import _native
from ..errors import Error
from . import _default
from ._consolidate import any_metadata, consolidate
from ._reader import read_document
from ._schema import METADATA_NAME
from ._writer import _join


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _info_default(path: str) -> int:
    doc = _default.read_document(path)
    tensors = sum(1 for it in doc["items"] if it["kind"] == "tensor")
    files = sorted({s["relative_path"] for s in doc["storage"]})
    sizes = {f: os.path.getsize(os.path.join(path, f)) if os.path.exists(os.path.join(path, f)) else None
             for f in files}
    print(f"{path}: DCP's own format (FileSystemWriter: pickled .metadata, read without pickle), "
          f"DCP {doc['version']}, no checksums")
    print(f"  items: {len(doc['items'])} ({tensors} tensors, {len(doc['items']) - tensors} plain values), "
          f"chunks: {len(doc['storage'])}")
    print(f"  files: {len(files)}, {_size(sum(v or 0 for v in sizes.values()))}")
    for name in files:
        print(f"    {name}  {'missing' if sizes[name] is None else _size(sizes[name])}")
    return 0


def cmd_info(path: str) -> int:
    if _default.is_default_checkpoint(path):
        return _info_default(path)
    doc = json.loads(read_document(path))
    md = any_metadata(path)
    tensors = [k for k, v in md.state_dict_metadata.items() if not isinstance(v, BytesStorageMetadata)]
    total = sum(v["size"] for v in doc["files"].values())
    print(f"{path}: tensorsafe-dcp schema {doc['version']}, DCP {doc['dcp_version']}, save {doc['save_id']}")
    print(f"  items: {len(md.state_dict_metadata)} ({len(tensors)} tensors, "
          f"{len(md.state_dict_metadata) - len(tensors)} plain values), chunks: {len(md.storage_data)}")
    print(f"  files: {len(doc['files'])}, {_size(total)}")
    for name, f in sorted(doc["files"].items()):
        print(f"    {name}  {_size(f['size'])}")
    return 0


def cmd_ls(path: str) -> int:
    md = any_metadata(path)
    for fqn, sm in md.state_dict_metadata.items():
        if isinstance(sm, BytesStorageMetadata):
            print(f"{fqn}  bytes")
            continue
        dt = str(sm.properties.dtype).removeprefix("torch.")
        print(f"{fqn}  {dt}  {list(sm.size)}  {len(sm.chunks)} chunk{'s' if len(sm.chunks) != 1 else ''}")
    return 0


def cmd_verify(path: str) -> int:
    """Every file named, every tensor's checksum, and the metadata's
    checksums against the files' indexes. DCP's own format has no checksums:
    every item is read, its zip CRC-32s, shape and dtype checked against
    the metadata, and the chunks' tiling of each tensor."""
    if _default.is_default_checkpoint(path):
        n, bad = _default.verify(path)
        for problem in bad:
            print(f"BAD {problem}")
        print(f"{path}: {n - len(bad)} of {n} items verified (DCP's own format: CRC-32 of each item's archive, "
              f"shapes, dtypes and chunk tiling; it has no checksums of its own)")
        return 1 if bad else 0
    md = any_metadata(path)
    by_file: dict = {}
    for idx, loc in md.storage_data.items():
        by_file.setdefault(loc.file, []).append((idx, loc))
    bad = 0
    for file, entries in sorted(by_file.items()):
        fpath = _join(path, file)
        try:
            r = _native.Reader.open(fpath, "pread")
            r.verify()
            sums = {i["name"]: i["checksum"] for i in r.infos()}
            for idx, loc in entries:
                for k, name in enumerate(loc.tensors):
                    if name not in sums:
                        raise Error(f"{fpath}: tensor {name!r} of item {idx.fqn!r} is missing")
                    if loc.checksums is not None and sums[name] != loc.checksums[k]:
                        raise Error(f"{fpath}: tensor {name!r} of item {idx.fqn!r}: checksum {sums[name]:016x} "
                                    f"differs from the metadata's {loc.checksums[k]:016x}")
            print(f"ok  {file}  {len(entries)} chunks")
        except Error as e:
            bad += 1
            print(f"BAD {file}: {e}")
    print(f"{path}: {len(by_file) - bad} of {len(by_file)} files verified")
    return 1 if bad else 0


def cmd_consolidate(path: str, out: str, fmt: str, max_shard_size: str) -> int:
    """Full tensors one at a time (memory: the largest tensor), plain values
    left out, into a .tsafe, a safetensors file or an HF checkpoint."""
    r = consolidate(path, out, fmt, _native.parse_size(max_shard_size))
    print(f"{out}: {r['tensors']} tensors, {_size(r['bytes'])} in {len(r['files'])} file(s)")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="tensorsafe dcp",
                                 description="tensorsafe.dcp checkpoints and DCP's own (docs/DCP.md)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, text in (("info", "files, sizes, item counts"), ("ls", "items: dtype, shape, chunks"),
                       ("verify", "every checksum of every file")):
        sub.add_parser(name, help=text).add_argument("dir")
    c = sub.add_parser("consolidate", help="full tensors into a .tsafe, a safetensors file or an HF checkpoint")
    c.add_argument("dir")
    c.add_argument("out", help="OUT.tsafe, OUT.safetensors, or a directory (HF sharded safetensors)")
    c.add_argument("--format", default="auto", choices=("auto", "tsafe", "safetensors", "hf"),
                   help="default: by OUT's suffix, else hf")
    c.add_argument("--max-shard-size", default="5GB", help="hf: a new shard past this size (huggingface_hub's "
                   "default, 5GB)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "consolidate":
            rc = cmd_consolidate(args.dir, args.out, args.format, args.max_shard_size)
        else:
            rc = {"info": cmd_info, "ls": cmd_ls, "verify": cmd_verify}[args.cmd](args.dir)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return rc
    except Error as e:
        print(f"tensorsafe dcp: {e}", file=sys.stderr)
        return 3 if METADATA_NAME in str(e) or _default.DEFAULT_METADATA in str(e) else 1
    except BrokenPipeError:
        # `tensorsafe dcp ls DIR | head`: the reader left; no traceback, and
        # none either when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
