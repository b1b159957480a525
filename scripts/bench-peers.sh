#!/usr/bin/env bash
# Narad side by side with Redis (appendfsync always) and Narad's own HTTP ceiling, in one run.
#
#   scripts/bench-peers.sh            (or: make bench-peers)
#
# Installs what it lacks from Debian (redis-server, wrk), builds narad in release, starts each
# system on 127.0.0.1 with durable acknowledgements and its own temporary directory, and runs the
# same load shape (256-byte messages, closed-loop clients) at 1, 16, 64 and 256 clients:
#   - Narad: POST /v1/topics/bench/produce (narad bench; 202 = fsynced in the WAL)
#   - Redis: XADD s * f <256 B> (redis-benchmark; appendonly yes, appendfsync always)
#   - Narad GET /healthz: the HTTP ceiling of the same server, with the same client
# then batch produce (100 x 256 B, 64 clients), produce -> visible latency at 64 clients over
# VISIBLE_DURATION, and a serialized write+fdatasync probe before every client level (the disk's
# speed drifts and the host can throttle it: compare the ratios of one run). Writes the table, an
# SVG chart and the machine's description to docs/benchmarks.md. Stops what it started by PID.
# Every wait is bounded; the whole run takes about 5 minutes.
#
# Knobs (environment): DURATION (s per run, 5), VISIBLE_DURATION (s, 60), CLIENTS ("1 16 64 256"),
# BENCH_DIR (where the data lives; must be on the disk you want to measure, default /var/tmp),
# OUT (docs/benchmarks.md), MICRO=1 (also run the core's divan microbenchmarks into the doc),
# FSYNC_MIN (probe rate below which we wait for the disk to recover, 2000/s; waits ≤ 90 s, then
# REST more seconds, 10).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION="${DURATION:-5}"
VISIBLE_DURATION="${VISIBLE_DURATION:-60}"
CLIENTS="${CLIENTS:-1 16 64 256}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
OUT="${OUT:-docs/benchmarks.md}"
FSYNC_MIN="${FSYNC_MIN:-2000}"
NARAD_PORT="${NARAD_PORT:-7952}"
REDIS_PORT="${REDIS_PORT:-7953}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NARAD="$TARGET_DIR/release/narad"
COMMAND="scripts/bench-peers.sh${*:+ $*} (DURATION=$DURATION VISIBLE_DURATION=$VISIBLE_DURATION CLIENTS=\"$CLIENTS\")"

log() { printf '[bench-peers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- what we need -------------------------------------------------------------------------------
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v wrk >/dev/null || need+=(wrk)
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
    log "installing ${need[*]} from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
log "building narad (release)"
cargo build --release -q -p narad

# --- what we start, and how it stops -----------------------------------------------------------
WORK="$(mktemp -d "$BENCH_DIR/narad-bench.XXXXXX")"
RESULTS="$WORK/results.jsonl"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"

wait_for() { # wait_for WHAT CMD...: retries CMD for up to 10 s
    local what="$1"; shift
    for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    log "$what did not come up"; return 1
}

mkdir -p "$WORK/narad" "$WORK/redis"
"$NARAD" serve --http "127.0.0.1:$NARAD_PORT" --data-dir "$WORK/narad" 2>"$WORK/narad.log" &
NARAD_PID=$!
PIDS+=("$NARAD_PID")
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" --appendonly yes \
    --appendfsync always --save '' --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
wait_for narad curl -fsS "http://127.0.0.1:$NARAD_PORT/readyz"
wait_for redis redis-cli -p "$REDIS_PORT" ping
log "narad pid $NARAD_PID, redis pid $REDIS_PID, data in $WORK"

record() { # record KEY JSON: one result line
    printf '{"key":"%s","result":%s}\n' "$1" "$2" >>"$RESULTS"
}

probe() { # serialized write(256 B)+fdatasync rate on the benchmark disk, as JSON
    "$NARAD" bench --fsync-probe "$WORK" --duration "$1" --json
}

wait_disk() { # the host may throttle the disk for a while: wait (≤ 90 s) until it recovers
    local rate waited=0
    for _ in $(seq 18); do
        rate="$(probe 0.3s | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["ops_per_sec"]))')"
        if ((rate >= FSYNC_MIN)); then
            # Just recovered: give the throttle's budget a moment to refill before measuring.
            if ((waited)); then sleep "${REST:-10}"; fi
            return 0
        fi
        waited=1
        log "disk throttled ($rate fsync/s < $FSYNC_MIN): waiting"
        sleep 5
    done
    log "disk still throttled after 90 s; measuring anyway (see the probe column)"
}

narad_bench() { # narad_bench KEY ARGS...
    local key="$1"; shift
    record "$key" "$("$NARAD" bench --url "http://127.0.0.1:$NARAD_PORT" --server-pid "$NARAD_PID" \
        --warmup 1s --json "$@")"
}

redis_bench() { # redis_bench CLIENTS: XADD of a 256-byte field, sized to run ~DURATION seconds
    local clients="$1" value rate n csv
    value="$(head -c 256 /dev/zero | tr '\0' x)"
    # Calibrate (also the warm-up): the rate over 1.5 s, from redis-benchmark's progress line.
    rate="$( (timeout -s INT 1.5 redis-benchmark -p "$REDIS_PORT" -c "$clients" -n 100000000 -q \
        XADD s '*' f "$value" 2>/dev/null || true) | tr '\r' '\n' |
        { grep -o 'rps=[0-9.]* (overall: [0-9.]*' || true; } | tail -1 | grep -o '[0-9.]*$' || true)"
    n="$(python3 -c "print(max(1000, int(float('${rate:-1000}') * $DURATION)))")"
    csv="$(timeout $((DURATION * 4 + 20)) redis-benchmark -p "$REDIS_PORT" -c "$clients" -n "$n" \
        --csv XADD s '*' f "$value" 2>/dev/null | tail -1 || true)"
    record "redis-$clients" "$(python3 - "$csv" "$n" <<'PY'
import csv, json, sys
row = next(csv.reader([sys.argv[1]]), [])
try:
    print(json.dumps({"msgs_per_sec": float(row[1]), "p50_ms": float(row[4]),
                      "p99_ms": float(row[6]), "requests": int(sys.argv[2])}))
except (IndexError, ValueError):
    print(json.dumps({"msgs_per_sec": None, "error": "redis-benchmark gave no result"}))
PY
)"
    redis-cli -p "$REDIS_PORT" del s >/dev/null
}

# --- the runs ----------------------------------------------------------------------------------
: >"$RESULTS"
record "probe-start" "$(probe 2s)"
record "probe-start-overwrite" "$("$NARAD" bench --fsync-probe "$WORK" --duration 2s --probe-overwrite --json)"
for c in $CLIENTS; do
    wait_disk
    log "$c clients: fsync probe, narad produce, redis XADD, narad /healthz"
    record "probe-$c" "$(probe 2s)"
    narad_bench "narad-$c" --concurrency "$c" --duration "${DURATION}s"
    redis_bench "$c"
    narad_bench "healthz-$c" --healthz --concurrency "$c" --duration "${DURATION}s"
done
wait_disk
log "batch produce: 100 x 256 B per request, 64 clients"
record "probe-batch" "$(probe 2s)"
narad_bench "batch-64" --batch 100 --concurrency 64 --duration "${DURATION}s"
log "wrk against /healthz, 64 connections (cross-check of the bench client)"
WRK_OUT="$(wrk -t1 -c64 -d"${DURATION}s" "http://127.0.0.1:$NARAD_PORT/healthz" 2>/dev/null || true)"
record "wrk-healthz-64" "$(printf '%s' "$WRK_OUT" | python3 -c '
import json, re, sys
m = re.search(r"Requests/sec:\s*([0-9.]+)", sys.stdin.read())
print(json.dumps({"msgs_per_sec": float(m.group(1)) if m else None}))')"
wait_disk
log "produce -> visible latency, 64 clients, ${VISIBLE_DURATION} s"
record "probe-visible" "$(probe 2s)"
narad_bench "visible-64" --visible --concurrency 64 --duration "${VISIBLE_DURATION}s"
record "probe-end" "$(probe 2s)"

MICRO_FILE="${MICRO_FILE:-$WORK/micro.txt}" # or a saved `cargo bench -p narad-core` output
if [[ "${MICRO:-0}" == 1 ]]; then
    log "core microbenchmarks (divan)"
    cargo bench -q -p narad-core --bench hot_paths 2>/dev/null >"$MICRO_FILE" || true
fi

# --- the report --------------------------------------------------------------------------------
MACHINE="$WORK/machine.txt"
{
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -srm)"
    echo "memory: $(free -h | awk '/^Mem:/{print $2}')"
    echo "filesystem of the data: $(df -T "$WORK" | awk 'NR==2{print $2" on "$1}')"
    echo "redis: $(redis-server --version | cut -d' ' -f3)"
    echo "narad: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core runtime-tokio || echo '+dirty')"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$MACHINE"
mkdir -p "$(dirname "$OUT")"
python3 "$ROOT/scripts/bench_report.py" "$RESULTS" "$MACHINE" "$MICRO_FILE" "$OUT" "$COMMAND" \
    "$CLIENTS"
log "wrote $OUT, ${OUT%.md}-throughput.svg and ${OUT%.md}-results.jsonl"
