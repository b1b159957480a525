#!/usr/bin/env bash
# A flood of wrong passwords beside an authenticated producer (issue 14's acceptance: 10,000
# wrong passwords do not slow the producer's p99 by more than 20 %, and the flooded user is
# throttled). One node with users; `narad bench` produces as `admin` (verified once, then from
# the verification cache) while scripts/auth_flood.py sends FLOOD requests with a wrong
# password for the same user over the bench's window. Runs alternate: alone, flooded, flooded,
# alone (ROUNDS times), each on a fresh data directory.
#
#   scripts/auth-flood.sh [NARAD_BINARY]
#
# Knobs: CLIENTS (64), DURATION (5s), FLOOD (10000), FLOOD_THREADS (8), ROUNDS (2), PORT (7980),
# FLOOD_METHOD (GET: listings on keep-alive connections; POST: produces whose unread bodies
# are read and dropped before each refusal), HEALTHZ (the control: as many requests without
# credentials, to tell the cost of the load from the cost of refusing passwords).
set -euo pipefail

BIN="${1:-target/release/narad}"
CLIENTS="${CLIENTS:-64}"
DURATION="${DURATION:-5s}"
FLOOD="${FLOOD:-10000}"
FLOOD_THREADS="${FLOOD_THREADS:-8}"
FLOOD_METHOD="${FLOOD_METHOD:-GET}"
ROUNDS="${ROUNDS:-2}"
PORT="${PORT:-7980}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d "${BENCH_DIR:-/var/tmp}/narad-flood.XXXXXX")"
SERVER=""
trap '[[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; true' EXIT
echo "a-long-bench-password" > "$WORK/admin-password"
url="http://127.0.0.1:$PORT"
secs="${DURATION%s}"

run() { # run alone|flooded
    local dir pid flood_pid=""
    dir="$(mktemp -d "$WORK/run.XXXXXX")"
    "$BIN" serve --http "127.0.0.1:$PORT" --data-dir "$dir/data" \
        --admin-password-file "$WORK/admin-password" 2>"$dir/log" &
    pid=$!
    SERVER="$pid"
    for _ in $(seq 300); do
        curl -fsS -u admin:a-long-bench-password "$url/v1/topics" >/dev/null 2>&1 && break
        sleep 0.1
    done
    if [[ $1 == flooded ]]; then
        # Starts with the bench's 1 s warm-up and spreads the flood over its measured window.
        python3 "$HERE/auth_flood.py" "$url" admin "$FLOOD" "$FLOOD_THREADS" "$((secs + 1))" "$FLOOD_METHOD" >"$dir/flood" &
        flood_pid=$!
    fi
    "$BIN" bench --url "$url" --user admin:a-long-bench-password --server-pid "$pid" \
        --warmup 1s --json --concurrency "$CLIENTS" --duration "$DURATION" >"$dir/bench"
    [[ -n $flood_pid ]] && wait "$flood_pid"
    python3 - "$1" "$dir/bench" "$dir/flood" "$dir/log" <<'PY' | tee -a "$WORK/results"
import json, os, sys
bench = json.load(open(sys.argv[2]))
flood = json.load(open(sys.argv[3])) if os.path.exists(sys.argv[3]) else {}
failed = open(sys.argv[4]).read().count("authentication failed: wrong password")
print(sys.argv[1], bench["msgs_per_sec"], bench["p50_ms"], bench["p99_ms"],
      json.dumps(flood.get("statuses", {}), separators=(",", ":")), failed)
PY
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    SERVER=""
}

for _ in $(seq "$ROUNDS"); do
    run alone; run flooded; run flooded; run alone
done
echo "columns: shape msg/s p50_ms p99_ms flood_statuses kdf_runs_failed(log)"
python3 - "$WORK/results" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1])]
mean = lambda shape, i: sum(float(r[i]) for r in rows if r[0] == shape) / sum(r[0] == shape for r in rows)
for name, i in (("msg/s", 1), ("p50 ms", 2), ("p99 ms", 3)):
    a, f = mean("alone", i), mean("flooded", i)
    print(f"{name}: alone {a:.2f}, flooded {f:.2f}, flooded/alone {f / a:.3f}")
PY
