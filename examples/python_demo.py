"""The Python part of `make demo`: read the demo file with the tensorsafe
package, save its tensors as safetensors and read that back with safe_open.

    .venv/bin/python examples/python_demo.py FILE.tsafe
"""

import os
import sys

import numpy as np

import tensorsafe as ts
import tensorsafe.numpy as tsn

path = sys.argv[1]
with ts.open(path) as r:
    print("names:   ", r.names())
    print("metadata:", r.metadata())
    w = r["head.weight"]
    print("head.weight:", w.dtype, w.shape, "| zero-copy:", not w.flags.owndata, "| read-only:", not w.flags.writeable)
    print("embed.weight[::4, -1] =", r.read_slice("embed.weight", np.s_[::4, -1]))
    # safetensors metadata is str -> str, so this file's nested JSON is not
    # carried over (ts.convert would refuse it with InvalidArgumentError).
    out = os.path.splitext(path)[0] + ".safetensors"
    tsn.save_file({name: r[name] for name in r}, out, metadata={"source": os.path.basename(path)})

with ts.safe_open(out, framework="np") as f:
    print(f"{os.path.basename(out)}: keys {f.keys()}, metadata {f.metadata()}")
    print("head.bias =", f.get_tensor("head.bias"))
