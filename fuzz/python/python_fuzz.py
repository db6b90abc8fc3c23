"""atheris target over the Python layer: safe_open, the safetensors-style
loaders, tensorsafe.open and every format reader.

The C++ parsers have their own libFuzzer targets (fuzz/*_fuzz.cc); this one
checks what only the Python layer does: converting results to NumPy/torch,
slicing, dtype mapping, exception mapping. The contract: any input either
loads or raises tensorsafe.Error (or KeyError for a missing name); any
other exception, or a crash, is a finding.

Run:  .venv/bin/python fuzz/python/python_fuzz.py [libFuzzer flags] [corpus dirs]
      (fuzz/run_python.sh does it with the seed corpus).
Replay without atheris: check(data) is what tests/python/test_fuzz_corpus.py calls.
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import tensorsafe
import tensorsafe.numpy as tsnp

# The first byte picks the suffix, so detection by magic and by extension
# (.btf has no magic) both get exercised.
SUFFIXES = (".tsafe", ".safetensors", ".npy", ".npz", ".gguf", ".ten", ".btf", ".zio")
EXPECTED = (tensorsafe.Error, KeyError)
_TMP = tempfile.mkdtemp(prefix="ts-pyfuzz-")


def _touch_all(arr) -> None:
    # Reading every byte catches views past their mapping.
    if isinstance(arr, np.ndarray) and arr.size:
        arr.tobytes()


def _safe_open(path: str, framework: str) -> None:
    with tensorsafe.safe_open(path, framework=framework) as f:
        f.metadata()
        for k in f.keys():
            t = f.get_tensor(k)
            if framework == "np":
                _touch_all(t)
            s = f.get_slice(k)
            shape = s.get_shape()
            s.get_dtype()
            if shape:
                _touch_all(np.asarray(s[: max(1, shape[0] // 2)]) if framework == "np" else None)
                s[::2]


def _read_all(path: str, mode: str) -> None:
    r = tensorsafe.open(path, mode=mode)
    for k in r.keys():
        _touch_all(r[k])


def check(data: bytes) -> None:
    """Feeds `data` to every Python entry point; raises on a contract breach."""
    if not data:
        return
    suffix = SUFFIXES[data[0] % len(SUFFIXES)]
    body = data[1:]
    path = os.path.join(_TMP, "input" + suffix)
    with open(path, "wb") as f:
        f.write(body)
    steps = [
        lambda: tsnp.load(body),
        lambda: tsnp.load_file(path),
        lambda: _safe_open(path, "np"),
        lambda: _safe_open(path, "pt"),
        lambda: tensorsafe.read(path),
        lambda: tensorsafe.detect_format(path),
    ]
    if suffix == ".tsafe":
        steps.append(lambda: tensorsafe.verify(path))
        steps.append(lambda: _read_all(path, "mmap"))
        steps.append(lambda: _read_all(path, "pread"))
    for step in steps:
        try:
            step()
        except EXPECTED:
            pass


def main() -> None:
    import atheris  # only the fuzzing run needs it

    # Coverage of the Python code loaded so far (tensorsafe, NumPy): without
    # it libFuzzer has no feedback and keeps a single input.
    atheris.instrument_all()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
