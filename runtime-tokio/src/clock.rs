//! The node's clock. The core takes time as an input (`narad_core::Instant`, microseconds since
//! the Unix epoch) and must never see it go backwards, while the wall clock can step back (NTP).
//! `Clock` hands out wall-clock microseconds clamped to be monotonic, and converts the core's
//! deadlines into tokio instants for the driver's timer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use narad_core::Instant;

/// Milliseconds since the Unix epoch on the wall clock (for what is shown, never for the core).
pub fn unix_millis() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A monotonic view of the wall clock, owned by the driver task.
#[derive(Debug, Default)]
pub struct Clock {
    last: Instant,
}

impl Clock {
    /// Current time in microseconds since the Unix epoch, never earlier than a previous reading.
    pub fn now(&mut self) -> Instant {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.last = self.last.max(Instant(wall));
        self.last
    }

    /// Current time, but no earlier than `floor` (a deadline whose timer just fired: the tokio
    /// timer and the wall clock may disagree by a few microseconds).
    pub fn now_at_least(&mut self, floor: Instant) -> Instant {
        self.last = self.now().max(floor);
        self.last
    }

    /// The tokio instant at which the core's `deadline` falls, measured from a fresh reading.
    pub fn tokio_deadline(&mut self, deadline: Instant) -> tokio::time::Instant {
        let now = self.now();
        let wait = Duration::from_micros(deadline.micros_since(now));
        tokio::time::Instant::now() + wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_go_backwards() {
        let mut clock = Clock { last: Instant(u64::MAX - 1) };
        assert_eq!(clock.now(), Instant(u64::MAX - 1));
        let mut fresh = Clock::default();
        let a = fresh.now();
        let b = fresh.now();
        assert!(b >= a);
        assert!(a.0 > 1_600_000_000_000_000, "wall clock in microseconds since the epoch");
    }

    #[tokio::test]
    async fn past_deadlines_fire_immediately() {
        let mut clock = Clock::default();
        let now = clock.now();
        let before = tokio::time::Instant::now();
        assert!(clock.tokio_deadline(Instant(now.0 - 5_000_000)) <= tokio::time::Instant::now());
        let later = clock.tokio_deadline(now.plus_millis(1_000));
        assert!(later >= before + Duration::from_millis(900));
    }
}
