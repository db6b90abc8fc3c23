#!/usr/bin/env bash
# The include rule (docs/CONTRIBUTING.md "Layout"): the CLI (tools/) and the
# Python binding (python/src/) see the library through its public headers
# only, "tensorsafe/...", plus headers of their own folder. A quoted include
# of anything else (src/'s "io/...", "formats/...") fails this test, named
# with its file and line.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bad=0
for dir in tools/tensorsafe python/src; do
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$rest")
    case "$inc" in
      tensorsafe/*) continue ;;
    esac
    if [ -e "$root/$dir/$inc" ] && [[ "$inc" != */* ]]; then continue; fi
    echo "include_rule: $file:$line includes \"$inc\": $dir may include only \"tensorsafe/...\" (the public API) and its own headers"
    bad=1
  done < <(cd "$root" && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir" --include='*.cc' --include='*.h' || true)
done
if [ "$bad" -eq 0 ]; then
  n=$(cd "$root" && grep -rhcE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' tools/tensorsafe python/src --include='*.cc' --include='*.h' | awk '{s+=$1} END {print s}')
  echo "include_rule: $n quoted includes in tools/tensorsafe and python/src, all public or local"
fi
exit "$bad"
