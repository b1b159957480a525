//! Produce quotas: how many payload bytes per second each principal may have one node stage.
//!
//! A flood of valid large batches is not an attack the HTTP bounds can refuse: every request is
//! well formed and fits the in-flight budget. What it takes is the disk: every byte is written
//! twice (WAL, then partition log) and every other client's fsync waits behind those writes. A
//! quota bounds what one principal may take, so the others keep their latency.
//!
//! The rule (a generic cell rate algorithm over bytes): each payer has an instant `paid_until`
//! by which what it was admitted so far would have been sent at the quota's rate. A produce is
//! admitted while `paid_until` is at most `QUOTA_BURST_MS` ahead of now, and then moves it on by
//! the produce's bytes at the rate (from now, if it lagged behind). So over any span of `T`, a
//! payer's admitted produces, less the last one, hold at most `rate × (T + QUOTA_BURST_MS)`
//! bytes; a produce of any size passes once its payer is paid up, however low the rate, and a
//! payer who stays under the rate is never refused. A refused produce changes nothing and is
//! told when to retry (`Retry-After`).
//!
//! Per node: each node keeps its own ledger, in memory (a restart forgets it), so a principal
//! producing through `n` nodes may stage `n` quotas' worth. With access control off every client
//! is the one anonymous payer: the quota is then the node's.

use std::collections::BTreeMap;

use crate::access::Principal;
use crate::constants::QUOTA_BURST_MS;
use crate::ids::Instant;

/// Whom a produce is charged to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Payer {
    /// Every client while access control is off.
    Anonymous,
    /// A user, by name (a user deleted and created again keeps the ledger of the name).
    User(String),
}

impl Payer {
    /// The payer of `who`'s produces.
    pub fn of(who: &Principal) -> Payer {
        match who {
            Principal::Trusted => Payer::Anonymous,
            Principal::User { name, .. } => Payer::User(name.clone()),
        }
    }
}

/// A produce refused by the quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaRefusal {
    /// Microseconds until the payer may produce again.
    pub wait_us: u64,
    /// The quota, in bytes per second.
    pub bytes_per_sec: u64,
}

impl QuotaRefusal {
    /// Whole seconds until the payer may produce again, rounded up (a `Retry-After`).
    pub fn retry_after_secs(&self) -> u64 {
        retry_after_secs(self.wait_us)
    }
}

/// Whole seconds of a wait of `wait_us`, rounded up, at least 1 (a `Retry-After`).
pub fn retry_after_secs(wait_us: u64) -> u64 {
    wait_us.div_ceil(1_000_000).max(1)
}

/// One node's ledger of produce quotas.
#[derive(Clone, Debug)]
pub struct ProduceQuota {
    /// 0: no quota.
    bytes_per_sec: u64,
    burst_us: u64,
    paid_until: BTreeMap<Payer, Instant>,
    /// The ledger is swept of paid-up payers when it reaches this many.
    sweep_at: usize,
}

/// Payers the ledger holds before its first sweep.
const FIRST_SWEEP_AT: usize = 64;

impl ProduceQuota {
    /// A ledger charging `bytes_per_sec` per payer; 0 admits everything.
    pub fn new(bytes_per_sec: u64) -> ProduceQuota {
        ProduceQuota {
            bytes_per_sec,
            burst_us: QUOTA_BURST_MS * 1_000,
            paid_until: BTreeMap::new(),
            sweep_at: FIRST_SWEEP_AT,
        }
    }

    /// The quota in bytes per second (0: none).
    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }

    /// Admits a produce of `bytes` by `payer` at `now` and charges it, or refuses it. Admitted:
    /// the microseconds until the payer may produce again (0: at once).
    pub fn admit(&mut self, payer: Payer, bytes: u64, now: Instant) -> Result<u64, QuotaRefusal> {
        if self.bytes_per_sec == 0 {
            return Ok(0);
        }
        let paid = self.paid_until.get(&payer).copied().unwrap_or(now).max(now);
        let ahead = paid.micros_since(now);
        if ahead > self.burst_us {
            let wait_us = ahead - self.burst_us;
            return Err(QuotaRefusal { wait_us, bytes_per_sec: self.bytes_per_sec });
        }
        let paid = paid.plus_micros(self.cost_us(bytes));
        self.paid_until.insert(payer, paid);
        self.sweep(now);
        Ok(paid.micros_since(now).saturating_sub(self.burst_us))
    }

    /// Microseconds `bytes` take at the quota's rate, rounded up.
    fn cost_us(&self, bytes: u64) -> u64 {
        let cost = (u128::from(bytes) * 1_000_000).div_ceil(u128::from(self.bytes_per_sec));
        u64::try_from(cost).unwrap_or(u64::MAX)
    }

    /// Forgets payers that are paid up (as good as never seen) once the ledger has grown to
    /// `sweep_at`, then lets it grow to twice what is left: each sweep's cost is paid for by as
    /// many admissions.
    fn sweep(&mut self, now: Instant) {
        if self.paid_until.len() < self.sweep_at {
            return;
        }
        self.paid_until.retain(|_, paid| *paid > now);
        self.sweep_at = (2 * self.paid_until.len()).max(FIRST_SWEEP_AT);
    }

    /// Payers the ledger holds.
    #[cfg(test)]
    fn payers(&self) -> usize {
        self.paid_until.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn at_ms(ms: u64) -> Instant {
        Instant(1_000_000_000 + ms * 1_000)
    }

    fn user(name: &str) -> Payer {
        Payer::User(name.to_string())
    }

    #[test]
    fn no_quota_admits_everything() {
        let mut quota = ProduceQuota::new(0);
        for _ in 0..1_000 {
            assert!(quota.admit(user("a"), 16 * MIB, at_ms(0)).is_ok());
        }
        assert_eq!(quota.payers(), 0);
    }

    #[test]
    fn a_flood_is_held_to_the_rate_plus_the_burst() {
        let mut quota = ProduceQuota::new(4 * MIB);
        let mut admitted = 0;
        // One 1 MiB produce every 10 ms for 10 s: 100 MiB/s asked of a 4 MiB/s quota.
        for tick in 0..1_000 {
            if quota.admit(user("flood"), MIB, at_ms(tick * 10)).is_ok() {
                admitted += MIB;
            }
        }
        let bound = 4 * MIB * (10_000 + QUOTA_BURST_MS) / 1_000 + MIB;
        assert!(admitted <= bound, "admitted {admitted} > {bound}");
        assert!(admitted >= 4 * MIB * 9, "the rate is given, not starved: {admitted}");
    }

    #[test]
    fn a_payer_under_the_rate_is_never_refused_and_payers_are_apart() {
        let mut quota = ProduceQuota::new(MIB);
        for tick in 0..2_000 {
            let now = at_ms(tick * 10);
            // 10 KiB every 10 ms: 1,000 KiB/s, just under 1 MiB/s.
            assert!(quota.admit(user("steady"), 10 * 1024, now).is_ok(), "tick {tick}");
            let _ = quota.admit(user("flood"), 16 * MIB, now);
        }
    }

    #[test]
    fn a_batch_larger_than_a_second_of_quota_passes_once_paid_up() {
        let mut quota = ProduceQuota::new(MIB);
        assert_eq!(quota.admit(Payer::Anonymous, 16 * MIB, at_ms(0)), Ok(15_000_000), "spent");
        let refusal = quota.admit(Payer::Anonymous, 1, at_ms(0)).unwrap_err();
        // 16 s of debt, 1 s of it forgiven as burst.
        assert_eq!(refusal, QuotaRefusal { wait_us: 15_000_000, bytes_per_sec: MIB });
        assert_eq!(refusal.retry_after_secs(), 15);
        let late = quota.admit(Payer::Anonymous, 1, at_ms(14_500)).unwrap_err();
        assert_eq!((late.wait_us, late.retry_after_secs()), (500_000, 1));
        assert!(quota.admit(Payer::Anonymous, 16 * MIB, at_ms(15_000)).is_ok());
    }

    #[test]
    fn a_refusal_charges_nothing() {
        let mut quota = ProduceQuota::new(MIB);
        assert_eq!(quota.admit(user("a"), MIB / 2, at_ms(0)), Ok(0), "within the burst");
        assert_eq!(quota.admit(user("a"), 5 * MIB / 2, at_ms(0)), Ok(2_000_000));
        for ms in 0..1_000 {
            assert!(quota.admit(user("a"), MIB, at_ms(ms)).is_err());
        }
        assert!(quota.admit(user("a"), MIB, at_ms(2_000)).is_ok(), "only the 3 MiB were owed");
    }

    #[test]
    fn paid_up_payers_are_swept_from_the_ledger() {
        let mut quota = ProduceQuota::new(MIB);
        for n in 0..10_000 {
            let _ = quota.admit(user(&format!("u{n}")), 1024, at_ms(n * 10));
        }
        assert!(quota.payers() < 2 * FIRST_SWEEP_AT, "{} payers held", quota.payers());
    }

    #[test]
    fn the_anonymous_payer_is_everyone_without_access_control() {
        let named = Principal::User { name: "a".into(), id: crate::access::UserId(1) };
        assert_eq!(Payer::of(&Principal::Trusted), Payer::Anonymous);
        assert_eq!(Payer::of(&named), user("a"));
    }
}
