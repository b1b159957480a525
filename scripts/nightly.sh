#!/usr/bin/env bash
# The long campaign (`make nightly`, .github/workflows/nightly.yml): every fuzz target for
# NIGHTLY_FUZZ_SECONDS (default 900 each), then the long simulator sweeps (a mix of cluster sizes,
# then clusters only), a tier-2 sweep and `make chaos`. Prints each part's summary; exits non-zero on any crash or failing seed.
set -uo pipefail

cd "$(dirname "$0")/.."
jobs=${JOBS:-2}
seeds=${NIGHTLY_SEEDS:-0..200000}
failed=()

echo "== fuzz: every target for ${NIGHTLY_FUZZ_SECONDS:-900}s"
scripts/fuzz.sh run "${NIGHTLY_FUZZ_SECONDS:-900}" || failed+=("fuzz")

echo "== simulator sweep: seeds $seeds"
cargo run --release -p narad-sim -- sweep --seeds "$seeds" --jobs "$jobs" || failed+=("sweep")

echo "== simulator cluster sweep: seeds $seeds"
cargo run --release -p narad-sim -- sweep --seeds "$seeds" --jobs "$jobs" --nodes cluster \
    || failed+=("cluster sweep")

echo "== tier-2 sweep (the production runtime on simulated hosts): seeds ${NIGHTLY_RUNTIME_SEEDS:-0..20000}"
cargo run --release -p narad-sim -- sweep --seeds "${NIGHTLY_RUNTIME_SEEDS:-0..20000}" --jobs "$jobs" \
    --tier runtime || failed+=("tier-2 sweep")

echo "== chaos: three real nodes under network faults, SIGSTOP and kill -9"
scripts/chaos.sh || failed+=("chaos")

if [[ ${#failed[@]} -ne 0 ]]; then
    echo "nightly FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "nightly passed"
