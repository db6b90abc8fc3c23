#!/usr/bin/env python3
"""Checks files written by tensorsafe's safetensors writer with the reference
`safetensors` package.

    safetensors_interop.py DIR
        checks DIR/expected.json and the files it lists;
    safetensors_interop.py --tests-binary BIN [--venv VENV] [--seed N]
        runs BIN's SafetensorsInterop test to write the files into a
        temporary directory first (what the CTest test safetensors_interop
        does).

For each file: the reference reader loads it, and names, dtypes, shapes, data
and metadata must be those expected.json describes; then the reference writer
writes the same tensors, and its bytes must equal ours. (F6 dtypes are only
read: the reference Python API cannot write them.)

Exit status: 0 when every file passes, 1 otherwise, 77 when the reference
package cannot be imported (CTest reports the test as skipped).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77

# safetensors dtype -> the reference TensorSpec dtype name (None: not writable).
SPEC_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64",
    "U64": "uint64", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "F4": "float4_e2m1fn_x2",
    "F6_E2M3": None, "F6_E3M2": None,
}


def import_reference(venv):
    """Imports safetensors and numpy, re-running under the venv if needed."""
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        return True
    except ImportError as e:
        reason = str(e)
    python = os.path.join(venv, "bin", "python") if venv else ""
    if python and os.path.exists(python) and not os.environ.get("TS_INTEROP_REEXEC"):
        os.environ["TS_INTEROP_REEXEC"] = "1"
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    print(f"SKIP: the reference safetensors package is not importable ({reason}); "
          "create it with: python3 -m venv .venv && .venv/bin/pip install safetensors 'numpy<2.2'")
    return False


def check_file(path, desc):
    import numpy as np
    from safetensors import TensorSpec, deserialize, safe_open, serialize

    problems = []
    with open(path, "rb") as f:
        ours = f.read()
    got = {name: t for name, t in deserialize(ours)}
    want = {t["name"]: t for t in desc["tensors"]}
    if set(got) != set(want):
        problems.append(f"names {sorted(got)} != {sorted(want)}")
    for name in set(got) & set(want):
        g, w = got[name], want[name]
        if g["dtype"] != w["dtype"] or list(g["shape"]) != w["shape"] or bytes(g["data"]).hex() != w["data_hex"]:
            problems.append(f"tensor {name!r}: {g['dtype']} {g['shape']} differs from {w['dtype']} {w['shape']} "
                            "or its data differs")
    expected_meta = None if desc["metadata"] is None else dict(desc["metadata"])
    with safe_open(path, framework="np") as f:
        if f.metadata() != expected_meta:
            problems.append(f"metadata {f.metadata()!r} != {expected_meta!r}")
        if list(f.keys()) != sorted(want):
            problems.append(f"keys {list(f.keys())} != {sorted(want)}")

    if any(SPEC_NAMES[t["dtype"]] is None for t in desc["tensors"]):
        return problems, "read only (F6)"
    keep, specs = [], {}
    for t in desc["tensors"]:
        raw = bytes.fromhex(t["data_hex"])
        buf = np.frombuffer(raw, np.uint8).copy() if raw else np.zeros(1, np.uint8)
        keep.append(buf)
        shape = list(t["shape"])
        if t["dtype"] == "F4":
            shape[-1] //= 2  # TensorSpec takes the storage shape of x2-packed F4
        specs[t["name"]] = TensorSpec(dtype=SPEC_NAMES[t["dtype"]], shape=shape,
                                      data_ptr=buf.ctypes.data, data_len=len(raw))
    theirs = bytes(serialize(specs, metadata=expected_meta))
    if theirs != ours:
        problems.append(f"the reference writer gives different bytes:\n  ours   {ours[:200]!r}\n  theirs {theirs[:200]!r}")
    return problems, "read and byte-identical"


def check_dir(directory):
    with open(os.path.join(directory, "expected.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    import safetensors
    print(f"reference safetensors {safetensors.__version__}; seed {manifest.get('seed')}")
    passed = failed = 0
    for fname, desc in manifest["files"].items():
        try:
            problems, how = check_file(os.path.join(directory, fname), desc)
        except Exception as e:  # the reference refused the file
            problems, how = [f"{type(e).__name__}: {e}"], ""
        if problems:
            failed += 1
            print(f"FAIL {fname}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"ok   {fname}: {how}")
    if passed == 0:
        failed += 1
        print("FAIL: no files to check")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", help="a directory with expected.json")
    ap.add_argument("--tests-binary", help="tensorsafe_tests, to write the files first")
    ap.add_argument("--venv", help="a virtualenv that has safetensors and numpy")
    ap.add_argument("--seed", help="seed for the writer (default: random, printed)")
    args = ap.parse_args()
    if not args.dir and not args.tests_binary:
        ap.error("give DIR or --tests-binary")
    if not import_reference(args.venv):
        # CI installs the reference (requirements-dev.txt): a skip there would
        # hide a broken install, so it fails instead.
        return 1 if os.environ.get("CI") == "true" else SKIP
    if args.dir:
        return check_dir(args.dir)
    with tempfile.TemporaryDirectory(prefix="st-interop-") as tmp:
        env = dict(os.environ, TS_SAFETENSORS_INTEROP_DIR=tmp)
        if args.seed:
            env["TS_SAFETENSORS_INTEROP_SEED"] = args.seed
        run = subprocess.run([args.tests_binary, "--gtest_filter=SafetensorsInterop.*"], env=env,
                             capture_output=True, text=True)
        seed_lines = [l for l in run.stdout.splitlines() if "seed" in l]
        print("\n".join(seed_lines))
        if run.returncode != 0 or not os.path.exists(os.path.join(tmp, "expected.json")):
            print(run.stdout[-3000:], run.stderr[-3000:])
            print("0 passed, 1 failed")
            return 1
        return check_dir(tmp)


if __name__ == "__main__":
    sys.exit(main())
