#!/usr/bin/env bash
# Check that the original Narad Go client (narad-go), unchanged, works
# against our broker.
#
#   scripts/go-client/run.sh NARAD_GO_DIR [NARAD_BIN]
#
# NARAD_GO_DIR  a checkout of github.com/debanganthakuria/narad-go (Go >= 1.23)
# NARAD_BIN     the broker binary; default target/release/narad
#
# It starts one node on a free 127.0.0.1 port with a temporary data dir,
# waits for /readyz, runs naradcheck (main.go here) against it through the
# client's public API, and stops the node on exit. Environment:
#
#   GO=path/to/go          the go command (default: go on PATH)
#   CLIENT_TESTS=1         also run the client's own tests: `go test ./...`
#                          and its integration suite (-tags integration,
#                          NARAD_ADDR pointed at the node)
#   KEEP=1                 keep the temporary directory (node log, data)
#
# Nothing in NARAD_GO_DIR is modified; the check module is copied to a
# temporary directory and given a replace directive there.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ $# -lt 1 || $# -gt 2 ]]; then
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
client_dir=$(cd "$1" && pwd)
bin=${2:-$repo/target/release/narad}
[[ -f $client_dir/go.mod ]] || { echo "run.sh: $client_dir has no go.mod" >&2; exit 2; }
grep -q '^module github.com/debanganthakuria/narad-go$' "$client_dir/go.mod" ||
  { echo "run.sh: $client_dir is not the narad-go module" >&2; exit 2; }
[[ -x $bin ]] || { echo "run.sh: broker binary $bin not found (build it, or pass NARAD_BIN)" >&2; exit 2; }

GO=${GO:-go}
command -v "$GO" >/dev/null || { echo "run.sh: no go command (set GO=...)" >&2; exit 2; }
# No module proxy here, and the client has no dependencies: resolve only
# what is on disk, and never fetch a toolchain.
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local
goversion=$("$GO" env GOVERSION)
minor=$(sed -E 's/^go1\.([0-9]+).*/\1/' <<<"$goversion")
if [[ ! $minor =~ ^[0-9]+$ ]] || (( minor < 23 )); then
  echo "run.sh: $goversion is too old; narad-go needs Go 1.23 or later" >&2
  exit 2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/narad-go-check.XXXXXX")
pid=
cleanup() {
  local rc=$?
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    # SIGTERM is a graceful stop; give it a bounded time, then insist.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [[ ${KEEP:-} == 1 || $rc -ne 0 ]]; then
    echo "run.sh: node log and data kept in $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
addr=127.0.0.1:$port
"$bin" serve --data-dir "$tmp/data" --http "$addr" >"$tmp/narad.log" 2>&1 &
pid=$!

# Poll /readyz; a generous deadline, since a node recovers before it is ready.
deadline=$((SECONDS + 60))
until curl -sf "http://$addr/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: the node exited before it was ready:" >&2
    tail -n 30 "$tmp/narad.log" >&2
    exit 1
  fi
  if (( SECONDS >= deadline )); then
    echo "run.sh: the node at $addr was not ready within 60 s" >&2
    tail -n 30 "$tmp/narad.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "run.sh: node ready at $addr ($("$bin" --version 2>/dev/null || echo "$bin")), $goversion"

mkdir "$tmp/check"
cp "$here/go.mod" "$here/main.go" "$tmp/check/"
(cd "$tmp/check" && "$GO" mod edit -replace "github.com/debanganthakuria/narad-go=$client_dir")

status=0
echo "== naradcheck"
(cd "$tmp/check" && NARAD_ADDR=$addr "$GO" run .) || status=1

if [[ ${CLIENT_TESTS:-} == 1 ]]; then
  echo "== narad-go unit tests (go test ./...)"
  (cd "$client_dir" && "$GO" test -count=1 ./...) || status=1
  echo "== narad-go integration tests (-tags integration, NARAD_ADDR=$addr)"
  (cd "$client_dir" && NARAD_ADDR=$addr "$GO" test -tags integration -count=1 -run TestIntegration -v .) || status=1
fi
exit "$status"
