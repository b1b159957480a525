# shellcheck shell=bash
# Shared by the bench scripts (sourced, not run): the processes a bench starts, and how they stop.
# A script appends each child's pid to PIDS and sets WORK to its scratch directory; on exit every
# child gets SIGTERM, up to 10 s to stop, then SIGKILL, and WORK is removed.

PIDS=()

stop_children() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [[ -n "${WORK:-}" ]]; then rm -rf "$WORK"; fi
}
trap stop_children EXIT
