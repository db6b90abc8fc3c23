#!/usr/bin/env bash
# The layout rule of docs/CONTRIBUTING.md: no source file over 600 lines in
# src/, tools/, python/src/ or python/tensorsafe/ (a file that grows past it
# holds more than one concept; split it by concept). Generated tables
# (*.inc) are exempt.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
limit=600
cd "$root"
over=$(find src tools python/src python/tensorsafe -type f \( -name '*.cc' -o -name '*.h' -o -name '*.py' \) \
         -exec wc -l {} + | awk -v l=$limit '$2 != "total" && $1 > l {print "file_size: " $2 " has " $1 " lines (limit " l ")"}')
if [ -n "$over" ]; then echo "$over"; exit 1; fi
echo "file_size: every source file in src, tools, python/src and python/tensorsafe is within $limit lines"
