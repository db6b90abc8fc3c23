"""Writes the golden metadata files of torch.distributed.checkpoint's default
back-end in dcp/ and dcp/expected.json.

Run from the repository root with the project's .venv (torch 2.13.0):

    .venv/bin/python tests/golden/pytorch/make_dcp_golden.py

- single.metadata: what `dcp.save` (FileSystemWriter) writes for a small
  state dict in one process: tensors of three dtypes, nested names, plain
  values, a PosixPath checkpoint id.
- sharded.metadata: DCP's dataclasses built as a 2-rank save of row- and
  column-sharded tensors builds them (several chunks per tensor, chunk
  index hints, offsets in MetadataIndex), pickled as FileSystemWriter.finish
  pickles them (`pickle.dump`).

expected.json holds, for each file, the document DcpMetadataJson must
return (tensorsafe/formats/pytorch.h), computed here from the objects torch
itself unpickles, by code independent of the C++ reader.
"""
import json
import os
import pathlib
import pickle
import shutil
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dcp")
MEMORY_FORMATS = {torch.contiguous_format: 0, torch.channels_last: 1, torch.preserve_format: 2}


def single(path):
    tmp = tempfile.mkdtemp()
    try:
        sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(3, dtype=torch.bfloat16),
              "step": 7, "name": "hello", "nested": {"x": torch.zeros(2, dtype=torch.int64), "lst": [1, 2.5]}}
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(pathlib.Path(tmp) / "ckpt"))
        shutil.copyfile(pathlib.Path(tmp) / "ckpt" / ".metadata", path)
    finally:
        shutil.rmtree(tmp)


def sharded(path):
    def props(dtype, grad=False):
        return TensorProperties(dtype=dtype, requires_grad=grad)

    rows = TensorStorageMetadata(props(torch.float32, True), torch.Size([13, 7]), [
        ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([7, 7])),
        ChunkStorageMetadata(torch.Size([7, 0]), torch.Size([6, 7]))])
    cols = TensorStorageMetadata(props(torch.bfloat16), torch.Size([6, 10]), [
        ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([6, 5])),
        ChunkStorageMetadata(torch.Size([0, 5]), torch.Size([6, 5]))])
    scalar = TensorStorageMetadata(props(torch.float64), torch.Size([]), [
        ChunkStorageMetadata(torch.Size([]), torch.Size([]))])
    sdm = {"model.rows": rows, "model.cols": cols, "scalar": scalar, "values.step": BytesStorageMetadata()}
    storage = {
        MetadataIndex("model.rows", [0, 0], 0): _StorageInfo("__0_0.distcp", 0, 1500),
        MetadataIndex("model.rows", [7, 0], 1): _StorageInfo("__1_0.distcp", 0, 1400),
        MetadataIndex("model.cols", [0, 0], 0): _StorageInfo("__0_0.distcp", 1500, 1200),
        MetadataIndex("model.cols", [0, 5], 1): _StorageInfo("__1_0.distcp", 1400, 1200),
        MetadataIndex("scalar", [], 0): _StorageInfo("__0_0.distcp", 2700, 900),
        MetadataIndex("values.step"): _StorageInfo("__0_0.distcp", 3600, 800),
    }
    planner = {"model.rows": ("model", "rows"), "model.cols": ("model", "cols"), "scalar": ("scalar",),
               "values.step": ("values", "step")}
    md = Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage,
                  storage_meta=StorageMeta(checkpoint_id="/ckpt/step-100", save_id="golden", modules=["model"]),
                  version="1.0.0")
    with open(path, "wb") as f:
        pickle.dump(md, f)


def document(md):
    """The DcpMetadataJson document of Metadata `md` (pytorch.h)."""
    items = []
    for fqn, sm in md.state_dict_metadata.items():
        if isinstance(sm, BytesStorageMetadata):
            items.append({"fqn": fqn, "kind": "bytes"})
            continue
        p = sm.properties
        items.append({"fqn": fqn, "kind": "tensor", "dtype": str(p.dtype).removeprefix("torch."),
                      "layout": str(p.layout), "requires_grad": p.requires_grad,
                      "memory_format": MEMORY_FORMATS[p.memory_format], "pin_memory": p.pin_memory,
                      "size": list(sm.size),
                      "chunks": [{"offsets": list(c.offsets), "sizes": list(c.sizes)} for c in sm.chunks]})
    storage = [{"fqn": k.fqn, "offset": None if k.offset is None else list(k.offset), "index": k.index,
                "relative_path": v.relative_path, "file_offset": v.offset, "length": v.length,
                "transforms": list(v.transform_descriptors or [])} for k, v in md.storage_data.items()]
    sm = md.storage_meta
    meta = None if sm is None else {"checkpoint_id": None if sm.checkpoint_id is None else str(sm.checkpoint_id),
                                    "save_id": sm.save_id, "load_id": sm.load_id, "modules": list(sm.modules)}
    planner = None if md.planner_data is None else {k: list(v) for k, v in md.planner_data.items()}
    return {"version": md.version, "items": items, "storage": storage, "planner_data": planner,
            "storage_meta": meta}


def main():
    os.makedirs(HERE, exist_ok=True)
    single(os.path.join(HERE, "single.metadata"))
    sharded(os.path.join(HERE, "sharded.metadata"))
    expected = {}
    for name in ("single.metadata", "sharded.metadata"):
        with open(os.path.join(HERE, name), "rb") as f:
            expected[name] = document(pickle.load(f))  # torch's own reading, the reference
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
