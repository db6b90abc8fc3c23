#!/usr/bin/env bash
# fuzz/run.sh SECONDS [TARGET...]
#
# Builds the libFuzzer targets with clang, ASan and UBSan in build-fuzz/ and
# runs each for SECONDS (-max_total_time), seeded from fuzz/corpus/<target>/
# (read-only; new inputs go to build-fuzz/corpus/<target>/). Prints the
# executions per target and the findings (build-fuzz/findings/<target>/).
# Exit status 1 when anything was found.
#
# Environment: JOBS (build parallelism, default 2), FUZZ_PARALLEL (targets
# run at once, default 1), FUZZ_BUILD (build dir), FUZZ_ARGS (extra libFuzzer
# flags). A finding becomes a regression: copy it to
# fuzz/regressions/<target>/<what-it-is> and ctest replays it (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: fuzz/run.sh SECONDS [TARGET...]" >&2
  exit 2
fi
secs=$1
shift
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}
PAR=${FUZZ_PARALLEL:-1}
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" \
  -DTENSORSAFE_BUILD_FUZZ=ON -DTENSORSAFE_SANITIZE=address,undefined \
  -DTENSORSAFE_BUILD_TESTS=OFF -DTENSORSAFE_BUILD_TOOLS=OFF -DTENSORSAFE_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"

run_one() {
  local t=$1
  local work="$BUILD/corpus/$t" out="$BUILD/findings/$t" log="$BUILD/logs/$t.log"
  mkdir -p "$work" "$out" "$BUILD/logs"
  # Single allocations above 512 MiB are findings: no input here justifies one.
  # shellcheck disable=SC2086
  "$BUILD/bin/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -print_final_stats=1 -artifact_prefix="$out/" ${FUZZ_ARGS:-} "$work" "fuzz/corpus/$t" >"$log" 2>&1 || true
}

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$PAR" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

found=0
printf '%-28s %14s %8s %s\n' TARGET EXECUTIONS SECONDS FINDINGS
for t in "${targets[@]}"; do
  log="$BUILD/logs/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1 || true)
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | awk '{print $5}' | tail -1 || true)
  n=$(find "$BUILD/findings/$t" -type f | wc -l)
  [ "$n" -eq 0 ] || found=1
  printf '%-28s %14s %8s %s\n' "$t" "${execs:-?}" "${took:-?}" \
    "$( [ "$n" -eq 0 ] && echo none || find "$BUILD/findings/$t" -type f | tr '\n' ' ')"
done
exit "$found"
