#!/usr/bin/env bash
# The demo of `make demo`: write a file with the C++ API, then list, inspect,
# verify and read it back with the CLI, printing each command as it runs.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
F="$OUT/demo.tsafe"

run() {
  echo
  echo "\$ $*"
  "$@"
}

run "$BIN/write_demo" "$F"
run "$BIN/tensorsafe" ls "$F"
run "$BIN/tensorsafe" info "$F"
run "$BIN/tensorsafe" verify "$F"
run "$BIN/tensorsafe" cat "$F" head.bias
run "$BIN/tensorsafe" cat "$F" embed.weight --out "$OUT/embed.npy"
if [ -x .venv/bin/python ]; then
  run .venv/bin/python examples/python_demo.py "$F"
fi
echo
echo "demo: wrote, listed, verified and read back $F"
