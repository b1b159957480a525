# Thin wrappers over cargo. `make help` lists them.
SEEDS ?= 2000
SEED ?= 0
JOBS ?= 2

.PHONY: help run test check sim sim-replay determinism nightly fmt clippy

help:
	@echo "run          start one node on 127.0.0.1:7942 with data in ./narad-data"
	@echo "test         the whole test suite (what CI runs): cargo test"
	@echo "check        fmt + clippy (-D warnings) + tests"
	@echo "sim          sweep SEEDS fresh simulator seeds (default 2000)"
	@echo "sim-replay   replay one seed with its event trace: make sim-replay SEED=0x2a"
	@echo "determinism  run a sample of seeds twice and compare trace hashes"
	@echo "nightly      the long campaign: 200,000 seeds"

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

sim-replay:
	cargo run --release -p narad-sim -- replay --seed $(SEED) --trace

determinism:
	cargo test -p narad-sim --test determinism

nightly:
	cargo run --release -p narad-sim -- sweep --seeds 0..200000 --jobs $(JOBS)

# Narad vs Redis (appendfsync always) vs Narad's own HTTP ceiling, one run (~5 min); writes
# docs/benchmarks.md and its SVG chart. Knobs: DURATION, VISIBLE_DURATION, CLIENTS, MICRO=1.
.PHONY: bench-peers
bench-peers:
	scripts/bench-peers.sh
