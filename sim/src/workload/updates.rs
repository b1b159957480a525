//! Topic updates of the admin client (`PATCH /v1/topics/{t}`): on a share of seeds, now and then
//! a live topic's retention changes (either setting or both, the size limit sometimes removed),
//! and one update in ten is deliberately out of bounds, which must be refused with 400. Every
//! draw comes from the workload's update stream, so seeds without updates are unchanged.

use narad_core::TopicChange;
use narad_core::constants::{MAX_RETENTION_MS, MIN_RETENTION_BYTES, MIN_RETENTION_MS};
use rand::RngExt;

use super::{Pending, Workload};

impl Workload {
    /// An update to send now, if the seed has updates and one is due.
    pub(super) fn update_next(&mut self) -> Option<Pending> {
        if self.cfg.update_prob <= 0.0 || !self.update_rng.random_bool(self.cfg.update_prob) {
            return None;
        }
        let live = self.topics.live();
        if live.is_empty() {
            return None;
        }
        let (name, _, _) = live[self.update_rng.random_range(0..live.len())].clone();
        let valid = !self.update_rng.random_bool(0.1);
        let change = if valid { self.valid_change() } else { self.invalid_change() };
        Some(Pending::Update { name, change, valid })
    }

    fn valid_change(&mut self) -> TopicChange {
        let rng = &mut self.update_rng;
        let ms = |rng: &mut rand_chacha::ChaCha8Rng| match rng.random_range(0..4) {
            0 => 0,
            1 => MIN_RETENTION_MS,
            2 => MAX_RETENTION_MS,
            _ => rng.random_range(MIN_RETENTION_MS..=30 * 24 * 3_600_000),
        };
        let bytes = |rng: &mut rand_chacha::ChaCha8Rng| match rng.random_range(0..3) {
            0 => None,
            _ => Some(rng.random_range(MIN_RETENTION_BYTES..=MIN_RETENTION_BYTES * 1_024)),
        };
        match rng.random_range(0..3) {
            0 => TopicChange { retention_ms: Some(ms(rng)), retention_bytes: None },
            1 => TopicChange { retention_ms: None, retention_bytes: Some(bytes(rng)) },
            _ => TopicChange { retention_ms: Some(ms(rng)), retention_bytes: Some(bytes(rng)) },
        }
    }

    fn invalid_change(&mut self) -> TopicChange {
        match self.update_rng.random_range(0..3) {
            0 => TopicChange::default(),
            1 => TopicChange {
                retention_ms: Some(self.update_rng.random_range(1..MIN_RETENTION_MS)),
                retention_bytes: None,
            },
            _ => TopicChange {
                retention_ms: None,
                retention_bytes: Some(Some(self.update_rng.random_range(0..MIN_RETENTION_BYTES))),
            },
        }
    }
}
