#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (the list comes from `cargo fuzz list`, so every target,
# including ones added later, is covered) and prints a summary table. Used by `make fuzz`,
# `make fuzz-regress` and scripts/nightly.sh.
#
#   scripts/fuzz.sh run [SECONDS]   fuzz every target for SECONDS (default $FUZZ_SECONDS or 60)
#   scripts/fuzz.sh regress         replay fuzz/corpus and fuzz/regressions through every target
#
# Knobs: FUZZ_TARGETS="a b" (a subset), FUZZ_JOBS (default 1), FUZZ_SANITIZER (default none:
# builds on stable; `address` needs `cargo +nightly`, used when FUZZ_TOOLCHAIN=nightly).
# Exits non-zero if any target crashed (its input is in fuzz/artifacts/<target>/) or failed to build.
set -uo pipefail

cd "$(dirname "$0")/../fuzz"
mode=${1:-run}
seconds=${2:-${FUZZ_SECONDS:-60}}
jobs=${FUZZ_JOBS:-1}
sanitizer=${FUZZ_SANITIZER:-none}
cargo_cmd=(cargo)
if [[ ${FUZZ_TOOLCHAIN:-} == nightly ]]; then
    cargo_cmd=(cargo +nightly)
fi

ensure_cargo_fuzz() {
    if ! "${cargo_cmd[@]}" fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz from crates.io" >&2
        cargo install cargo-fuzz --locked
    fi
}

targets() {
    if [[ -n ${FUZZ_TARGETS:-} ]]; then
        tr ' ' '\n' <<<"$FUZZ_TARGETS"
    else
        "${cargo_cmd[@]}" fuzz list
    fi
}

# Extracts "execs execs/s corpus" from a libFuzzer log (its last status line, then the final
# stat_* lines printed with -print_final_stats=1).
stats() {
    local log=$1 execs rate corpus
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2)
    echo "${execs:--} ${rate:--} ${corpus:--}"
}

# The built target: run directly, so that edits to the tree during a long run do not rebuild.
binary() {
    local host
    host=$(rustc -vV | sed -n 's/^host: //p')
    echo "target/$host/release/$1"
}

artifact_count() {
    find "artifacts/$1" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' \
        -o -name 'leak-*' \) 2>/dev/null | wc -l
}

run_target() {
    local target=$1 log=$2 before after
    mkdir -p "corpus/$target" "artifacts/$target"
    local dict=()
    [[ -f dict/$target.dict ]] && dict=("-dict=dict/$target.dict")
    before=$(artifact_count "$target")
    local jobs_flags=()
    [[ $jobs -gt 1 ]] && jobs_flags=("-jobs=$jobs" "-workers=$jobs")
    "$(binary "$target")" "corpus/$target" -artifact_prefix="artifacts/$target/" \
        -max_total_time="$seconds" -print_final_stats=1 -max_len=65536 "${dict[@]}" \
        "${jobs_flags[@]}" >"$log" 2>&1
    local status=$?
    after=$(artifact_count "$target")
    echo $((after - before)) "$status"
}

regress_target() {
    local target=$1 log=$2 dirs=()
    [[ -d corpus/$target ]] && dirs+=("corpus/$target")
    [[ -d regressions/$target ]] && dirs+=("regressions/$target")
    [[ ${#dirs[@]} -eq 0 ]] && { echo "0 0"; return; }
    "$(binary "$target")" "${dirs[@]}" -runs=0 -print_final_stats=1 >"$log" 2>&1
    local status=$?
    echo "$((status != 0 ? 1 : 0))" "$status"
}

main() {
    ensure_cargo_fuzz
    mkdir -p logs
    # One build of every target; a target that does not build fails alone (its run says so).
    if ! "${cargo_cmd[@]}" fuzz build -s "$sanitizer" >logs/build.log 2>&1; then
        echo "fuzz build failed (see fuzz/logs/build.log); building targets one by one" >&2
        for target in $(targets); do
            "${cargo_cmd[@]}" fuzz build -s "$sanitizer" "$target" >>logs/build.log 2>&1
        done
    fi
    local failed=0 rows=()
    for target in $(targets); do
        local log="logs/$target.log" result crashes status
        if [[ $mode == regress ]]; then
            result=$(regress_target "$target" "$log")
        else
            echo "fuzzing $target for ${seconds}s" >&2
            result=$(run_target "$target" "$log")
        fi
        read -r crashes status <<<"$result"
        if [[ $crashes -gt 0 || $status -ne 0 ]]; then
            failed=1
            [[ $crashes -eq 0 ]] && crashes="exit:$status"
        fi
        rows+=("$target $(stats "$log") $crashes")
    done
    printf '\n%-20s %12s %9s %8s %s\n' target execs execs/s corpus "new crashes"
    for row in "${rows[@]}"; do
        # shellcheck disable=SC2086
        printf '%-20s %12s %9s %8s %s\n' $row
    done
    if [[ $failed -ne 0 ]]; then
        echo "FAILED: see fuzz/logs/<target>.log and fuzz/artifacts/<target>/" >&2
        exit 1
    fi
}

main
