#!/usr/bin/env bash
# The README's screenshots of the viewer, taken from the running server: records a trace of a real
# workload (examples/workload.rs), starts `memprof serve` on it, and has headless Chromium take the
# timeline, the call-site table (with one site's stack open) and the flame graph into docs/img/.
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
cargo build --release -p memprof-cli
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

work=$(mktemp -d)
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

MEMPROF_TRACE="$work/$scenario.mptrace" "$target_dir/release/examples/workload" "$scenario" "$size" >/dev/null

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$target_dir/release/memprof" serve "$work/$scenario.mptrace" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 600); do
  curl -fs "$base/api/summary" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
curl -fs "$base/api/summary" >/dev/null || { echo "memprof serve does not answer" >&2; exit 1; }

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
