# Thin wrappers over cargo. `make help` lists them.
SEEDS ?= 2000
SEED ?= 0
JOBS ?= 2
FUZZ_SECONDS ?= 60
NIGHTLY_FUZZ_SECONDS ?= 900

.PHONY: help run test check sim sim-runtime sim-replay determinism fuzz fuzz-regress nightly chaos fmt clippy

help:
	@echo "run          start one node on 127.0.0.1:7942 with data in ./narad-data"
	@echo "test         the whole test suite (what CI runs): cargo test"
	@echo "check        fmt + clippy (-D warnings) + tests"
	@echo "sim          sweep SEEDS fresh simulator seeds (default 2000)"
	@echo "sim-runtime  sweep SEEDS seeds of the production runtime on simulated hosts (tier 2, turmoil)"
	@echo "sim-replay   replay one seed with its event trace: make sim-replay SEED=0x2a"
	@echo "determinism  run a sample of seeds twice and compare trace hashes"
	@echo "fuzz         every fuzz target for FUZZ_SECONDS (default 60) on stable; summary table"
	@echo "fuzz-regress replay fuzz/corpus and fuzz/regressions through every fuzz target (seconds)"
	@echo "nightly      the long campaign: fuzzing, 200,000 seeds twice, 20,000 tier-2 seeds, make chaos"
	@echo "chaos        3 real nodes in network namespaces: isolation, pair cut, SIGSTOP, kill -9 (root; NARAD_BIN=...)"
	@echo "bench-soak   one node under 64 clients for DURATION (600) s with retention_bytes: disk stays bounded"
	@echo "bench-restart start-up time and bytes read after a clean shutdown and a kill -9, at 1 and 4 GiB"

run:
	cargo run --release -p narad -- serve

test:
	cargo test

fmt:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

check: fmt clippy test

sim:
	cargo run --release -p narad-sim -- sweep --seeds 0..$(SEEDS) --jobs $(JOBS)

sim-runtime:
	cargo run --release -p narad-sim -- sweep --seeds 0..$(SEEDS) --jobs $(JOBS) --tier runtime

sim-replay:
	cargo run --release -p narad-sim -- replay --seed $(SEED) --trace

determinism:
	cargo test -p narad-sim --test determinism

# cargo-fuzz (installed from crates.io if missing), stable toolchain, no sanitizer; see fuzz/README.md.
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh run

fuzz-regress:
	scripts/fuzz.sh regress

nightly:
	JOBS=$(JOBS) NIGHTLY_FUZZ_SECONDS=$(NIGHTLY_FUZZ_SECONDS) scripts/nightly.sh

# Three narad processes in network namespaces under real faults, ~3.5 min; skips without root or
# `ip netns`. docs/chaos.md. Knobs: NARAD_BIN (else a release build), CHAOS_PHASE_SECONDS, CHAOS_JSON.
chaos:
	scripts/chaos.sh

# Narad vs Redis (appendfsync always) vs Narad's own HTTP ceiling, one run (~5 min); writes
# docs/benchmarks.md and its SVG chart. Knobs: DURATION, VISIBLE_DURATION, CLIENTS, MICRO=1.
.PHONY: bench-peers
bench-peers:
	scripts/bench-peers.sh

# One node, 1 MiB segments, a 4-partition topic with retention_bytes 4 MiB, 64 clients of
# narad bench for DURATION s (600; DURATION=60 for a quick run), sampled every 5 s: writes
# docs/soak.md, docs/soak.svg and docs/soak.csv; fails if disk use breaks its bound.
.PHONY: bench-soak
bench-soak:
	DURATION=$(or $(DURATION),600) scripts/bench-soak.sh

# Start-up cost after a clean shutdown and after kill -9 at 1 and 4 GiB of partition data (issue
# 11): fills a data dir in /var/tmp through the real binary, prints a table, checks the targets.
# Knobs: SIZES_GIB, BENCH_DIR, BASELINE=/path/to/another/narad, COLD=0.
.PHONY: bench-restart
bench-restart:
	scripts/bench-restart.sh
