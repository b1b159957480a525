#!/usr/bin/env bash
# Start-up cost of a single node at two data sizes (issue 11, docs/design.md §4.4 "Seal files").
#
#   scripts/bench-restart.sh            (or: make bench-restart)
#
# Builds narad in release, fills a data directory through the real binary (`narad bench`, batch
# produce of 16 KiB messages over 8 partitions) to each size in SIZES_GIB, and at each size
# measures, from spawning `narad serve` to its first 200 on /readyz, the wall time and what the
# process read by then (/proc/<pid>/io: `rchar`, every byte read() returned, page cache or not;
# `read_bytes`, what it made the block device read):
#   clean   SIGTERM (clean shutdown: every active segment sealed), then start
#   kill-9  a little more load (every partition's active segment changes), kill -9, then start
# each with a warm page cache and, when /proc/sys/vm/drop_caches is writable, a cold one. With
# BASELINE=/path/to/narad the same data is also started by that binary (e.g. one built before seal
# files) after a clean shutdown, for comparison. Prints a table and checks the targets: after a
# clean shutdown ready < 1 s reading < 1 % of the data bytes; after kill -9 ready < 1 s reading no
# more than the active segments; start-up time at the largest size within 1.5x of the smallest.
# Stops what it started by pid and deletes its data directory.
#
# A kill -9 start-up reads the active segments, so its time follows how full they are, not the
# size of the data: each size is filled to SIZES_GIB plus ACTIVE_MIB per partition, so that the
# active segments are equally full (half of the 64 MiB segment by default) at every size, and the
# comparison between sizes measures the data size alone. (Full active segments, the worst case,
# are ACTIVE_MIB=63.)
#
# Knobs (environment): SIZES_GIB ("1 4"), ACTIVE_MIB (32), PARTITIONS (8), PAYLOAD (16384),
# BATCH (64), CLIENTS (8), BENCH_DIR (/var/tmp: must be the disk you want to measure), PORT (7972),
# BASELINE (unset), COLD (1: also cold-cache runs when possible), REPEAT (5: starts per
# measurement; the table and the targets use the median, and show the range).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SIZES_GIB="${SIZES_GIB:-1 4}"
ACTIVE_MIB="${ACTIVE_MIB:-32}"
PARTITIONS="${PARTITIONS:-8}"
PAYLOAD="${PAYLOAD:-16384}"
BATCH="${BATCH:-64}"
CLIENTS="${CLIENTS:-8}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
PORT="${PORT:-7972}"
BASELINE="${BASELINE:-}"
COLD="${COLD:-1}"
REPEAT="${REPEAT:-5}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
NARAD="$TARGET_DIR/release/narad"
URL="http://127.0.0.1:$PORT"
GIB=$((1024 * 1024 * 1024))

log() { printf '[bench-restart %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- room, build, and cleanup ---------------------------------------------------------------
largest=$(printf '%s\n' $SIZES_GIB | sort -n | tail -1)
free_kib=$(df -Pk "$BENCH_DIR" | awk 'NR == 2 { print $4 }')
need_kib=$(((largest + 2) * 1024 * 1024))
if ((free_kib < need_kib)); then
    log "need $((need_kib / 1024 / 1024)) GiB free in $BENCH_DIR, have $((free_kib / 1024 / 1024)) GiB"
    exit 1
fi
log "building narad (release)"
cargo build --release -q -p narad

WORK="$(mktemp -d "$BENCH_DIR/narad-restart.XXXXXX")"
DATA="$WORK/data"
PID=""
cleanup() {
    if [[ -n "$PID" ]]; then
        kill -9 "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

can_drop_caches() { [[ "$COLD" == 1 ]] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; }

# Brings the data directory into the page cache, or drops the page cache.
set_cache() {
    if [[ "$1" == cold ]]; then
        can_drop_caches
    else
        find "$DATA" -type f -exec cat {} + >/dev/null
    fi
}

# --- one node ---------------------------------------------------------------------------------
# Starts `$1 serve` on the data directory; sets PID and START_NS.
spawn() {
    local bin="$1" tag="$2"
    START_NS=$(date +%s%N)
    "$bin" serve --http "127.0.0.1:$PORT" --data-dir "$DATA" 2>"$WORK/$tag.log" &
    PID=$!
}

# True if /readyz answers 200. Bash's own /dev/tcp, so that a poll costs no process and the
# time measured is the node's, not a client's start-up.
readyz_ok() {
    local status
    { exec 3<>"/dev/tcp/127.0.0.1/$PORT"; } 2>/dev/null || return 1
    printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    read -r -t 1 _ status _ <&3 || status=""
    exec 3<&-
    [[ "$status" == 200 ]]
}

# Waits (bounded) for /readyz; prints "<ms to ready> <rchar> <read_bytes>" read at that moment.
wait_ready() {
    local deadline=$(($(date +%s) + 600)) io
    until readyz_ok; do
        if ! kill -0 "$PID" 2>/dev/null || (($(date +%s) > deadline)); then
            log "the node did not become ready; its log:"
            cat "$WORK"/*.log >&2
            exit 1
        fi
        sleep 0.001
    done
    local ready_ns
    ready_ns=$(date +%s%N)
    io=$(awk '/^rchar|^read_bytes/ { printf "%s ", $2 }' "/proc/$PID/io")
    echo "$(((ready_ns - START_NS) / 1000000)) $io"
}

stop_clean() {
    kill -TERM "$PID"
    wait "$PID" || { log "narad did not exit cleanly"; exit 1; }
    PID=""
}

stop_kill9() {
    kill -9 "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
}

# Produces for `$1` (a `narad bench` duration), at most `$2` requests of BATCH x PAYLOAD bytes,
# into topic `restart` (created with PARTITIONS partitions).
load() {
    "$NARAD" bench --url "$URL" --topic restart --partitions "$PARTITIONS" --batch "$BATCH" \
        --payload "$PAYLOAD" -c "$CLIENTS" -d "$1" --warmup 0s --max-requests "$2" >/dev/null
}

# Waits (bounded) until the dispatch backlog is empty: every accepted record is in its partition.
wait_drained() {
    local deadline=$(($(date +%s) + 600))
    until curl -sf "$URL/metrics" | grep -q '^narad_dispatch_backlog 0$'; do
        (($(date +%s) > deadline)) && { log "dispatch did not drain"; exit 1; }
        sleep 0.1
    done
}

segment_bytes() {
    [[ -d "$DATA/partitions" ]] || { echo 0; return; }
    find "$DATA/partitions" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# The last (active) segment of every partition, summed.
active_bytes() {
    find "$DATA/partitions" -name '*.log' -printf '%f %s\n' | awk '
        { split($1, a, /[-.]/); p = a[1]; base = (a[2] == "log") ? 0 : a[2] + 0
          if (!(p in best) || base > best[p]) { best[p] = base; size[p] = $2 } }
        END { for (p in size) s += size[p]; printf "%.0f\n", s }'
}

# --- measurements -----------------------------------------------------------------------------
RESULTS="$WORK/results"
: >"$RESULTS"
# record <size GiB> <scenario> <cache> <data bytes> <active bytes> <ms> <rchar> <read_bytes> <log>
record() {
    local line
    line=$(grep -o 'recovered partition logs: [^=]*read' "$9" | head -1 || true)
    echo "$1|$2|$3|$4|$5|$6|$7|$8|${line#recovered partition logs: }" >>"$RESULTS"
    log "$1 GiB $2 ($3): ready in $6 ms, rchar $7, read_bytes $8; ${line:-no recovery line}"
}

measure_clean() {
    local size="$1" cache="$2" bin="${3:-$NARAD}" tag run
    tag="clean-$size-$cache-$(basename "$bin")"
    spawn "$NARAD" "pre-$tag"
    wait_ready >/dev/null
    stop_clean
    local scenario=clean
    [[ "$bin" != "$NARAD" ]] && scenario="clean, baseline"
    for run in $(seq "$REPEAT"); do
        set_cache "$cache"
        spawn "$bin" "$tag-$run"
        local out ms rchar read_bytes
        out=$(wait_ready)
        read -r ms rchar read_bytes <<<"$out"
        record "$size" "$scenario" "$cache" "$(segment_bytes)" "$(active_bytes)" "$ms" "$rchar" \
            "$read_bytes" "$WORK/$tag-$run.log"
        stop_clean
    done
}

measure_kill9() {
    local size="$1" cache="$2" tag="kill9-$1-$2" run
    for run in $(seq "$REPEAT"); do
        spawn "$NARAD" "pre-$tag-$run"
        wait_ready >/dev/null
        # About 1 MiB per partition: every active segment has commits its seal does not cover.
        load 1s $((PARTITIONS * 1024 * 1024 / (BATCH * PAYLOAD) + 1))
        wait_drained
        stop_kill9
        set_cache "$cache"
        local active
        active=$(active_bytes)
        spawn "$NARAD" "$tag-$run"
        local out ms rchar read_bytes
        out=$(wait_ready)
        read -r ms rchar read_bytes <<<"$out"
        record "$size" "kill -9" "$cache" "$(segment_bytes)" "$active" "$ms" "$rchar" \
            "$read_bytes" "$WORK/$tag-$run.log"
        stop_clean
    done
}

caches="warm"
if can_drop_caches; then caches="warm cold"; else log "cannot drop the page cache: warm runs only"; fi

for size in $(printf '%s\n' $SIZES_GIB | sort -n); do
    spawn "$NARAD" "fill-$size"
    wait_ready >/dev/null
    have=$(segment_bytes)
    want=$((size * GIB + PARTITIONS * ACTIVE_MIB * 1024 * 1024))
    if ((have < want)); then
        log "filling to $size GiB of partition data ($((have / 1024 / 1024)) MiB now)"
        fill_start=$(date +%s)
        while (($(segment_bytes) < want)); do
            load 5s $(((want - $(segment_bytes)) / (BATCH * PAYLOAD) + 1))
            wait_drained
        done
        log "filled in $(($(date +%s) - fill_start)) s: $(($(segment_bytes) / 1024 / 1024)) MiB in $(find "$DATA/partitions" -name '*.log' | wc -l) segments"
    fi
    stop_clean
    for cache in $caches; do
        measure_clean "$size" "$cache"
        measure_kill9 "$size" "$cache"
    done
    if [[ -n "$BASELINE" ]]; then
        for cache in $caches; do measure_clean "$size" "$cache" "$BASELINE"; done
    fi
done

# --- the table and the targets ----------------------------------------------------------------
# One row per (size, scenario, cache): the median start of REPEAT (its range beside it), what the
# median run read; the targets judge every run for the absolute bounds and the medians for the
# ratio between sizes.
python3 - "$RESULTS" "$REPEAT" <<'PY'
import sys
from statistics import median
runs = {}
for line in open(sys.argv[1]):
    size, scenario, cache, data, active, ms, rchar, read_bytes, log = line.rstrip("\n").split("|")
    runs.setdefault((size, scenario, cache), []).append(
        (int(ms), int(rchar), int(read_bytes), int(data), int(active), log))
mib = 1024 * 1024
print()
print(f"Each row: the median of {sys.argv[2]} starts (fastest-slowest in brackets).")
print()
print("| data | start after | cache | ready | rchar | read_bytes | rchar / data | active segments | start-up log |")
print("|---|---|---|---|---|---|---|---|---|")
for (size, scenario, cache), rs in runs.items():
    rs.sort()
    ms, rchar, read_bytes, data, active, log = rs[len(rs) // 2]
    print(f"| {data / 1024 / mib:.2f} GiB | {scenario} | {cache} | {median(r[0] for r in rs):.0f} ms "
          f"({rs[0][0]}-{rs[-1][0]}) | {rchar / mib:.1f} MiB | {read_bytes / mib:.1f} MiB | "
          f"{100 * rchar / data:.3f} % | {active / mib:.1f} MiB | {log} |")
print()
PY
failed=0
check() {
    if eval "$2"; then echo "PASS  $1"; else echo "FAIL  $1"; failed=1; fi
}
while IFS='|' read -r size scenario cache data active ms rchar read_bytes _; do
    case "$scenario" in
        clean)
            check "$size GiB clean ($cache): ready ${ms} ms < 1000 ms" "((ms < 1000))"
            check "$size GiB clean ($cache): read $rchar B < 1 % of $data B" "((rchar * 100 < data))"
            ;;
        "kill -9")
            check "$size GiB kill -9 ($cache): ready ${ms} ms < 1000 ms" "((ms < 1000))"
            # What the small files (WAL, metastore, seals) cost on top: at most 1 % of the data.
            check "$size GiB kill -9 ($cache): read $rchar B <= active segments $active B + 1 %" \
                "((rchar <= active + data / 100))"
            ;;
    esac
done <"$RESULTS"
median_ms() { # median_ms SIZE SCENARIO CACHE
    awk -F'|' -v s="$1" -v c="$2" -v k="$3" '$1 == s && $2 == c && $3 == k { print $6 }' "$RESULTS" |
        sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
smallest=$(printf '%s\n' $SIZES_GIB | sort -n | head -1)
for scenario in clean "kill -9"; do
    for cache in $caches; do
        small=$(median_ms "$smallest" "$scenario" "$cache")
        large=$(median_ms "$largest" "$scenario" "$cache")
        if [[ -z "$small" || -z "$large" ]]; then
            check "$scenario ($cache): measured at $smallest and $largest GiB" false
            continue
        fi
        check "$scenario ($cache): median ${large} ms at $largest GiB within 1.5x of ${small} ms at $smallest GiB" \
            "((large * 2 <= 3 * small))"
    done
done
exit "$failed"
