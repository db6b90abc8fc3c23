"""Writes the golden PyTorch checkpoints of this directory and expected.json.

Run from the repository root with the project's .venv (torch 2.13.0,
safetensors 0.8.0):

    .venv/bin/python tests/golden/pytorch/make_golden.py

Every checkpoint is written by torch.save itself (zip, and the legacy stream
with _use_new_zipfile_serialization=False), except big_endian.pt, which is a
torch.save archive rewritten as a big-endian machine writes it (byteorder
"big", each storage byte-swapped; repacked by Python's zipfile, so its
storages are not 64-byte aligned either). expected.json holds, for each file,
what torch.load(weights_only=True) returns, flattened by the rules of
docs/formats/pytorch.md (tests/interop/pytorch_reference.py): names, dtypes,
shapes, the bytes of every tensor, and the metadata of the other values.
tied.safetensors is what safetensors' convert.py writes for tied.bin
(pytorch_reference.convert_reference). torch.save writes a random
.data/serialization_id and the legacy stream names storages by address, so a
re-run gives other bytes but the same expected.json.
"""
import io
import json
import os
import sys
import zipfile
from collections import OrderedDict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "interop"))
import pytorch_reference as ref  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
          torch.uint64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
          torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2]


def random_tensor(gen, dtype, shape):
    """Every bit pattern is fair game: random bytes viewed as `dtype`."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    n = 1
    for d in shape:
        n *= d
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def all_dtypes(gen):
    return OrderedDict((str(d).removeprefix("torch."), random_tensor(gen, d, (2, 3))) for d in DTYPES)


# Dtypes torch saves through an UntypedStorage (_rebuild_tensor_v3):
# torch.load cannot read them back from the legacy stream (its persistent_load
# asks UntypedStorage for a dtype it lacks), so legacy_v3_dtypes.pt is checked
# against the tensors that were saved.
V3 = set(torch.storage._new_dtypes())


def views():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return OrderedDict([
        ("base", base),
        ("row", base[1]),                     # offset 6, contiguous: a view of the storage
        ("col", base[:, 2]),                  # stride 6
        ("t", base.t()),                      # transposed
        ("step", base[::2, 1::3]),            # offset, two strides
        ("scalar", base[2, 3]),               # 0-d at offset 15
        ("empty", base[:0]),
        ("same", base),                       # the same tensor again
        ("expanded", torch.arange(3, dtype=torch.int16).expand(4, 3)),  # stride 0
        ("param", torch.nn.Parameter(torch.ones(2, 2, dtype=torch.float64))),
        ("half_view", torch.arange(8, dtype=torch.float16)[2:6]),
    ])


def nested():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    attr = torch.ones(2)
    attr.note = "dropped"  # a Python attribute: saved by _rebuild_from_type_v2
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "layers": [torch.zeros(1), {"w": torch.full((2,), 7, dtype=torch.int32)}, "text"],
        "attr": attr,
        "misc": {"nan": float("nan"), "inf": float("-inf"), "big": 10**30, "neg": -2**40, "bytes": b"\x00\xff",
                 "none": None, "tuple": (1, 2.5, "x"), 7: True, "dtype": torch.bfloat16, "cplx": 1 + 2j,
                 "size": torch.Size([2, 3]), "device": torch.device("cpu")},
    }


def tied():
    torch.manual_seed(1)
    embed = torch.randn(5, 4)
    return OrderedDict([
        ("model.embed.weight", embed),
        ("lm_head.weight", embed),                 # tied: removed, metadata says which was kept
        ("model.norm.bias", torch.randn(4)),
        ("model.first_row", embed[0]),             # part of the tied storage: removed too
        ("model.proj.weight", torch.randn(4, 4).t()),  # non-contiguous, alone: written contiguous
    ])


def big_endian(path, src):
    """Rewrites a torch.save archive as a big-endian host writes it."""
    sd = torch.load(src, weights_only=True)
    widths = {k: v.element_size() // (2 if v.is_complex() else 1) for k, v in sd.items()}
    zin = zipfile.ZipFile(src)
    prefix = zin.namelist()[0].split("/")[0] + "/"
    # data/<key> belongs to the tensor whose storage key it is: torch numbers
    # storages in the order the pickle meets them, which is sd's order.
    keys = {f"{prefix}data/{i}": k for i, k in enumerate(sd)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == prefix + "byteorder":
                data = b"big"
            elif info.filename in keys:
                w = widths[keys[info.filename]]
                data = b"".join(data[i:i + w][::-1] for i in range(0, len(data), w))
            zout.writestr(info.filename, data)


def main():
    gen = torch.Generator().manual_seed(2024)
    made = {}
    saved = {}
    dtypes = all_dtypes(gen)
    torch.save(dtypes, os.path.join(HERE, "all_dtypes.pt"))
    made["all_dtypes.pt"] = True
    v2 = OrderedDict((k, v) for k, v in dtypes.items() if v.dtype not in V3)
    torch.save(v2, os.path.join(HERE, "all_dtypes_legacy.pt"), _use_new_zipfile_serialization=False)
    made["all_dtypes_legacy.pt"] = True
    v3 = OrderedDict((k, v) for k, v in dtypes.items() if v.dtype in V3)
    torch.save(v3, os.path.join(HERE, "legacy_v3_dtypes.pt"), _use_new_zipfile_serialization=False)
    saved["legacy_v3_dtypes.pt"] = v3
    for legacy in (False, True):
        suffix = "_legacy" if legacy else ""
        torch.save(views(), os.path.join(HERE, f"views{suffix}.pt"), _use_new_zipfile_serialization=not legacy)
        made[f"views{suffix}.pt"] = True
    torch.save(nested(), os.path.join(HERE, "nested.pt"))
    made["nested.pt"] = True
    torch.save(tied(), os.path.join(HERE, "tied.bin"))
    made["tied.bin"] = True
    torch.save(views(), os.path.join(HERE, "protocol4.pt"), pickle_protocol=4)
    made["protocol4.pt"] = False  # torch.load(weights_only=True) refuses protocol 4
    torch.save(OrderedDict([("f", torch.randn(3, generator=gen)), ("d", torch.randn(2, dtype=torch.float64)),
                            ("c", torch.randn(2, dtype=torch.complex64)),
                            ("s", torch.arange(-3, 3, dtype=torch.int16)), ("b", torch.ones(2, dtype=torch.bool))]),
               os.path.join(HERE, "little.pt"))
    big_endian(os.path.join(HERE, "big_endian.pt"), os.path.join(HERE, "little.pt"))
    os.remove(os.path.join(HERE, "little.pt"))
    made["big_endian.pt"] = True
    torch.save(torch.arange(5, dtype=torch.int64), os.path.join(HERE, "bare.pt"))
    made["bare.pt"] = True
    ref.convert_reference(os.path.join(HERE, "tied.bin"), os.path.join(HERE, "tied.safetensors"))

    expected = {}
    for name, weights_only in list(made.items()) + [(n, None) for n in saved]:
        path = os.path.join(HERE, name)
        obj = saved[name] if weights_only is None else torch.load(path, weights_only=weights_only)
        tensors, values = ref.flatten(obj, os.path.splitext(name)[0])
        expected[name] = {"tensors": [ref.expected_entry(n, t) for n, t in tensors.items()],
                          "metadata": values or None}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
