"""The type stubs hold: `mypy --strict` accepts the native module's stubs
(_native.pyi) and a small program written against the public API, and
rejects a wrong one (so the check can fail)."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import tensorsafe

pytest.importorskip("mypy")

PACKAGE = os.path.dirname(tensorsafe.__file__)

GOOD = '''
from typing import Any, Dict, List, Optional
import numpy as np
import tensorsafe
import tensorsafe.numpy as tsn
from tensorsafe.stream import Connection

def roundtrip(path: str) -> List[str]:
    with tensorsafe.Writer(path, alignment=64) as w:
        w.add("w", np.zeros((2, 3), np.float32), metadata={"role": "weight"})
        w.add("s", tensorsafe.SparseCoo(np.array([[0]]), np.array([1.0]), (2,), True))
        w.set_metadata({"step": 1})
    r: tensorsafe.Reader = tensorsafe.open(path)
    meta: Dict[str, Any] = r.metadata()
    s = r["s"]
    with tensorsafe.safe_open(path, framework="np") as f:
        names: List[str] = f.keys()
        m: Optional[Dict[str, Any]] = f.metadata()
    stats: Dict[str, Any] = tensorsafe.convert(path, path + ".npz", drop_metadata=True)
    tsn.save_file({"a": np.ones(3)}, path + ".safetensors")
    arrays: Dict[str, Any] = tsn.load_file(path + ".safetensors")
    buf: tensorsafe.TensorBuffer = r.tensor("w")
    shape: tuple[int, ...] = buf.shape
    q: "np.ndarray[Any, Any]" = tensorsafe.gguf.quantize(np.zeros((2, 32), np.float32), "Q8_0")
    dq: "np.ndarray[Any, Any]" = tensorsafe.gguf.dequantize(q, "Q8_0", dtype="bf16")
    g, gm = tensorsafe.read_gguf(path + ".gguf", dequantize="f16")
    h: "np.ndarray[Any, Any]" = tensorsafe.cast(dq, "f32")
    return names + list(meta) + list(arrays) + [str(stats), str(m), str(shape), str(s)]

def stream(url: str) -> None:
    with Connection(url, encoding="native", timeout=1.0) as c:
        c.send({"x": np.ones(2)}, {"k": 1})
        for batch in c:
            print(batch)
'''

BAD = '''
import tensorsafe
r: tensorsafe.Reader = tensorsafe.open(42)
n: int = tensorsafe.open("x").names()
'''


def mypy(tmp_path, *targets):
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
           "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", *map(str, targets)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_stubs_and_a_typed_program_pass_strict(tmp_path):
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    # The stubs are self-contained: checked as a copy, since mypy refuses a
    # target inside site-packages.
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    shutil.copy(os.path.join(PACKAGE, "_native.pyi"), stubs / "_native.pyi")
    p = mypy(tmp_path, stubs / "_native.pyi", tmp_path / "good.py")
    assert p.returncode == 0, p.stdout + p.stderr
    p = mypy(tmp_path, tmp_path / "bad.py")
    assert p.returncode == 1
    assert 'Argument 1 to "open" has incompatible type "int"' in p.stdout
    assert 'Incompatible types in assignment (expression has type "list[str]", variable has type "int")' in p.stdout
