#!/usr/bin/env bash
# `make chaos`: three real narad processes in network namespaces under isolation, pair cuts,
# SIGSTOP and kill -9 (scripts/chaos.py; docs/chaos.md). Needs root and `ip netns` (skips with
# "chaos: skipped: <reason>" and exit 0 otherwise). Binary: $NARAD_BIN, else a release build.
# Cleans up on every exit path: the nodes (by PID), the nchaos-* namespaces and veths, the temp
# dir (kept with CHAOS_KEEP=1). Leftovers of a crashed earlier run are removed first.
set -uo pipefail

cd "$(dirname "$0")/.."
prefix=nchaos-
state=${TMPDIR:-/tmp}/nchaos-current # the running (or crashed) run's temp dir

skip() {
    echo "chaos: skipped: $*"
    exit 0
}

# Kills the given PIDs if they are still narad (or chaos.py) processes: SIGCONT (a SIGSTOPped
# node ignores SIGTERM until continued), SIGTERM, up to 10 s, then SIGKILL.
kill_pids() {
    local pid live=()
    for pid in "$@"; do
        [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || continue
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qE 'narad|chaos\.py' || continue
        kill -CONT "$pid" 2>/dev/null
        kill -TERM "$pid" 2>/dev/null && live+=("$pid")
    done
    local deadline=$((SECONDS + 10))
    for pid in "${live[@]}"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    done
}

# Every nchaos-* namespace (after killing what runs inside it) and every nchaos-* link.
cleanup_net() {
    local name
    for name in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix"); do
        # shellcheck disable=SC2046
        kill_pids $(ip netns pids "$name" 2>/dev/null)
        ip netns pids "$name" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$name" 2>/dev/null
    done
    for name in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
        grep "^$prefix"); do
        ip link del "$name" 2>/dev/null
    done
}

leftovers() {
    if [[ -f $state ]]; then
        local old
        old=$(cat "$state")
        echo "chaos: removing leftovers of an earlier run ($old)"
        # shellcheck disable=SC2046
        [[ -f $old/pids ]] && kill_pids $(cat "$old/pids")
        [[ -f $old/python.pid ]] && kill_pids $(cat "$old/python.pid")
        case $old in */nchaos-run.*) rm -rf "$old" ;; esac
        rm -f "$state"
    fi
    cleanup_net
}

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v tc >/dev/null || skip "no tc command (iproute2)"
command -v python3 >/dev/null || skip "no python3"
# One run at a time: the lock dies with its holder, so a crashed run never blocks the next.
if command -v flock >/dev/null; then
    exec 9>"${TMPDIR:-/tmp}/nchaos.lock"
    flock -n 9 || {
        echo "chaos: another chaos run is in progress (${TMPDIR:-/tmp}/nchaos.lock)" >&2
        exit 1
    }
fi
leftovers
probe=${prefix}probe$$
if ! err=$(ip netns add "$probe" 2>&1); then
    skip "ip netns add failed: $err"
fi
ok=1
err=$(ip -n "$probe" link add ${prefix}pa type veth peer name ${prefix}pb 2>&1 &&
    ip -n "$probe" link set ${prefix}pa up 2>&1 &&
    ip netns exec "$probe" tc qdisc add dev ${prefix}pa root pfifo limit 0 2>&1) || ok=0
ip netns del "$probe"
((ok)) || skip "cannot drop traffic on a veth (veth + tc pfifo qdisc): $err"

if [[ -n ${NARAD_BIN:-} ]]; then
    bin=$NARAD_BIN
else
    echo "chaos: building narad (cargo build --release -p narad); set NARAD_BIN to skip"
    cargo build --release -p narad || exit 1
    bin=$PWD/target/release/narad
fi
[[ -x $bin ]] || {
    echo "chaos: $bin is not an executable" >&2
    exit 1
}
bin=$(realpath "$bin")

dir=$(mktemp -d "${TMPDIR:-/tmp}/nchaos-run.XXXXXX")
echo "$dir" >"$state"
py=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $py ]] && kill -0 "$py" 2>/dev/null; then
        kill -TERM "$py" 2>/dev/null # chaos.py stops its nodes and tears its network down
        local deadline=$((SECONDS + 30))
        while kill -0 "$py" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
        kill -KILL "$py" 2>/dev/null
    fi
    # shellcheck disable=SC2046
    [[ -f $dir/pids ]] && kill_pids $(cat "$dir/pids")
    cleanup_net
    if [[ ${CHAOS_KEEP:-0} == 1 ]]; then
        echo "chaos: kept $dir (node logs n1.log..n3.log)"
    else
        rm -rf "$dir"
    fi
    rm -f "$state"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In the background so that a signal to this script is handled at once (wait is interruptible).
CHAOS_DIR=$dir python3 scripts/chaos.py --binary "$bin" --dir "$dir" &
py=$!
echo "$py" >"$dir/python.pid"
wait "$py"
rc=$?
py=""
exit "$rc"
