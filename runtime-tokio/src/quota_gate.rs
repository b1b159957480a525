//! The produce quota's gate in front of the body (`narad_core::quota` decides; this remembers).
//!
//! The core can judge a produce only once its body is read and decoded, and for a 16 MiB batch
//! that is where the cost is: a flood the quota refuses would still take the runtime thread and
//! a core's worth of parsing per request (measured: an 8-client producer's p99 stays at 7 ms
//! beside a refused flood, against 1.6 ms alone). So when the node refuses a payer for its quota,
//! or admits a produce that spends it (`NodeEvent::QuotaSpent`), the HTTP layer remembers until
//! when, and answers that payer's produces 429 at once, before reading their bodies, until
//! shortly before then (`MARGIN_US`: the core's clock and this one are read at different moments,
//! and the gate must not refuse what the core would take).
//!
//! When the gate opens again, one produce goes through to find out whether the payer is back
//! under its quota (the probe); the payer's others are refused (`PROBE_RETRY_US`) until it is
//! answered. Without that, a payer's many bulk clients, all told the same `Retry-After`, would
//! come back together and have all their bodies read and decoded for one to be taken. A probe
//! the core took without spending the quota again removes the gate. Nothing here admits
//! anything: a produce the gate lets through is judged by the core as before.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use narad_core::access::Principal;
use narad_core::quota::Payer;

/// How much sooner than the core's word the gate opens again.
const MARGIN_US: u64 = 10_000;
/// The wait told to a payer's produce while its probe is out (a `Retry-After` of 1 s).
const PROBE_RETRY_US: u64 = 1_000_000;
/// Payers the gate holds before its first sweep of the expired ones.
const FIRST_SWEEP_AT: usize = 64;

/// The gates of recently refused payers, on the node's wall clock (µs).
#[derive(Default)]
pub struct QuotaGate {
    inner: Mutex<Gates>,
    /// Produces answered 429 here, before their bodies were read.
    refused: AtomicU64,
}

#[derive(Default)]
struct Gates {
    by_payer: BTreeMap<Payer, Gate>,
    sweep_at: usize,
}

struct Gate {
    open_at: u64,
    /// Times the core closed it: a probe that sees this unchanged was not refused.
    closings: u64,
    probe_out: bool,
}

/// The one produce of a payer going through its reopened gate; answered, it is dropped.
pub struct Probe {
    gate: Arc<QuotaGate>,
    payer: Payer,
    closings: u64,
}

impl QuotaGate {
    fn gates(&self) -> MutexGuard<'_, Gates> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a produce of `who` at `now_us` may go on to have its body read: freely
    /// (`Ok(None)`), as its payer's probe, or not (`Err`: how long to wait, counted).
    pub fn enter(self: &Arc<Self>, who: &Principal, now_us: u64) -> Result<Option<Probe>, u64> {
        let mut gates = self.gates();
        if gates.by_payer.is_empty() {
            return Ok(None); // no gate closed: nothing to look up (and no name to copy)
        }
        let payer = Payer::of(who);
        let Some(gate) = gates.by_payer.get_mut(&payer) else { return Ok(None) };
        let wait = if gate.open_at > now_us {
            gate.open_at - now_us
        } else if gate.probe_out {
            PROBE_RETRY_US
        } else {
            gate.probe_out = true;
            let closings = gate.closings;
            return Ok(Some(Probe { gate: Arc::clone(self), payer, closings }));
        };
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(wait)
    }

    /// Produces the gate refused so far.
    pub fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The core will take no produce of `payer` for `wait_us` from about `now_us` (it refused
    /// one, or one it took spent the quota).
    pub fn close(&self, payer: Payer, now_us: u64, wait_us: u64) {
        let Some(open_in) = wait_us.checked_sub(MARGIN_US).filter(|&w| w > 0) else { return };
        let mut gates = self.gates();
        let gate = gates.by_payer.entry(payer).or_insert(Gate {
            open_at: 0,
            closings: 0,
            probe_out: false,
        });
        gate.open_at = now_us.saturating_add(open_in);
        gate.closings += 1;
        if gates.by_payer.len() >= gates.sweep_at.max(FIRST_SWEEP_AT) {
            gates.by_payer.retain(|_, gate| gate.probe_out || gate.open_at > now_us);
            gates.sweep_at = 2 * gates.by_payer.len();
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let mut gates = self.gate.gates();
        let Some(gate) = gates.by_payer.get_mut(&self.payer) else { return };
        if gate.closings == self.closings {
            gates.by_payer.remove(&self.payer); // not refused, quota not spent: open for all
        } else {
            gate.probe_out = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000;

    fn user(name: &str) -> Principal {
        Principal::User { name: name.into(), id: narad_core::access::UserId(1) }
    }

    #[test]
    fn the_gate_closes_until_just_before_the_core_would_take_more() {
        let gate = Arc::new(QuotaGate::default());
        let flood = Payer::User("flood".into());
        assert!(matches!(gate.enter(&user("flood"), 0), Ok(None)), "no gate yet");
        gate.close(flood.clone(), SECOND, 2 * SECOND);
        assert_eq!(gate.enter(&user("flood"), SECOND).err(), Some(2 * SECOND - MARGIN_US));
        assert!(matches!(gate.enter(&Principal::Trusted, SECOND), Ok(None)), "payers are apart");
        assert!(
            matches!(gate.enter(&user("flood"), 3 * SECOND - MARGIN_US), Ok(Some(_))),
            "a probe"
        );
        assert_eq!(gate.refusals(), 1);
        gate.close(Payer::Anonymous, 0, MARGIN_US);
        assert!(matches!(gate.enter(&Principal::Trusted, 0), Ok(None)), "within the margin: none");
    }

    #[test]
    fn one_probe_at_a_time_goes_through_a_reopened_gate() {
        let gate = Arc::new(QuotaGate::default());
        let flood = Payer::User("flood".into());
        gate.close(flood.clone(), 0, SECOND);
        let probe = gate.enter(&user("flood"), SECOND).expect("open").expect("the probe");
        assert_eq!(
            gate.enter(&user("flood"), SECOND).err(),
            Some(PROBE_RETRY_US),
            "the herd waits"
        );
        // The core took the probe and it spent the quota again: closed, no probe out.
        gate.close(flood.clone(), SECOND, SECOND);
        drop(probe);
        assert_eq!(gate.enter(&user("flood"), SECOND + 1).err(), Some(SECOND - MARGIN_US - 1));
        // Reopened; the next probe is taken without spending it: the gate goes.
        let probe = gate.enter(&user("flood"), 3 * SECOND).expect("open").expect("a probe");
        drop(probe);
        assert!(matches!(gate.enter(&user("flood"), 3 * SECOND), Ok(None)));
        assert!(matches!(gate.enter(&user("flood"), 3 * SECOND), Ok(None)), "no probe: free again");
    }

    #[test]
    fn expired_gates_are_swept() {
        let gate = QuotaGate::default();
        for n in 0..10_000u64 {
            gate.close(Payer::User(format!("u{n}")), n * SECOND, SECOND / 2);
        }
        let held = gate.gates().by_payer.len();
        assert!(held < 2 * FIRST_SWEEP_AT, "{held} gates held");
    }
}
