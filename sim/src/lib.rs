//! narad-sim: the deterministic simulator of Narad. It drives the same `narad-core` state machine
//! as the production binary through the simulated runtime (`narad-sim-runtime`), one node or a
//! cluster of 3 or 5, with a seeded workload ([`workload`]), a swarm-drawn fault schedule
//! ([`swarm`], [`schedule`]) and the invariant checkers of docs/design.md §5 ([`checker`]). One
//! seed gives one run, bit for bit ([`trace`]); [`sweep`] runs many in parallel; [`scenarios`] are
//! hand-written fault stories.
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

pub mod checker;
pub mod clock;
pub mod nodefuzz;
pub mod observe;
pub mod outcome;
pub mod payload;
pub mod scenarios;
pub mod schedule;
pub mod seeds;
pub mod sim;
pub mod swarm;
pub mod sweep;
pub mod tier2;
pub mod trace;
pub mod workload;

pub use outcome::RunOutcome;
pub use sim::Simulation;
pub use swarm::{NodesChoice, RunOptions};

/// Runs seed `seed` under `options` (keeping the full trace when `keep_trace`).
pub fn run_seed(seed: u64, options: &RunOptions, keep_trace: bool) -> RunOutcome {
    match options.tier {
        swarm::Tier::Core => Simulation::from_seed(seed, options, keep_trace).run(),
        swarm::Tier::Runtime => tier2::run_seed(seed, options, keep_trace),
    }
}

/// Runs seed `seed`; a panic (a broken assertion in the core or the simulator) becomes a
/// failed outcome naming it, so a sweep reports it like any other violation.
pub fn run_seed_catching(seed: u64, options: &RunOptions, keep_trace: bool) -> RunOutcome {
    let run = std::panic::catch_unwind(|| run_seed(seed, options, keep_trace));
    run.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "panic".to_string());
        RunOutcome::panicked(seed, options, &message)
    })
}

/// Parses a seed written in decimal or as `0x…` hex.
pub fn parse_seed(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => text.replace('_', "").parse(),
    };
    parsed.map_err(|e| format!("bad seed `{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Ok(42));
        assert_eq!(parse_seed("0x2a"), Ok(42));
        assert_eq!(parse_seed("0XFF"), Ok(255));
        assert!(parse_seed("zz").is_err());
    }
}
