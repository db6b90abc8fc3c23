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
# The consumer is built with the same compiler: a sanitized static library
# needs the same sanitizer runtime (the -fsanitize link flag comes with the
# exported target).
CXX_COMPILER=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
cmake -S "$SRC/tests/install/consumer" -B "$TMP/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" \
  ${CXX_COMPILER:+-DCMAKE_CXX_COMPILER="$CXX_COMPILER"} >/dev/null
cmake --build "$TMP/consumer" >/dev/null
"$TMP/consumer/consumer" "$TMP/x.tsafe" "$SRC/tests/golden/mds" "$TMP/mds-cache"
"$TMP/prefix/bin/tensorsafe" verify "$TMP/x.tsafe"
