#!/usr/bin/env bash
# Interleaved A/B of two narad builds on one produce shape, for "within N % of before" checks on
# a noisy shared machine: runs alternate (B A A B B A A B ...), each on a fresh data directory,
# all driven by the same `narad bench` client, and the means of each side are compared.
#
#   scripts/bench-ab.sh BEFORE_BINARY AFTER_BINARY [CLIENT_BINARY]
#
# Knobs (environment): CLIENTS (256), DURATION (5s per run), PAIRS (4: 2 x PAIRS runs),
# EXTRA (more `narad bench` flags, e.g. "--batch 100"), PORT (7960), BENCH_DIR (/var/tmp).
# Prints one line per run (msg/s, server CPU us/msg, p99 ms) and the two means with their ratio.
set -euo pipefail

BEFORE="${1:?usage: scripts/bench-ab.sh BEFORE_BINARY AFTER_BINARY [CLIENT_BINARY]}"
AFTER="${2:?usage: scripts/bench-ab.sh BEFORE_BINARY AFTER_BINARY [CLIENT_BINARY]}"
CLIENT="${3:-$AFTER}"
CLIENTS="${CLIENTS:-256}"
DURATION="${DURATION:-5s}"
PAIRS="${PAIRS:-4}"
EXTRA="${EXTRA:-}"
PORT="${PORT:-7960}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
RESULTS="$(mktemp)"
SERVER=""
trap 'rm -f "$RESULTS"; [[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null; true' EXIT

run() { # run LABEL BINARY: one bench run against a fresh server
    local dir pid
    dir="$(mktemp -d "$BENCH_DIR/narad-ab.XXXXXX")"
    "$2" serve --http "127.0.0.1:$PORT" --data-dir "$dir/data" 2>"$dir/log" &
    pid=$!
    SERVER="$pid"
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    # shellcheck disable=SC2086 # EXTRA is a list of flags
    "$CLIENT" bench --url "http://127.0.0.1:$PORT" --server-pid "$pid" --warmup 1s --json \
        --concurrency "$CLIENTS" --duration "$DURATION" $EXTRA |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], d["msgs_per_sec"], d["server_cpu_us_per_msg"], d["p99_ms"])' "$1" |
        tee -a "$RESULTS"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    SERVER=""
    rm -rf "$dir"
}

for _ in $(seq "$PAIRS"); do
    run before "$BEFORE"; run after "$AFTER"; run after "$AFTER"; run before "$BEFORE"
done
python3 - "$RESULTS" "$CLIENTS" "$EXTRA" <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1])]
mean = lambda side, i: sum(float(r[i]) for r in rows if r[0] == side) / sum(r[0] == side for r in rows)
for name, i in (("msg/s", 1), ("server CPU us/msg", 2), ("p99 ms", 3)):
    b, a = mean("before", i), mean("after", i)
    print(f"clients {sys.argv[2]} {sys.argv[3]}: {name}: before {b:.2f}, after {a:.2f}, after/before {a / b:.3f}")
EOF
