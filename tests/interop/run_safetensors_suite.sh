#!/usr/bin/env bash
# Runs safetensors' own Python test suite (bindings/python/tests of a
# huggingface/safetensors checkout) with `import safetensors` resolved to
# tensorsafe (TENSORSAFE_AS_SAFETENSORS=1, docs/python.md "The safetensors
# drop-in"). The checkout's tests are copied to a temporary directory and run
# there; nothing of them enters this repository. CI cannot reach GitHub, so
# this runs locally and its result is recorded in docs/python.md.
#
#   tests/interop/run_safetensors_suite.sh CHECKOUT [PYTHON]
#
# CHECKOUT: a directory holding bindings/python/tests (a clone, or
# `git archive` of one). PYTHON: an interpreter with tensorsafe, torch,
# numpy and fsspec installed (default: this repository's .venv).
# Exit status: pytest's; 1 as well when a test is skipped for a reason other
# than an absent device or framework.
set -euo pipefail

checkout=${1:?usage: $0 SAFETENSORS_CHECKOUT [PYTHON]}
here=$(cd "$(dirname "$0")/../.." && pwd)
python=${2:-$here/.venv/bin/python}
tests="$checkout/bindings/python/tests"
[ -d "$tests" ] || { echo "run_safetensors_suite: no $tests" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$tests" "$work/tests"
mkdir -p "$work/tests/data"  # the tests write there, relative to the working directory
cd "$work"

export TENSORSAFE_AS_SAFETENSORS=1
"$python" - <<'PY'
import safetensors
assert safetensors.__name__ == "tensorsafe.safetensors", f"safetensors is {safetensors.__name__}, not tensorsafe"
print(f"safetensors resolves to {safetensors.__name__} ({safetensors.__file__})")
PY

files=(test_simple.py test_pt_comparison.py test_pt_model.py test_threadable.py test_handle.py
       test_multithreaded.py test_pread_backend.py)
set +e
"$python" -m pytest -p no:cacheprovider -q -rs "${files[@]/#/tests/}" 2>&1 | tee "$work/log"
rc=${PIPESTATUS[0]}
set -e

# Skips allowed: absent devices (CUDA, MPS, NPU, HPU, a second GPU, S3) and
# framework features (torch versions); anything else counts as a failure.
allowed='Cuda is not available|MPS is not available|Npu is not available|HPU is not available|Only 1 device available|without s3 access|requires torch|float4_e2m1fn_x2 requires'
bad=$(grep '^SKIPPED' "$work/log" | grep -Ev "$allowed" || true)
if [ -n "$bad" ]; then
  echo "run_safetensors_suite: skips that are not for an absent device or framework:" >&2
  echo "$bad" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
