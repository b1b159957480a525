//! The simulated clock's origin. A leaf so that everything that reports times relative to the
//! start of a run (the simulation, its outcome, the node fuzzer) can share it without importing
//! one another.

use narad_core::Instant;

/// Simulated start time: 2026-01-01T00:00:00Z in microseconds.
pub const START: Instant = Instant(1_767_225_600_000_000);

/// Microseconds of simulated time elapsed between [`START`] and `at`.
pub fn since_start(at: Instant) -> u64 {
    at.0 - START.0
}
