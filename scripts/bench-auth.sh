#!/usr/bin/env bash
# Produce throughput with access control and TLS against without, interleaved on one machine
# (issue 14's acceptance: auth on within 10 % of off, TLS within 25 %). Three shapes of one build,
# each run on a fresh data directory and driven by the same `narad bench`:
#   open      no users on a loopback node: no credentials checked
#   auth      users defined (--admin-password-file); the bench sends Basic credentials on every
#             request, verified once and then served from the verification cache
#   tls+auth  the same, over TLS (a throwaway self-signed certificate)
#
#   scripts/bench-auth.sh [NARAD_BINARY]
#
# Knobs: CLIENTS (64), DURATION (5s per run), ROUNDS (3: open, auth, tls+auth, then reversed),
# PORT (7970), BENCH_DIR (/var/tmp). Prints one line per run and the means with their ratios.
set -euo pipefail

BIN="${1:-target/release/narad}"
CLIENTS="${CLIENTS:-64}"
DURATION="${DURATION:-5s}"
ROUNDS="${ROUNDS:-3}"
PORT="${PORT:-7970}"
BENCH_DIR="${BENCH_DIR:-/var/tmp}"
WORK="$(mktemp -d "$BENCH_DIR/narad-auth.XXXXXX")"
SERVER=""
trap '[[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; true' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
echo "a-long-bench-password" > "$WORK/admin-password"

run() { # run SHAPE: one bench run against a fresh server of that shape
    local shape=$1 dir pid scheme=http flags=() client=()
    dir="$(mktemp -d "$WORK/run.XXXXXX")"
    if [[ $shape != open ]]; then
        flags+=(--admin-password-file "$WORK/admin-password")
        client+=(--user "admin:a-long-bench-password")
    fi
    if [[ $shape == tls+auth ]]; then
        flags+=(--tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem")
        client+=(--ca "$WORK/cert.pem")
        scheme=https
    fi
    "$BIN" serve --http "127.0.0.1:$PORT" --data-dir "$dir/data" "${flags[@]}" 2>"$dir/log" &
    pid=$!
    SERVER="$pid"
    local url="$scheme://127.0.0.1:$PORT"
    for _ in $(seq 300); do
        # Ready, and (with users) the first admin exists: a credentialed request is let in.
        if curl -fsS -k "$url/readyz" >/dev/null 2>&1 &&
            curl -fsS -k ${client[0]:+-u "admin:a-long-bench-password"} "$url/v1/topics" >/dev/null 2>&1; then
            break
        fi
        sleep 0.1
    done
    "$BIN" bench --url "$url" "${client[@]}" --server-pid "$pid" --warmup 1s --json \
        --concurrency "$CLIENTS" --duration "$DURATION" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], d["msgs_per_sec"], d["server_cpu_us_per_msg"], d["p99_ms"])' "$shape" |
        tee -a "$WORK/results"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    SERVER=""
    rm -rf "$dir"
}

for _ in $(seq "$ROUNDS"); do
    run open; run auth; run tls+auth; run tls+auth; run auth; run open
done
python3 - "$WORK/results" "$CLIENTS" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1])]
def mean(shape, i):
    values = [float(r[i]) for r in rows if r[0] == shape]
    return sum(values) / len(values)
for name, i in (("msg/s", 1), ("server CPU us/msg", 2), ("p99 ms", 3)):
    base = mean("open", i)
    line = f"clients {sys.argv[2]}: {name}: open {base:.2f}"
    for shape in ("auth", "tls+auth"):
        value = mean(shape, i)
        line += f", {shape} {value:.2f} ({value / base:.3f} x open)"
    print(line)
PY
