#!/usr/bin/env bash
# Soak: does retention keep a busy node's disk use bounded? (make bench-soak; not part of
# cargo test or CI.)
#
#   scripts/bench-soak.sh                 (DURATION=60 for a quick run)
#
# Builds narad in release, starts one node on a fresh data directory with 1 MiB segments,
# creates a topic of PARTITIONS partitions with retention_bytes 4 MiB and a long retention_ms
# (so only the size limit acts), and loads it with `narad bench` (CLIENTS closed-loop clients,
# PAYLOAD-byte single-message produces) for DURATION seconds. Every EVERY seconds
# scripts/soak_sample.py records each partition's bytes and segment files as the filesystem
# shows them (and their peak from a look every 0.5 s in between), the WAL directory's bytes, the
# server's VmRSS and the produced msg/s, into a CSV; scripts/soak_chart.py then writes the chart
# (docs/soak.svg), the figures (docs/soak.md, with the retention passes found in the node's log;
# its "## Notes" section is kept across reruns) and the CSV beside them (docs/soak.csv).
#
# Exits non-zero if a bound is broken: fewer than 5 x retention_bytes x partitions bytes written
# to the partition logs, or a partition seen holding more than retention_bytes + 2 segments on
# disk. Stops what it started by PID; every wait is bounded.
#
# Knobs (environment): DURATION (s, 600), CLIENTS (64), PARTITIONS (4), PAYLOAD (256),
# SEGMENT_BYTES (1048576), RETENTION_BYTES (4194304), RETENTION_MS (86400000), EVERY (5),
# BENCH_DIR (where the data lives, /var/tmp), OUT (docs/soak.md; the SVG and CSV go beside it),
# NARAD_PORT (7962).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DURATION="${DURATION:-600}"
CLIENTS="${CLIENTS:-64}"
PARTITIONS="${PARTITIONS:-4}"
PAYLOAD="${PAYLOAD:-256}"
SEGMENT_BYTES="${SEGMENT_BYTES:-1048576}"
RETENTION_BYTES="${RETENTION_BYTES:-4194304}"
RETENTION_MS="${RETENTION_MS:-86400000}"
EVERY="${EVERY:-5}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
OUT="${OUT:-docs/soak.md}"
NARAD_PORT="${NARAD_PORT:-7962}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NARAD="$TARGET_DIR/release/narad"
URL="http://127.0.0.1:$NARAD_PORT"
TOPIC=soak
COMMAND="scripts/bench-soak.sh (DURATION=$DURATION CLIENTS=$CLIENTS PARTITIONS=$PARTITIONS)"

log() { printf '[bench-soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

command -v python3 >/dev/null || { log "python3 is needed"; exit 2; }
command -v curl >/dev/null || { log "curl is needed"; exit 2; }
log "building narad (release)"
cargo build --release -q -p narad

WORK="$(mktemp -d "$BENCH_DIR/narad-soak.XXXXXX")"
# shellcheck source=scripts/bench-lib.sh
source "$ROOT/scripts/bench-lib.sh"

RUST_LOG=info "$NARAD" serve --http "127.0.0.1:$NARAD_PORT" --data-dir "$WORK/data" \
    --partition-segment-bytes "$SEGMENT_BYTES" 2>"$WORK/narad.log" &
NARAD_PID=$!
PIDS+=("$NARAD_PID")
for _ in $(seq 300); do curl -fsS "$URL/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "$URL/readyz" >/dev/null || { log "narad did not become ready"; cat "$WORK/narad.log"; exit 1; }
curl -fsS -XPOST "$URL/v1/topics" -d "{\"name\":\"$TOPIC\",\"partitions\":$PARTITIONS,\
\"retention_ms\":$RETENTION_MS,\"retention_bytes\":$RETENTION_BYTES}" >/dev/null
log "narad pid $NARAD_PID, data in $WORK/data; $CLIENTS clients for $DURATION s"

"$NARAD" bench --url "$URL" --topic "$TOPIC" --server-pid "$NARAD_PID" --concurrency "$CLIENTS" \
    --payload "$PAYLOAD" --warmup 1s --duration "${DURATION}s" --json >"$WORK/bench.json" \
    2>"$WORK/bench.log" &
BENCH_PID=$!
PIDS+=("$BENCH_PID")
python3 scripts/soak_sample.py "$WORK/data" "$URL" "$NARAD_PID" "$BENCH_PID" "$PARTITIONS" \
    "$EVERY" "$WORK/soak.csv" &
SAMPLER_PID=$!
PIDS+=("$SAMPLER_PID")

bench_status=0
wait "$BENCH_PID" || bench_status=$?
wait "$SAMPLER_PID" || { log "the sampler failed"; exit 1; }
if ((bench_status)); then
    log "narad bench failed ($bench_status):"; cat "$WORK/bench.log" >&2; exit 1
fi
kill -0 "$NARAD_PID" 2>/dev/null || { log "narad died:"; tail -50 "$WORK/narad.log" >&2; exit 1; }
log "load done: $(cat "$WORK/bench.json")"
kill -TERM "$NARAD_PID"
for _ in $(seq 300); do kill -0 "$NARAD_PID" 2>/dev/null || break; sleep 0.1; done
narad_status=0
wait "$NARAD_PID" || narad_status=$?
log "narad exited with $narad_status after SIGTERM"

cat >"$WORK/settings.json" <<EOF
{"partitions": $PARTITIONS, "clients": $CLIENTS, "payload": $PAYLOAD, "duration": $DURATION,
 "segment_bytes": $SEGMENT_BYTES, "retention_bytes": $RETENTION_BYTES,
 "retention_ms": $RETENTION_MS, "every": $EVERY}
EOF
{
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p') ($(nproc) cores)"
    echo "kernel: $(uname -srm)"
    echo "filesystem of the data: $(df -T "$WORK" | awk 'NR==2{print $2" on "$1}')"
    echo "narad: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core runtime-tokio || echo '+dirty')"
    echo "narad exit status after SIGTERM: $narad_status"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$WORK/machine.txt"
mkdir -p "$(dirname "$OUT")"
cp "$WORK/soak.csv" "${OUT%.md}.csv"
status=0
python3 scripts/soak_chart.py "$WORK/soak.csv" "$WORK/settings.json" "$WORK/bench.json" \
    "$WORK/machine.txt" "$WORK/narad.log" "${OUT%.md}.svg" "$OUT" "$COMMAND" || status=$?
log "wrote $OUT, ${OUT%.md}.svg and ${OUT%.md}.csv"
if ((narad_status)); then log "narad did not exit cleanly"; status=1; fi
exit "$status"
