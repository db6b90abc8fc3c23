#!/usr/bin/env bash
# fuzz/run_python.sh SECONDS: runs the atheris target over the Python layer
# (fuzz/python/python_fuzz.py) for SECONDS, seeded from fuzz/python/corpus
# (new inputs go to build-fuzz/python-corpus). Needs the package installed in
# .venv (`make python`) and atheris (installed here on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: fuzz/run_python.sh SECONDS}
PY=.venv/bin/python
"$PY" -c "import atheris" 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check atheris==3.0.0
work=build-fuzz/python-corpus
out=build-fuzz/findings/python_fuzz
mkdir -p "$work" "$out"
"$PY" fuzz/python/python_fuzz.py -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$out/" "$work" fuzz/python/corpus
