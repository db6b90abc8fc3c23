#!/usr/bin/env bash
# Runs the updater crash test with many kills (default 10,000) and prints the
# number of files checked and of failures. Usage: tests/crash_torture.sh [ROUNDS] [BUILD]
set -euo pipefail
ROUNDS=${1:-10000}
BUILD=${2:-build}
TS_CRASH_ROUNDS=$ROUNDS "$BUILD/bin/tensorsafe_tests" --gtest_filter='Crash.*' | grep -E '^crash test:|PASSED|FAILED'
