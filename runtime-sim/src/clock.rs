//! The simulated clock and the event queue: one `BTreeMap` ordered by (time, sequence), so events
//! at the same instant run in the order they were scheduled and a run is a pure function of its
//! seed. Popping an event advances the clock to its time; time never goes backwards.

use std::collections::BTreeMap;

use narad_core::Instant;

/// A deterministic discrete-event queue with its clock.
pub struct EventQueue<E> {
    now: Instant,
    seq: u64,
    popped: u64,
    events: BTreeMap<(Instant, u64), E>,
}

impl<E> EventQueue<E> {
    /// An empty queue whose clock starts at `start`.
    pub fn new(start: Instant) -> Self {
        EventQueue { now: start, seq: 0, popped: 0, events: BTreeMap::new() }
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// How many events have been popped (the `e=` of trace lines).
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Schedules `event` at `at` (or now, if `at` is in the past).
    pub fn push_at(&mut self, at: Instant, event: E) {
        let at = at.max(self.now);
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }

    /// Schedules `event` `micros` microseconds from now.
    pub fn push_after(&mut self, micros: u64, event: E) {
        self.push_at(Instant(self.now.0.saturating_add(micros)), event);
    }

    /// Time of the next event, if any.
    pub fn peek_time(&self) -> Option<Instant> {
        self.events.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Removes the next event and advances the clock to its time.
    pub fn pop(&mut self) -> Option<E> {
        let ((at, _), event) = self.events.pop_first()?;
        debug_assert!(at >= self.now, "invariant: events are never scheduled in the past");
        self.now = at;
        self.popped += 1;
        Some(event)
    }

    /// Advances the clock to `at` without running anything (no event may be due before it).
    pub fn advance_to(&mut self, at: Instant) {
        assert!(self.peek_time().is_none_or(|next| next >= at), "skipping a due event");
        self.now = self.now.max(at);
    }

    /// Removes every waiting event that `pick` selects, in the order they would have run.
    pub fn take_where(&mut self, mut pick: impl FnMut(&E) -> bool) -> Vec<E> {
        self.events.extract_if(.., |_, event| pick(event)).map(|(_, event)| event).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::new(Instant(100));
        q.push_at(Instant(300), "c");
        q.push_at(Instant(200), "a");
        q.push_at(Instant(200), "b");
        q.push_at(Instant(50), "now");
        assert_eq!(q.pop(), Some("now"));
        assert_eq!(q.now(), Instant(100));
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.pop(), Some("b"));
        assert_eq!(q.pop(), Some("c"));
        assert_eq!(q.now(), Instant(300));
        assert_eq!(q.popped(), 4);
        assert!(q.pop().is_none());
    }

    #[test]
    fn takes_selected_events_in_run_order() {
        let mut q = EventQueue::new(Instant(0));
        for (at, e) in [(30, 3), (10, 1), (20, 2), (10, 4)] {
            q.push_at(Instant(at), e);
        }
        assert_eq!(q.take_where(|e| *e != 2), vec![1, 4, 3]);
        assert_eq!((q.len(), q.pop()), (1, Some(2)));
    }
}
