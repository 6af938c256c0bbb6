#!/bin/sh
# What the preloaded library adds to the start and end of a short C program
# (bench/c/thousand.c: 1,000 allocations): perf stat's task-clock (CPU time of all the
# process's threads) and wall time, 30 runs each, bare, preloaded, and preloaded with
# MEMPROF_ENABLED=0 (loading alone). Usage: scripts/preload-startup.sh [LIBRARY]
# (default: the release build in ${CARGO_TARGET_DIR:-target}).
set -eu
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
library=${1:-}
if [ -z "$library" ]; then
    cargo build --release -p memprof-preload
    library=$target/release/libmemprof_preload.so
fi
library=$(realpath "$library")
program=$(mktemp -d)/thousand
cc -O2 -fno-builtin -o "$program" bench/c/thousand.c
stat() {
    echo "== $1"
    shift
    env "$@" perf stat -r 30 -e task-clock "$program" 2>&1 | grep -E 'task-clock|elapsed'
}
stat bare
stat preloaded LD_PRELOAD="$library"
stat "preloaded, MEMPROF_ENABLED=0" LD_PRELOAD="$library" MEMPROF_ENABLED=0
rm -r "$(dirname "$program")"
