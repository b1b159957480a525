//! The node's clock. The core takes time as an input (`narad_core::Instant`, microseconds since
//! the Unix epoch) and must never see it go backwards, while the wall clock can step back (NTP).
//! `Clock` hands out wall-clock microseconds (from the `WallClock` seam) clamped to be
//! monotonic, and converts the core's deadlines into tokio instants for the driver's timer.

use std::sync::Arc;
use std::time::Duration;

use narad_core::Instant;

use crate::env::{SystemClock, WallClock};

/// Milliseconds since the Unix epoch on the system clock (for what the CLI shows).
pub fn unix_millis() -> u64 {
    SystemClock.unix_millis()
}

/// A monotonic view of the wall clock, owned by the driver task.
pub struct Clock {
    wall: Arc<dyn WallClock>,
    last: Instant,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new(Arc::new(SystemClock))
    }
}

impl Clock {
    /// A monotonic view of `wall`.
    pub fn new(wall: Arc<dyn WallClock>) -> Clock {
        Clock { wall, last: Instant(0) }
    }

    /// The wall clock this view reads.
    pub fn wall(&self) -> Arc<dyn WallClock> {
        Arc::clone(&self.wall)
    }

    /// Current time in microseconds since the Unix epoch, never earlier than a previous reading.
    pub fn now(&mut self) -> Instant {
        self.last = self.last.max(Instant(self.wall.unix_micros()));
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
        let mut clock = Clock { last: Instant(u64::MAX - 1), ..Clock::default() };
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
