#!/usr/bin/env bash
# Benchmark of `memprof serve` on a trace: the time to index it, then each endpoint's answer time
# (first request, then the same again), and the server's maximum resident memory.
#
#   RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release -p memprof-bench --features trace --example workload
#   cargo build --release -p memprof-cli
#   MEMPROF_TRACE=/tmp/churn.mptrace target/release/examples/workload churn 2000000
#   scripts/bench-serve.sh /tmp/churn.mptrace
#
# MEMPROF_BIN overrides the binary (default target/release/memprof, or $CARGO_TARGET_DIR's).
set -euo pipefail
trace=${1:?usage: bench-serve.sh TRACE}
bin=${MEMPROF_BIN:-${CARGO_TARGET_DIR:-target}/release/memprof}
port=${PORT:-18181}
log=$(mktemp)
timing=$(mktemp)
trap 'rm -f "$log" "$timing"' EXIT

echo "load: $(uptime | sed 's/.*load average: //')"
start=$(date +%s.%N)
/usr/bin/time -f '%M' -o "$timing" "$bin" serve "$trace" --listen "127.0.0.1:$port" 2>"$log" >/dev/null &
server=$!
until grep -q 'serving on' "$log"; do
    if ! kill -0 "$server" 2>/dev/null; then cat "$log"; exit 1; fi
    sleep 0.2
done
ready=$(date +%s.%N)
grep -v 'serving on' "$log" | tr '\r' '\n' | tail -1
printf 'index built in %.1f s, resident then: %s\n' "$(echo "$ready - $start" | bc)" \
    "$(grep VmRSS "/proc/$(pgrep -P "$server")/status" | tr -s ' ' | cut -d' ' -f2-)"

url=http://127.0.0.1:$port
ask() {
    local first second
    first=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$url$1")
    second=$(curl -s -o /dev/null -w '%{time_total}' "$url$1")
    printf '%-70s %s s, again %s s\n' "$1" "$first" "$second"
}
summary=$(curl -s "$url/api/summary")
bucket=$(echo "$summary" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bucket_ns"])')
# A time on the index's bucket edges, half way through the run.
edge=$(echo "$summary" | python3 -c 'import json,sys; s=json.load(sys.stdin); b=s["bucket_ns"]; print(s["duration_ns"] // 2 // b * b / 1e9)')
ask /api/summary
ask '/api/timeline?points=800'
ask '/api/timeline?points=800&thread=1'
ask '/api/sites?sort=allocated_bytes&limit=50'
ask '/api/sites?at=peak&sort=live_bytes&limit=50'
ask "/api/sites?at=$edge&func=workload"
ask '/api/site/0'
ask '/api/flame?what=live&at=peak'
ask '/api/flame?what=allocated'
ask "/api/diff?from=$edge&to=peak"
ask '/api/sites?at=1.2345'
# Size and lifetime bounds on the index's edges (/api/summary's index_edges), then off them.
ask '/api/sites?size_min=1024'
ask '/api/timeline?points=800&life_min=1000000'
ask '/api/flame?what=live&at=peak&size_max=64'
ask '/api/timeline?points=800&life=temporary'
ask '/api/sites?size_min=1000'
ask '/api/sites?life_min=999999'
ask '/api/export/pprof?at=peak'
kill "$(pgrep -P "$server")"
wait "$server" 2>/dev/null || true
echo "max RSS: $(( $(tail -1 "$timing") / 1024 )) MiB"
