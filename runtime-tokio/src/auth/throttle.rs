//! The login throttle: after `FREE_FAILURES` wrong passwords in a row for an existing user, one
//! try per `RETRY_INTERVAL` (429 with `Retry-After` in between, without running the KDF), until a
//! right password resets it. Only existing users are tracked (a name that is no user costs no KDF
//! run and is answered 401 at once), so the table holds at most one entry per user, and an entry
//! untouched for `FORGET_AFTER` is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Wrong passwords in a row a user may send before the throttle applies.
pub const FREE_FAILURES: u32 = 5;
/// Once throttled, how often a user may try again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(12);
/// A failure streak this old is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// The table is swept of forgotten streaks when it grows past this.
const SWEEP_AT_ENTRIES: usize = 1_024;

#[derive(Clone, Copy, Debug)]
struct Streak {
    failures: u32,
    last: Instant,
}

/// Failure streaks by user name.
#[derive(Default)]
pub struct LoginThrottle {
    streaks: Mutex<HashMap<String, Streak>>,
}

impl LoginThrottle {
    /// `Err(wait)` while `name` is throttled: how long until its next try.
    pub fn check(&self, name: &str, now: Instant) -> Result<(), Duration> {
        let streaks = self.streaks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match streaks.get(name) {
            Some(streak) if streak.failures >= FREE_FAILURES => {
                let next = streak.last + RETRY_INTERVAL;
                if now < next { Err(next - now) } else { Ok(()) }
            }
            _ => Ok(()),
        }
    }

    /// A wrong password for `name`.
    pub fn failed(&self, name: &str, now: Instant) {
        let mut streaks = self.streaks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if streaks.len() >= SWEEP_AT_ENTRIES {
            streaks.retain(|_, streak| now.duration_since(streak.last) < FORGET_AFTER);
        }
        let streak = streaks.entry(name.to_string()).or_insert(Streak { failures: 0, last: now });
        if now.duration_since(streak.last) >= FORGET_AFTER {
            streak.failures = 0;
        }
        streak.failures = streak.failures.saturating_add(1);
        streak.last = now;
    }

    /// A right password for `name`: its streak ends.
    pub fn succeeded(&self, name: &str) {
        self.streaks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_then_one_try_per_interval_until_a_success() {
        let throttle = LoginThrottle::default();
        let start = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(throttle.check("ann", start), Ok(()));
            throttle.failed("ann", start);
        }
        assert_eq!(throttle.check("ann", start), Err(RETRY_INTERVAL));
        assert_eq!(throttle.check("bob", start), Ok(()), "other users are not throttled");
        let later = start + RETRY_INTERVAL;
        assert_eq!(throttle.check("ann", later), Ok(()), "one try after the interval");
        throttle.failed("ann", later);
        assert_eq!(
            throttle.check("ann", later + Duration::from_secs(2)),
            Err(RETRY_INTERVAL - Duration::from_secs(2))
        );
        throttle.succeeded("ann");
        assert_eq!(throttle.check("ann", later), Ok(()), "a success resets");
    }

    #[test]
    fn an_old_streak_is_forgotten() {
        let throttle = LoginThrottle::default();
        let start = Instant::now();
        for _ in 0..FREE_FAILURES {
            throttle.failed("ann", start);
        }
        throttle.failed("ann", start + FORGET_AFTER);
        assert_eq!(throttle.check("ann", start + FORGET_AFTER), Ok(()), "a fresh streak of one");
    }
}
