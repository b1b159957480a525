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
# waits for /readyz, gives it users (see AUTH), runs naradcheck (main.go
# here) against it through the client's public API, and stops the node on
# exit. Environment:
#
#   GO=path/to/go          the go command (default: go on PATH)
#   AUTH=1                 (the default) create user admin (admin on *) with
#                          an unauthenticated POST /v1/users while the node
#                          has no users, then, as admin, a user that may only
#                          produce to naradcheck.auth.*; naradcheck runs as
#                          admin (narad.WithAuth) and adds the 401/403 checks
#   AUTH=file              the same, but admin comes from
#                          `narad serve --admin-password-file`
#   AUTH=0                 no users: the node serves without credentials
#   CLIENT_TESTS=1         also run the client's own tests: `go test ./...`
#                          and its integration suite (-tags integration,
#                          NARAD_ADDR pointed at the node, NARAD_USER and
#                          NARAD_PASSWORD the admin's unless AUTH=0)
#   KEEP=1                 keep the temporary directory (node log, data)
#
# Passwords are random per run and go to the programs through files and
# the environment, never on a command line.
#
# Nothing in NARAD_GO_DIR is modified; the check module is copied to a
# temporary directory and given a replace directive there.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ $# -lt 1 || $# -gt 2 ]]; then
  sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
client_dir=$(cd "$1" && pwd)
bin=${2:-$repo/target/release/narad}
[[ -f $client_dir/go.mod ]] || { echo "run.sh: $client_dir has no go.mod" >&2; exit 2; }
grep -q '^module github.com/debanganthakuria/narad-go$' "$client_dir/go.mod" ||
  { echo "run.sh: $client_dir is not the narad-go module" >&2; exit 2; }
[[ -x $bin ]] || { echo "run.sh: broker binary $bin not found (build it, or pass NARAD_BIN)" >&2; exit 2; }

GO=${GO:-go}
AUTH=${AUTH:-1}
[[ $AUTH == 0 || $AUTH == 1 || $AUTH == file ]] ||
  { echo "run.sh: AUTH must be 0, 1 or file, not $AUTH" >&2; exit 2; }
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
serve_args=(serve --data-dir "$tmp/data" --http "$addr")
if [[ $AUTH != 0 ]]; then
  (umask 077 && : >"$tmp/admin-password")
  python3 -c 'import secrets; print(secrets.token_urlsafe(24))' >"$tmp/admin-password"
  admin_password=$(<"$tmp/admin-password")
  producer_password=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
  # curl reads the admin's credentials from a file, so they stay off
  # every command line.
  (umask 077 && printf 'user = "admin:%s"\n' "$admin_password" >"$tmp/curl-admin")
  [[ $AUTH == file ]] && serve_args+=(--admin-password-file "$tmp/admin-password")
fi
"$bin" "${serve_args[@]}" >"$tmp/narad.log" 2>&1 &
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

# post_user BODY_FILE [curl args...]: POST /v1/users, which must answer 201.
post_user() {
  local body=$1 code
  shift
  code=$(curl -sS -o "$tmp/users-reply" -w '%{http_code}' -X POST "$@" \
    -H 'Content-Type: application/json' --data-binary @"$body" "http://$addr/v1/users") || code=000
  if [[ $code != 201 ]]; then
    echo "run.sh: POST /v1/users answered $code, want 201: $(head -c 500 "$tmp/users-reply")" >&2
    exit 1
  fi
}
if [[ $AUTH != 0 ]]; then
  if [[ $AUTH == 1 ]]; then
    # No user exists yet, so this POST needs no credentials.
    (umask 077 && NARAD_PW=$admin_password python3 -c 'import json, os; print(json.dumps({"name": "admin", "password": os.environ["NARAD_PW"], "grants": [{"action": "admin"}]}))' >"$tmp/admin-user.json")
    post_user "$tmp/admin-user.json"
    echo "run.sh: created user admin (admin on *) with an unauthenticated POST /v1/users"
  fi
  # The node creates the --admin-password-file admin once it is ready, and
  # a created user may take a moment to apply: wait until admin gets in.
  deadline=$((SECONDS + 60))
  until [[ $(curl -s -o /dev/null -w '%{http_code}' -K "$tmp/curl-admin" "http://$addr/v1/topics") == 200 ]]; do
    if (( SECONDS >= deadline )); then
      echo "run.sh: admin's credentials were not accepted within 60 s:" >&2
      curl -sS -i -K "$tmp/curl-admin" "http://$addr/v1/topics" >&2 || true
      tail -n 30 "$tmp/narad.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  # Now that a user exists, a request without credentials must be refused.
  code=$(curl -s -o /dev/null -D "$tmp/anon-headers" -w '%{http_code}' "http://$addr/v1/topics") || code=000
  if [[ $code != 401 ]] || ! grep -qi '^www-authenticate: *basic' "$tmp/anon-headers"; then
    echo "run.sh: GET /v1/topics without credentials answered $code, want 401 with a Basic challenge:" >&2
    cat "$tmp/anon-headers" >&2
    exit 1
  fi
  (umask 077 && NARAD_PW=$producer_password python3 -c 'import json, os; print(json.dumps({"name": "naradcheck-producer", "password": os.environ["NARAD_PW"], "grants": [{"action": "produce", "topics": "naradcheck.auth.*"}]}))' >"$tmp/producer-user.json")
  post_user "$tmp/producer-user.json" -K "$tmp/curl-admin"
  echo "run.sh: as admin, created user naradcheck-producer (produce on naradcheck.auth.*); without credentials: 401 Basic"
fi

# with_admin CMD...: CMD with the admin's credentials exported (AUTH=0:
# none), set by the shell rather than passed on a command line.
with_admin() {
  if [[ $AUTH != 0 ]]; then
    export NARAD_USER=admin NARAD_PASSWORD=$admin_password
  fi
  "$@"
}

mkdir "$tmp/check"
cp "$here/go.mod" "$here/main.go" "$tmp/check/"
(cd "$tmp/check" && "$GO" mod edit -replace "github.com/debanganthakuria/narad-go=$client_dir")

status=0
echo "== naradcheck"
(
  cd "$tmp/check"
  if [[ $AUTH != 0 ]]; then
    export NARAD_PRODUCER_USER=naradcheck-producer NARAD_PRODUCER_PASSWORD=$producer_password
    export NARAD_PRODUCER_TOPICS='naradcheck.auth.*'
  fi
  NARAD_ADDR=$addr with_admin "$GO" run .
) || status=1

if [[ ${CLIENT_TESTS:-} == 1 ]]; then
  echo "== narad-go unit tests (go test ./...)"
  (cd "$client_dir" && "$GO" test -count=1 ./...) || status=1
  echo "== narad-go integration tests (-tags integration, NARAD_ADDR=$addr)"
  (cd "$client_dir" && NARAD_ADDR=$addr with_admin "$GO" test -tags integration -count=1 -run TestIntegration -v .) || status=1
fi
exit "$status"
