#!/usr/bin/env bash
# The HTTP server's bounds under attack, measured (the real-process tests in
# runtime-tokio/tests/hostile_clients.rs only check that each bound holds): one release node on
# 127.0.0.1 with its default bounds; a producer (`narad bench`) measures p50/p99 and its 202s
# alone, then again while scripts/hostile_clients.py holds LORIS slow-loris connections, floods
# ~16 MiB batch produces from FLOODERS connections and sends oversized heads. Reports the node's
# peak RSS (VmHWM) and what the attackers were answered (503s, 431s). Then TLS on vs off: the
# same binary serving plain HTTP and TLS, `narad bench` at TLS_CLIENTS clients against each
# (alternating, P T T P), and the throughput ratio.
#
#   scripts/hostile-clients.sh [NARAD_BINARY]     (default target/release/narad)
#
# Knobs (environment): LORIS (2000), FLOODERS (24), CLIENTS (8, the measured producer),
# DURATION (20s per producer run), FLOOD_TOPIC (flood; a topic that does not exist floods the
# HTTP layer only: bodies are read and parsed, then answered 404, nothing reaches the WAL),
# SERVE_FLAGS (more `narad serve` flags for the attacked node), ATTACK (1; 0 skips part 1),
# TLS_COMPARE (1; 0 skips part 2), TLS_ROUNDS (2: 4 x TLS_ROUNDS runs, P T T P ...),
# TLS_CLIENTS (64), TLS_DURATION (10s), PORT (7970), BENCH_DIR (/var/tmp), QUOTA (0: bytes/s;
# non-zero turns access control on, gives every user that produce quota (`--produce-quota`),
# benches as the admin and floods as a user `flood`), HONOR_RETRY_AFTER (0; 1: the flooders wait
# out each Retry-After, as a well-behaved bulk loader does, instead of ignoring it).
# Needs python3, curl and openssl (for a throwaway self-signed cert).
set -euo pipefail

BIN="${1:-target/release/narad}"
LORIS="${LORIS:-2000}"
FLOODERS="${FLOODERS:-24}"
CLIENTS="${CLIENTS:-8}"
DURATION="${DURATION:-20s}"
FLOOD_TOPIC="${FLOOD_TOPIC:-flood}"
SERVE_FLAGS="${SERVE_FLAGS:-}"
ATTACK="${ATTACK:-1}"
TLS_COMPARE="${TLS_COMPARE:-1}"
TLS_ROUNDS="${TLS_ROUNDS:-2}"
TLS_CLIENTS="${TLS_CLIENTS:-64}"
TLS_DURATION="${TLS_DURATION:-10s}"
QUOTA="${QUOTA:-0}"
HONOR_RETRY_AFTER="${HONOR_RETRY_AFTER:-0}"
PORT="${PORT:-7970}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d "$BENCH_DIR/narad-hostile.XXXXXX")"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true # The attacker holds thousands of sockets.

start() { # start NAME PORT [serve flags...]: a fresh node; sets NODE_PID
    local name="$1" port="$2"
    shift 2
    "$BIN" serve --http "127.0.0.1:$port" --data-dir "$WORK/$name" "$@" 2>"$WORK/$name.log" &
    NODE_PID=$!
    PIDS+=("$NODE_PID")
}

wait_ready() { # wait_ready URL [curl flags...]
    local url="$1"
    shift
    for _ in $(seq 300); do
        curl -fsS "$@" "$url/readyz" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "node at $url not ready" >&2
    exit 1
}

bench() { # bench URL CLIENTS DURATION [bench flags...]: prints the JSON report
    local url="$1" clients="$2" duration="$3"
    shift 3
    "$BIN" bench --url "$url" --concurrency "$clients" --duration "$duration" --warmup 1s \
        --json "$@"
}

summary() { # summary LABEL FILE: one line from a bench JSON report
    python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]}: {d['requests']} x 202 ({d['msgs_per_sec']:.0f}/s), {d['errors']} errors "
      f"(first: {d['first_error']}), p50 {d['p50_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms, "
      f"max {d['max_ms']:.2f} ms")
EOF
}

rss_kib() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"; }

# --- 1. Producer alone, then under attack. ---
attack() {
local quota_flags=() as_admin=() curl_admin=() flood_flags=()
if [[ "$QUOTA" != 0 ]]; then
    echo "a-long-admin-password" >"$WORK/admin-password"
    quota_flags=(--produce-quota "$QUOTA" --admin-password-file "$WORK/admin-password")
    as_admin=(--user "admin:a-long-admin-password")
    curl_admin=(-u "admin:a-long-admin-password" -H "Content-Type: application/json")
    flood_flags=(--auth "flood:a-long-flood-password")
fi
[[ "$HONOR_RETRY_AFTER" == 1 ]] && flood_flags+=(--honor-retry-after)
# shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
start attack "$PORT" $SERVE_FLAGS "${quota_flags[@]}"
URL="http://127.0.0.1:$PORT"
wait_ready "$URL"
for _ in $(seq 300); do # with users: until the bootstrap admin is in the node's users
    curl -fsS "${curl_admin[@]}" "$URL/v1/topics" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "${curl_admin[@]}" -X POST "$URL/v1/topics" -d '{"name":"flood","partitions":1}' >/dev/null
curl -fsS "${curl_admin[@]}" -X POST "$URL/v1/topics" -d '{"name":"loris","partitions":1}' >/dev/null
if [[ "$QUOTA" != 0 ]]; then
    curl -fsS "${curl_admin[@]}" -X POST "$URL/v1/users" -d '{"name":"flood",
        "password":"a-long-flood-password","grants":[{"action":"produce","topics":"flood"}]}' \
        >/dev/null
    echo "produce quota: $QUOTA bytes/s per user; flooding as user flood$([[ "$HONOR_RETRY_AFTER" == 1 ]] && echo ", honouring Retry-After")"
fi
bench "$URL" "$CLIENTS" "$DURATION" --server-pid "$NODE_PID" "${as_admin[@]}" >"$WORK/alone.json"
echo "rss before the attack: $(rss_kib "$NODE_PID" VmRSS) KiB"

seconds=$(python3 -c "print(float('${DURATION%s}') + 12)")
python3 "$HERE/hostile_clients.py" "127.0.0.1:$PORT" --loris "$LORIS" --flooders "$FLOODERS" \
    --seconds "$seconds" --flood-topic "$FLOOD_TOPIC" --ready-file "$WORK/loris-ready" \
    "${flood_flags[@]}" >"$WORK/attack.json" &
ATTACKER=$!
PIDS+=("$ATTACKER")
for _ in $(seq 600); do [[ -s "$WORK/loris-ready" ]] && break; sleep 0.1; done
echo "slow-loris connections open: $(cat "$WORK/loris-ready" 2>/dev/null || echo none)"
bench "$URL" "$CLIENTS" "$DURATION" --server-pid "$NODE_PID" "${as_admin[@]}" >"$WORK/attacked.json"
wait "$ATTACKER" || true
summary "producer alone       " "$WORK/alone.json"
summary "producer under attack" "$WORK/attacked.json"
echo "attackers were answered: $(cat "$WORK/attack.json")"
kill -0 "$NODE_PID" && echo "node still up: yes" || echo "node still up: NO"
echo "node peak RSS (VmHWM): $(rss_kib "$NODE_PID" VmHWM) KiB, now (VmRSS) $(rss_kib "$NODE_PID" VmRSS) KiB"
kill "$NODE_PID"
wait "$NODE_PID" 2>/dev/null || true
rm -rf "$WORK/attack"
sync # The flood's gigabytes are written back before anything else is measured.
}
[[ "$ATTACK" == 1 ]] && attack
[[ "$TLS_COMPARE" == 1 ]] || exit 0

# --- 2. TLS on vs off, same binary, same shape. ---
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
plain_port=$((PORT + 1))
tls_port=$((PORT + 2))
start plain "$plain_port"
PLAIN_PID=$NODE_PID
start tls "$tls_port" --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem"
TLS_PID=$NODE_PID
wait_ready "http://127.0.0.1:$plain_port"
wait_ready "https://127.0.0.1:$tls_port" --cacert "$WORK/cert.pem"
: >"$WORK/tls-rows"
run_tls_side() { # run_tls_side plain|tls
    if [[ "$1" == plain ]]; then
        bench "http://127.0.0.1:$plain_port" "$TLS_CLIENTS" "$TLS_DURATION" --server-pid "$PLAIN_PID"
    else
        bench "https://127.0.0.1:$tls_port" "$TLS_CLIENTS" "$TLS_DURATION" \
            --server-pid "$TLS_PID" --ca "$WORK/cert.pem"
    fi | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], d["msgs_per_sec"], d["p99_ms"], d.get("server_cpu_us_per_msg"))' "$1" |
        tee -a "$WORK/tls-rows"
}
for _ in $(seq "$TLS_ROUNDS"); do
    for side in plain tls tls plain; do run_tls_side "$side"; done
done
python3 - "$WORK/tls-rows" "$TLS_CLIENTS" <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1])]
mean = lambda side, i: sum(float(r[i]) for r in rows if r[0] == side) / sum(r[0] == side for r in rows)
p, t = mean("plain", 1), mean("tls", 1)
print(f"{sys.argv[2]} clients: plain {p:.0f} msg/s, TLS {t:.0f} msg/s, TLS/plain {t / p:.3f}")
print(f"p99: plain {mean('plain', 2):.2f} ms, TLS {mean('tls', 2):.2f} ms")
EOF
