#!/usr/bin/env bash
# The README's screenshots of the viewer, taken from the running server: records a trace of a real
# workload (examples/workload.rs), starts `memprof serve` on it, and has headless Chromium take the
# timeline, the call-site table (with one site's stack open) and the flame graph into docs/img/;
# then a second run of the workload twice the size, served beside the first, for the diff of two
# runs; and a Python program that maps memory of its own, run under the preloaded library, for
# the Mappings tab.
#
#   bash scripts/viewer-screenshots.sh [SCENARIO [SIZE]]    (default: churn 300000)
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=${1:-churn}
size=${2:-300000}
out=docs/img
mkdir -p "$out"

chromium=""
for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then chromium=$name; break; fi
done
[ -n "$chromium" ] || { echo "chromium is missing (apt-get install -y chromium)" >&2; exit 1; }

# Release builds carry line tables (`debug = "limited"` below), so the stacks have files and lines.
export CARGO_PROFILE_RELEASE_DEBUG=limited
cargo build --release -p memprof-bench --features trace --example workload
cargo build --release -p memprof-cli -p memprof-preload
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

work=$(mktemp -d)
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

MEMPROF_TRACE="$work/$scenario.mptrace" "$target_dir/release/examples/workload" "$scenario" "$size" >/dev/null
MEMPROF_TRACE="$work/$scenario-2x.mptrace" "$target_dir/release/examples/workload" "$scenario" "$((size * 2))" >/dev/null

# Serves the traces given; `base` is then where.
serve() {
  [ -z "$server" ] || { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$target_dir/release/memprof" serve "$@" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
  server=$!
  base="http://127.0.0.1:$port"
  for _ in $(seq 600); do
    curl -fs "$base/api/summary" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  curl -fs "$base/api/summary" >/dev/null || { echo "memprof serve does not answer" >&2; exit 1; }
}
serve "$work/$scenario.mptrace" "$work/$scenario-2x.mptrace"

# The site with the most bytes allocated, to show its stack open under the table.
site=$(curl -fs "$base/api/sites?sort=allocated_bytes&desc=1&limit=1" \
  | python3 -c 'import json,sys; s = json.load(sys.stdin)["sites"]; print(s[0]["id"] if s else "")')

shot() {
  local name=$1 query=$2 height=$3
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile" --window-size="1400,$height" --virtual-time-budget=20000 \
    --screenshot="$out/viewer-$name.png" "$base/?$query" 2>/dev/null
  echo "$out/viewer-$name.png: $base/?$query"
}
shot timeline "view=timeline&at=peak" 900
shot sites "view=sites&at=peak&sort=allocated_bytes&desc=1${site:+&site=$site}" 1300
shot flame "view=flame&what=live&at=peak" 1000
shot diff-runs "view=diff&from_trace=0&from=peak&to_trace=1&to=peak" 1100

# The program's own mappings: Python maps 1, 4 and 16 MiB and unmaps the 4 MiB, besides the
# arenas of its own allocator.
# The interpreter itself, not a wrapper script (pyenv's) that would be traced too.
python=$(python3 -c 'import sys; print(sys.executable)')
"$target_dir/release/memprof" run --trace "$work/maps.mptrace" -- "$python" -c '
import mmap
maps = [mmap.mmap(-1, n << 20) for n in (1, 4, 16)]
for m in maps:
    m.write(b"x" * 4096)
maps[1].close()
' >/dev/null
serve "$work/maps.mptrace"
# At the most mapped: the moment of the mappings' peak.
peak=$(curl -fs "$base/api/mappings?points=1&limit=1" \
  | python3 -c 'import json,sys; print("%.9f" % (json.load(sys.stdin)["peak"]["time_ns"] / 1e9))')
shot mappings "view=mappings&at=$peak" 1100
