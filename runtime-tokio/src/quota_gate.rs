//! The produce quota's gate in front of the body (`narad_core::quota` decides; this remembers).
//!
//! The core can judge a produce only once its body is read and decoded, and for a 16 MiB batch
//! that is where the cost is: a flood the quota refuses would still take the runtime thread and
//! a core's worth of parsing per request (measured: an 8-client producer's p99 stays at 7 ms
//! beside a refused flood, against 1.6 ms alone). So when the node refuses a payer for its quota,
//! the HTTP layer remembers until when, and answers that payer's produces 429 at once, before
//! reading their bodies, until shortly before then (`MARGIN_US`: the core's clock and this one
//! are read at different moments, and the gate must not refuse what the core would take). A
//! payer the gate lets through is judged by the core as before; nothing here admits anything.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use narad_core::quota::Payer;

/// How much sooner than the core's word the gate opens again.
const MARGIN_US: u64 = 10_000;
/// Payers the gate holds before its first sweep of the expired ones.
const FIRST_SWEEP_AT: usize = 64;

/// Until when (µs on the node's wall clock) each recently refused payer is refused.
#[derive(Default)]
pub struct QuotaGate {
    inner: Mutex<Gates>,
    /// Produces answered 429 here, before their bodies were read.
    refused: AtomicU64,
}

#[derive(Default)]
struct Gates {
    closed_until: BTreeMap<Payer, u64>,
    sweep_at: usize,
}

impl QuotaGate {
    /// Microseconds `payer` must still wait at `now_us`, if the gate is closed to it (a
    /// produce it refuses, and counts).
    pub fn wait_us(&self, payer: &Payer, now_us: u64) -> Option<u64> {
        let gates = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let until = *gates.closed_until.get(payer)?;
        let wait = (until > now_us).then(|| until - now_us)?;
        self.refused.fetch_add(1, Ordering::Relaxed);
        Some(wait)
    }

    /// Produces the gate refused so far.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The core refused `payer` at about `now_us`, to take more `wait_us` later.
    pub fn refused(&self, payer: Payer, now_us: u64, wait_us: u64) {
        let Some(open_in) = wait_us.checked_sub(MARGIN_US).filter(|&w| w > 0) else { return };
        let mut gates = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.closed_until.insert(payer, now_us.saturating_add(open_in));
        if gates.closed_until.len() >= gates.sweep_at.max(FIRST_SWEEP_AT) {
            gates.closed_until.retain(|_, until| *until > now_us);
            gates.sweep_at = 2 * gates.closed_until.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_closes_for_a_refused_payer_until_just_before_the_core_would_take_more() {
        let gate = QuotaGate::default();
        let flood = Payer::User("flood".into());
        assert_eq!(gate.wait_us(&flood, 0), None);
        gate.refused(flood.clone(), 1_000_000, 2_000_000);
        assert_eq!(gate.wait_us(&flood, 1_000_000), Some(2_000_000 - MARGIN_US));
        assert_eq!(gate.wait_us(&Payer::Anonymous, 1_000_000), None, "payers are apart");
        assert_eq!(gate.wait_us(&flood, 3_000_000 - MARGIN_US), None, "open before the core");
        assert_eq!(gate.refusals(), 1);
        gate.refused(Payer::Anonymous, 0, MARGIN_US);
        assert_eq!(gate.wait_us(&Payer::Anonymous, 0), None, "a wait within the margin: no gate");
    }

    #[test]
    fn expired_gates_are_swept() {
        let gate = QuotaGate::default();
        for n in 0..10_000u64 {
            gate.refused(Payer::User(format!("u{n}")), n * 1_000_000, 500_000);
        }
        let held = gate.inner.lock().expect("lock").closed_until.len();
        assert!(held < 2 * FIRST_SWEEP_AT, "{held} gates held");
    }
}
