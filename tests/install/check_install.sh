#!/usr/bin/env bash
# Installs the build into a temporary prefix, then configures, builds and runs
# a separate project that uses find_package(tensorsafe). Usage: BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
test -x "$TMP/prefix/bin/tensorsafe"
test -f "$TMP/prefix/include/tensorsafe/reader.h"
cmake -S "$SRC/tests/install/consumer" -B "$TMP/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
cmake --build "$TMP/consumer" >/dev/null
"$TMP/consumer/consumer" "$TMP/x.tsafe"
"$TMP/prefix/bin/tensorsafe" verify "$TMP/x.tsafe"
