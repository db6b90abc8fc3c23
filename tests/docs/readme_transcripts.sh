#!/usr/bin/env bash
# The README's transcripts are real: every unlabelled ``` block whose
# commands all start with `$ build/bin/` is run again, in order, and each
# command's output (stdout and stderr) must equal the lines under it.
# /tmp/ in the README stands for a fresh directory here.
# Usage: readme_transcripts.sh SOURCE_DIR BIN_DIR
set -u
src=$1
bin=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Blocks as records: "C<TAB>command" and "O<TAB>output line", "E" at a block's end.
awk '
  /^```/ {
    if (infence) { infence = 0; if (inblock) flush(); inblock = 0 }
    else { infence = 1; inblock = ($0 == "```"); n = 0; ok = 1 }
    next
  }
  inblock {
    lines[++n] = $0
    if ($0 ~ /^\$ / && $0 !~ /^\$ build\/bin\//) ok = 0
  }
  function flush(   i) {
    if (!ok || n == 0 || lines[1] !~ /^\$ build\/bin\//) return
    for (i = 1; i <= n; i++) print (lines[i] ~ /^\$ / ? "C\t" substr(lines[i], 3) : "O\t" lines[i])
    print "E"
  }
' "$src/README.md" >"$work/records"

blocks=0
commands=0
failed=0
run() {  # compares the output of the pending command with what the README shows
  [ -n "$cmd" ] || return
  commands=$((commands + 1))
  local actual
  actual=$(cd "$work" && eval "${cmd//build\/bin\//$bin/}" 2>&1)
  # Blank lines separate commands in the README: they are not output.
  want=$(printf '%s' "$want" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}')
  if [ "$actual" != "$want" ]; then
    failed=$((failed + 1))
    echo "README.md: \`$cmd\` printed:"
    printf '%s\n' "$actual"
    echo "but the README shows:"
    printf '%s\n' "$want"
    echo
  fi
  cmd=""
  want=""
}
cmd=""
want=""
while IFS=$'\t' read -r kind text; do
  text=${text//\/tmp\//$work/}
  case $kind in
    C) run; cmd=$text ;;
    O) want+="${want:+$'\n'}$text" ;;
    E) run; blocks=$((blocks + 1)) ;;
  esac
done <"$work/records"

if [ "$commands" -eq 0 ]; then
  echo "readme_transcripts: no transcript found in $src/README.md"
  exit 1
fi
echo "readme_transcripts: $commands commands in $blocks blocks, $failed differ"
[ "$failed" -eq 0 ]
