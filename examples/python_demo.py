"""The Python part of `make demo`: read the demo file with the tensorsafe
package, convert it to safetensors and read that back with safe_open.

    .venv/bin/python examples/python_demo.py FILE.tsafe
"""

import os
import sys

import numpy as np

import tensorsafe as ts

path = sys.argv[1]
with ts.open(path) as r:
    print("names:   ", r.names())
    print("metadata:", r.metadata())
    w = r["head.weight"]
    print("head.weight:", w.dtype, w.shape, "| zero-copy:", not w.flags.owndata, "| read-only:", not w.flags.writeable)
    print("embed.weight[::4, -1] =", r.read_slice("embed.weight", np.s_[::4, -1]))

out = os.path.splitext(path)[0] + ".safetensors"
ts.convert(path, out)
with ts.safe_open(out, framework="np") as f:
    print(f"{os.path.basename(out)}: keys {f.keys()}, head.bias = {f.get_tensor('head.bias')}")
