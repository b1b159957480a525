#!/usr/bin/env bash
# Narad side by side with Redis (appendfsync always) and Narad's own HTTP ceiling, in one run.
#
#   scripts/bench-peers.sh            (or: make bench-peers)
#
# Installs what it lacks from Debian (redis-server, redis-tools, wrk, nghttp2-client), builds
# narad in release, starts each system on 127.0.0.1 with durable acknowledgements and its own
# temporary directory, and runs the same load shape (256-byte messages, closed-loop clients) at
# 1, 16, 64 and 256 clients:
#   - Narad: POST /v1/topics/bench/produce (narad bench; 202 = fsynced in the WAL)
#   - Narad over HTTP/2 (h2c, prior knowledge), at 16 clients and more: the same produce with the
#     same number of requests in flight, multiplexed as 16 streams on each of C/16 connections
#     (h2load; sized to run ~DURATION s after a 1.5 s calibration run that is also its warm-up)
#   - Redis: XADD s * f <256 B> (redis-benchmark; appendonly yes, appendfsync always)
#   - Narad GET /healthz: the HTTP ceiling of the same server, with the same client as produce
# Each client level runs two rounds in A B B A order: fsync probe, Narad, Narad h2c, Redis
# (round 1), then /healthz, then fsync probe, Redis, Narad h2c, Narad (round 2); a disk throttle
# window or an order effect shows as a disagreement between the rounds. For each produce run it
# records the server's CPU per message (Narad: narad bench --server-pid; Narad h2c and Redis:
# utime+stime of the server from /proc/PID/stat around the measured h2load / redis-benchmark run,
# not its calibration) and the flush requests completed by the block device under the data
# (/sys/block/DEV/stat, field 16; the whole disk, so anything else that flushes it counts too),
# per message of that run.
# Then batch produce (100 x 256 B, 64 clients), wrk against /healthz, and produce -> visible
# latency at 64 clients over VISIBLE_DURATION. The serialized write+fdatasync probe before every
# round tracks the disk's speed, which drifts (the host can throttle it): compare the ratios of
# one round. Writes the tables, an SVG chart and the machine's description to OUT (with
# OUT-throughput.svg and OUT-results.jsonl beside it). Stops what it started by PID.
# Every wait is bounded; the whole run takes about 6 minutes (more while the disk is throttled:
# up to 90 s + REST per client level).
#
# Knobs (environment): DURATION (s per run, 5), VISIBLE_DURATION (s, 60), CLIENTS ("1 16 64 256"),
# BENCH_DIR (where the data lives; must be on the disk you want to measure, default /var/tmp),
# OUT (docs/benchmarks.md; its directory is created), MICRO=1 (also run the core's divan
# microbenchmarks into the doc), MICRO_FILE (a saved `cargo bench -p narad-core` output instead),
# FSYNC_MIN (probe rate below which we wait for the disk to recover, 2000/s; waits ≤ 90 s, then
# REST more seconds, 10), NARAD_PORT (7952), REDIS_PORT (7953).
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
command -v h2load >/dev/null || need+=(nghttp2-client)
command -v python3 >/dev/null || need+=(python3)
command -v curl >/dev/null || need+=(curl)
command -v free >/dev/null || need+=(procps)
if ((${#need[@]})); then
    log "installing ${need[*]} from Debian"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p "$(dirname "$OUT")" # fail now, not after the run, if OUT cannot be written
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

# --- the block device under the data, and its flush counter ------------------------------------
# Finds the disk that holds DIR: /sys/dev/block/MAJ:MIN of its filesystem (or of the block device
# `df` names, for btrfs and the like), a partition's parent disk, the one device under a
# device-mapper stack. Prints one JSON object: {"name", "stat", "write_cache"} or {"why"}.
flush_device() {
    python3 - "$1" <<'PY'
import json, os, stat, subprocess, sys

def device(d):
    dev = os.stat(d).st_dev
    path = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if os.path.exists(path):
        return os.path.realpath(path), None
    df = subprocess.run(["df", "--output=source,fstype", d], capture_output=True, text=True)
    source, fstype = (df.stdout.splitlines()[1:2] or ["? ?"])[0].split()[:2]
    if source.startswith("/dev/") and os.path.exists(source) \
            and stat.S_ISBLK(os.stat(source).st_mode):
        rdev = os.stat(source).st_rdev
        path = f"/sys/dev/block/{os.major(rdev)}:{os.minor(rdev)}"
        if os.path.exists(path):
            return os.path.realpath(path), None
    return None, f"the data is on {fstype} ({source}), not on a block device this host can see"

path, why = device(sys.argv[1])
for _ in range(8):  # partition -> its disk; a stack with one device under it -> that device
    if path is None:
        break
    if os.path.exists(os.path.join(path, "partition")):
        path = os.path.dirname(path)
        continue
    slaves = os.path.join(path, "slaves")
    under = os.listdir(slaves) if os.path.isdir(slaves) else []
    if len(under) != 1:
        break
    path = os.path.realpath(os.path.join("/sys/class/block", under[0]))
if path is not None:
    name = os.path.basename(path)
    stat_file = f"/sys/block/{name}/stat"
    if not os.path.exists(stat_file):
        stat_file = os.path.join(path, "stat")
    try:
        fields = open(stat_file).read().split()
    except OSError as e:
        fields, why = [], f"cannot read {stat_file}: {e.strerror}"
    if fields and len(fields) < 16:
        why = (f"{stat_file} has {len(fields)} fields: no flush counter before Linux 5.5")
    if why is None:
        try:
            cache = open(os.path.join(path, "queue", "write_cache")).read().strip()
        except OSError:
            cache = None
        print(json.dumps({"name": name, "stat": stat_file, "write_cache": cache}))
        sys.exit()
print(json.dumps({"why": why}))
PY
}

device_flushes() { # flush requests completed by the data's disk so far, or null
    if [[ -n "$FLUSH_STAT" ]]; then awk '{print $16}' "$FLUSH_STAT"; else echo null; fi
}

cpu_ticks() { # cpu_ticks PID: utime+stime of the process (all its threads) in clock ticks, or null
    { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null || true; } |
        awk '{print $12 + $13; found = 1} END {if (!found) print "null"}'
}

accepted() { # narad_records_accepted_total of the node, or null
    { curl -fsS --max-time 5 "http://127.0.0.1:$NARAD_PORT/metrics" 2>/dev/null || true; } |
        awk '$1 == "narad_records_accepted_total" {print $2; found = 1} END {if (!found) print "null"}'
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
DEVICE="$(flush_device "$WORK")"
FLUSH_STAT="$(python3 -c 'import json,sys; print(json.load(sys.stdin).get("stat") or "")' <<<"$DEVICE")"
CLK_TCK="$(getconf CLK_TCK)"
if [[ -n "$FLUSH_STAT" ]]; then
    log "device flushes from $FLUSH_STAT (field 16)"
else
    log "no device flush counter: $DEVICE"
fi

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

narad_bench() { # narad_bench KEY ARGS...: narad bench's JSON, plus the disk's flushes per message
    # The device counter and the accepted records are read around the whole narad bench process
    # (warm-up included), so both count the same messages.
    local key="$1" out flushes0 flushes1 accepted0 accepted1; shift
    flushes0="$(device_flushes)"; accepted0="$(accepted)"
    out="$("$NARAD" bench --url "http://127.0.0.1:$NARAD_PORT" --server-pid "$NARAD_PID" \
        --warmup 1s --json "$@")" || log "$key: narad bench failed"
    flushes1="$(device_flushes)"; accepted1="$(accepted)"
    record "$key" "$(python3 - "$out" "$flushes0" "$flushes1" "$accepted0" "$accepted1" <<'PY'
import json, sys
try:
    result = json.loads(sys.argv[1])
except ValueError:
    result = {"msgs_per_sec": None, "error": "narad bench gave no result"}
f0, f1, a0, a1 = (json.loads(x) for x in sys.argv[2:6])
msgs = None if a0 is None or a1 is None else a1 - a0
flushes = None if f0 is None or f1 is None else f1 - f0
result["device_flushes"] = flushes
result["device_msgs"] = msgs
result["device_flushes_per_msg"] = (round(flushes / msgs, 4)
                                    if flushes is not None and msgs else None)
print(json.dumps(result))
PY
)"
}

redis_bench() { # redis_bench KEY CLIENTS: XADD of a 256-byte field, sized to run ~DURATION seconds
    local key="$1" clients="$2" value rate n csv cpu0 cpu1 flushes0 flushes1 t0 t1
    value="$(head -c 256 /dev/zero | tr '\0' x)"
    # Calibrate (also the warm-up): the rate over 1.5 s, from redis-benchmark's progress line.
    rate="$( (timeout -s INT 1.5 redis-benchmark -p "$REDIS_PORT" -c "$clients" -n 100000000 -q \
        XADD s '*' f "$value" 2>/dev/null || true) | tr '\r' '\n' |
        { grep -o 'rps=[0-9.]* (overall: [0-9.]*' || true; } | tail -1 | grep -o '[0-9.]*$' || true)"
    n="$(python3 -c "print(max(1000, int(float('${rate:-1000}') * $DURATION)))")"
    # The measured run: redis-server's CPU and the disk's flushes right around it.
    cpu0="$(cpu_ticks "$REDIS_PID")"; flushes0="$(device_flushes)"; t0="$(date +%s.%N)"
    csv="$(timeout $((DURATION * 4 + 20)) redis-benchmark -p "$REDIS_PORT" -c "$clients" -n "$n" \
        --csv XADD s '*' f "$value" 2>/dev/null | tail -1 || true)"
    cpu1="$(cpu_ticks "$REDIS_PID")"; flushes1="$(device_flushes)"; t1="$(date +%s.%N)"
    record "$key" "$(python3 - "$csv" "$n" "$cpu0" "$cpu1" "$CLK_TCK" "$flushes0" "$flushes1" \
        "$t0" "$t1" <<'PY'
import csv, json, sys
row = next(csv.reader([sys.argv[1]]), [])
n = int(sys.argv[2])
c0, c1 = json.loads(sys.argv[3]), json.loads(sys.argv[4])
cpu_s = None if c0 is None or c1 is None else (c1 - c0) / float(sys.argv[5])
f0, f1 = json.loads(sys.argv[6]), json.loads(sys.argv[7])
seconds = float(sys.argv[9]) - float(sys.argv[8])
flushes = None if f0 is None or f1 is None else f1 - f0
try:
    result = {"msgs_per_sec": float(row[1]), "p50_ms": float(row[4]), "p99_ms": float(row[6])}
except (IndexError, ValueError):
    result = {"msgs_per_sec": None, "error": "redis-benchmark gave no result"}
result.update({
    "requests": n, "seconds": round(seconds, 3),
    "server_cpu_s": None if cpu_s is None else round(cpu_s, 3),
    "server_cpu_pct": None if cpu_s is None or seconds <= 0 else round(100 * cpu_s / seconds, 1),
    "server_cpu_us_per_msg": (round(cpu_s * 1e6 / n, 2)
                              if cpu_s is not None and result["msgs_per_sec"] else None),
    "device_flushes": flushes,
    "device_flushes_per_msg": (round(flushes / n, 4)
                               if flushes is not None and result["msgs_per_sec"] else None),
})
print(json.dumps(result))
PY
)"
    redis-cli -p "$REDIS_PORT" del s >/dev/null
}

h2_bench() { # h2_bench KEY CLIENTS: Narad produce over HTTP/2 (h2c), sized to run ~DURATION s
    # CLIENTS requests in flight as max(1, CLIENTS/16) connections x 16 streams, driven by h2load.
    local key="$1" clients="$2" conns rate n out cpu0 cpu1 flushes0 flushes1 accepted0 accepted1
    conns=$((clients / 16 > 0 ? clients / 16 : 1))
    local load=(-c "$conns" -m 16 -d "$WORK/payload" -H 'content-type: application/octet-stream'
        "http://127.0.0.1:$NARAD_PORT/v1/topics/bench/produce")
    # Calibrate (also the warm-up): the rate over 1.5 s, from h2load's duration mode.
    rate="$( (timeout 20 h2load -D 1500ms "${load[@]}" 2>/dev/null || true) |
        sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p')"
    n="$(python3 -c "print(max(1000, int(float('${rate:-1000}') * $DURATION)))")"
    # The measured run: narad's CPU, the disk's flushes and the records accepted right around it.
    cpu0="$(cpu_ticks "$NARAD_PID")"; flushes0="$(device_flushes)"; accepted0="$(accepted)"
    out="$(timeout $((DURATION * 4 + 20)) h2load -n "$n" "${load[@]}" 2>&1 || true)"
    cpu1="$(cpu_ticks "$NARAD_PID")"; flushes1="$(device_flushes)"; accepted1="$(accepted)"
    record "$key" "$(python3 - "$out" "$n" "$conns" "$cpu0" "$cpu1" "$CLK_TCK" "$flushes0" \
        "$flushes1" "$accepted0" "$accepted1" <<'PY'
import json, re, sys
out, n, conns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c0, c1, f0, f1, a0, a1 = (json.loads(sys.argv[i]) for i in (4, 5, 7, 8, 9, 10))
cpu_s = None if c0 is None or c1 is None else (c1 - c0) / float(sys.argv[6])
flushes = None if f0 is None or f1 is None else f1 - f0
msgs = None if a0 is None or a1 is None else a1 - a0

def ms(text):  # one of h2load's durations (789us, 4.56ms, 1.23s) in milliseconds
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)] if m else None

finished = re.search(r"^finished in ([0-9.]+(?:us|ms|s)),", out, re.M)
requests = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                     r"(\d+) failed, (\d+) errored, (\d+) timeout", out, re.M)
codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
latency = re.search(r"^time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
seconds = ms(finished.group(1)) / 1e3 if finished else None
result = {"client": "h2load", "connections": conns, "streams_per_connection": 16,
          "requests": n}
if not (seconds and requests and codes):
    last = [line for line in out.splitlines() if line.strip()][-1:]
    result.update({"msgs_per_sec": None,
                   "error": "h2load gave no result" + (f": {last[0]}" if last else "")})
else:
    total, _, done, _, failed, errored, timeout = (int(x) for x in requests.groups())
    ok = int(codes.group(1))
    result.update({
        "msgs_per_sec": round(ok / seconds, 1), "seconds": round(seconds, 3), "ok_2xx": ok,
        # every planned request without a 2xx: non-2xx answers, failed, errored, timed out
        "errors": total - ok, "failed": failed, "errored": errored, "timeout": timeout,
        "non_2xx": sum(int(x) for x in codes.groups()[1:]),
        # h2load reports min / max / mean / sd per request, no percentiles
        "min_ms": ms(latency.group(1)) if latency and ok else None,
        "max_ms": ms(latency.group(2)) if latency and ok else None,
        "mean_ms": ms(latency.group(3)) if latency and ok else None,
        "server_cpu_s": None if cpu_s is None else round(cpu_s, 3),
        "server_cpu_pct": None if cpu_s is None else round(100 * cpu_s / seconds, 1),
        "server_cpu_us_per_msg": round(cpu_s * 1e6 / ok, 2) if cpu_s is not None and ok else None,
    })
result.update({
    "device_flushes": flushes, "device_msgs": msgs,
    "device_flushes_per_msg": round(flushes / msgs, 4) if flushes is not None and msgs else None,
})
print(json.dumps(result))
PY
)"
}

# --- the runs ----------------------------------------------------------------------------------
: >"$RESULTS"
head -c 256 /dev/zero | tr '\0' x >"$WORK/payload" # h2load's request body
record "probe-start" "$(probe 2s)"
record "probe-start-overwrite" "$("$NARAD" bench --fsync-probe "$WORK" --duration 2s --probe-overwrite --json)"
record "device" "$DEVICE"
for c in $CLIENTS; do
    wait_disk
    # A B B A: round 1 runs Narad first, round 2 Redis first, /healthz between them.
    # Narad over h2c (16 streams per connection) only from 16 clients up.
    h2=0; h2_note=""
    if ((c >= 16)); then h2=1; h2_note=", narad produce h2c"; fi
    log "$c clients, round 1: fsync probe, narad produce$h2_note, redis XADD; then narad /healthz"
    record "probe-$c-r1" "$(probe 2s)"
    narad_bench "narad-$c-r1" --concurrency "$c" --duration "${DURATION}s"
    if ((h2)); then h2_bench "narad-h2-$c-r1" "$c"; fi
    redis_bench "redis-$c-r1" "$c"
    narad_bench "healthz-$c" --healthz --concurrency "$c" --duration "${DURATION}s"
    log "$c clients, round 2: fsync probe, redis XADD$h2_note, narad produce"
    record "probe-$c-r2" "$(probe 2s)"
    redis_bench "redis-$c-r2" "$c"
    if ((h2)); then h2_bench "narad-h2-$c-r2" "$c"; fi
    narad_bench "narad-$c-r2" --concurrency "$c" --duration "${DURATION}s"
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
    echo "device flushes: $(python3 -c 'import json, sys
d = json.load(sys.stdin)
print("%s field 16, write cache: %s" % (d["stat"], d.get("write_cache")) if d.get("stat")
      else "unavailable: %s" % d.get("why"))' <<<"$DEVICE")"
    echo "redis: $(redis-server --version | cut -d' ' -f3)"
    echo "h2load: $(h2load --version | awk '{print $2}')"
    echo "narad: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core runtime-tokio || echo '+dirty')"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$MACHINE"
python3 "$ROOT/scripts/bench_report.py" "$RESULTS" "$MACHINE" "$MICRO_FILE" "$OUT" "$COMMAND" \
    "$CLIENTS"
log "wrote $OUT, ${OUT%.md}-throughput.svg and ${OUT%.md}-results.jsonl"
