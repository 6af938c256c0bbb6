#!/usr/bin/env bash
# Benchmark of `memprof serve --listen-trace`: the cost of each update of the live index, early in
# a run and late in it (an update costs what arrived, not what came before), then the time to
# open the complete trace afresh and again from the index kept beside it.
#
#   RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release -p memprof-bench --features trace --example workload
#   cargo build --release -p memprof-cli
#   scripts/bench-live.sh churn 4000000
#   scripts/bench-live.sh --send TRACE BYTES_PER_S    # a recorded trace sent at a steady rate
#
# MEMPROF_BIN and WORKLOAD override the binaries (default target/release/memprof and
# target/release/examples/workload, or $CARGO_TARGET_DIR's).
set -euo pipefail
target=${CARGO_TARGET_DIR:-target}
bin=${MEMPROF_BIN:-$target/release/memprof}
workload=${WORKLOAD:-$target/release/examples/workload}
port=${PORT:-18281}
dir=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT

echo "load: $(uptime | sed 's/.*load average: //')"
MEMPROF_SERVE_LIVE_TIMES=1 "$bin" serve "$dir/live.mptrace" --listen-trace "127.0.0.1:$port" \
    --listen "127.0.0.1:$((port + 1))" 2>"$dir/log" >/dev/null &
server=$!
until grep -q 'serving on' "$dir/log"; do sleep 0.2; done
if [ "$1" = --send ]; then
    python3 - "$2" "$3" "$port" <<'PY'
import socket, sys, time
path, rate, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f, socket.create_connection(("127.0.0.1", port)) as s:
    start, sent = time.monotonic(), 0
    while block := f.read(rate // 10):
        s.sendall(block)
        sent += len(block)
        time.sleep(max(0.0, start + sent / rate - time.monotonic()))
PY
else
    MEMPROF_TRACE="tcp://127.0.0.1:$port" "$workload" "$@" >/dev/null
fi
until grep -q 'the trace is complete' "$dir/log"; do sleep 0.5; done
kill "$server"
wait "$server" 2>/dev/null || true
if [ -n "${LOG:-}" ]; then cp "$dir/log" "$LOG"; fi
# "memprof: live update: N events applied (T in all, P pending) from C chunks in M ms"
grep 'live update' "$dir/log" | awk '
    { n = $4; total = substr($7, 2); ms = $(NF - 1); if (n > 0) { u++; applied[u] = n; all[u] = total; t[u] = ms } }
    END {
        third = int(u / 3);
        for (part = 0; part < 2; part++) {
            from = part ? u - third + 1 : 1; to = part ? u : third;
            e = 0; m = 0; worst = 0;
            for (i = from; i <= to; i++) { e += applied[i]; m += t[i]; if (t[i] > worst) worst = t[i] }
            printf "%s third: %d updates, %.1f M events applied in all by its end, %.0f k events and %.1f ms an update on average (at most %.1f ms), %.0f ns an event\n",
                part ? "last" : "first", to - from + 1, all[to] / 1e6, e / (to - from + 1) / 1e3, m / (to - from + 1), worst, m * 1e6 / e
        }
    }'
ls -l "$dir/live.mptrace" "$dir/live.mptrace.index" | awk '{print $5, $9}'
rm "$dir/live.mptrace.index"
for attempt in afresh again; do
    start=$(date +%s.%N)
    "$bin" serve "$dir/live.mptrace" --listen "127.0.0.1:$((port + 2))" 2>"$dir/$attempt.log" >/dev/null &
    server=$!
    until grep -q 'serving on' "$dir/$attempt.log" 2>/dev/null; do sleep 0.05; done
    printf 'open %s: %.2f s (%s)\n' "$attempt" "$(echo "$(date +%s.%N) - $start" | bc)" \
        "$(grep -c 'index read from' "$dir/$attempt.log" | sed 's/0/index built/; s/1/index read/')"
    kill "$server"
    wait "$server" 2>/dev/null || true
done
ls -l "$dir/live.mptrace.index" | awk '{print "index kept:", $5, "bytes"}'
