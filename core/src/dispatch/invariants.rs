//! Cheap self-checks of the dispatcher's bookkeeping, returning what broke instead of panicking.
//! `check` costs a few map look-ups and runs in `Node::check_invariants` (the simulator's host
//! runs it after every input); `check_deep` also walks every held record and destination and
//! runs in `Node::check_invariants_deep` (every few inputs) and in the dispatcher's own tests.

use super::Dispatcher;
use crate::constants::{COMMIT_FANOUT, LOOKAHEAD_WINDOWS, WINDOW_MAX_RECORDS};
use crate::partition::CommitId;

impl Dispatcher {
    /// Whether commit `id` is in flight.
    pub fn is_in_flight(&self, id: CommitId) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// checkpoint ≤ read_upto; every sequence in between is held or done ahead; held records and
    /// the skip set lie within [checkpoint, read_upto) and within the window and lookahead
    /// bounds; at most `COMMIT_FANOUT` commits fly, each to a destination that knows it.
    pub fn check(&self) -> Result<(), String> {
        let (checkpoint, upto) = (self.checkpoint, self.read_upto);
        if checkpoint > upto {
            return Err(format!("dispatch: checkpoint {checkpoint} past read_upto {upto}"));
        }
        let span = upto - checkpoint;
        let (held, done, frozen) = (self.held.len(), self.done_ahead.len(), self.frozen.len());
        if span != (held + done + frozen) as u64 {
            return Err(format!(
                "dispatch: span {span} ≠ {held} held + {done} done ahead + {frozen} frozen"
            ));
        }
        if self.held.len() > WINDOW_MAX_RECORDS {
            return Err(format!("dispatch: {} records held, window max", self.held.len()));
        }
        if span > (LOOKAHEAD_WINDOWS * WINDOW_MAX_RECORDS) as u64 {
            return Err(format!("dispatch: read {span} past the checkpoint, beyond lookahead"));
        }
        self.check_ranges()?;
        self.check_in_flight()
    }

    /// `check`, and every held record is outside the skip set, every destination's commit in
    /// flight is known.
    pub fn check_deep(&self) -> Result<(), String> {
        self.check()?;
        if let Some(seq) = self.held.keys().find(|seq| self.done_ahead.contains(seq)) {
            return Err(format!("dispatch: {seq} both held and done ahead"));
        }
        for (key, dest) in &self.destinations {
            if let Some(id) = dest.in_flight
                && self.in_flight.get(&id).is_none_or(|f| f.target != *key)
            {
                return Err(format!("dispatch: {key} has commit {} in flight, unknown", id.0));
            }
        }
        Ok(())
    }

    fn check_ranges(&self) -> Result<(), String> {
        let (checkpoint, upto) = (self.checkpoint, self.read_upto);
        let held = self.held.first_key_value().map(|(&s, _)| s).zip(self.held.keys().next_back());
        if let Some((first, &last)) = held
            && (first < checkpoint || last >= upto)
        {
            return Err(format!("dispatch: held {first}..={last} outside {checkpoint}..{upto}"));
        }
        let done = self.done_ahead.first().zip(self.done_ahead.last());
        if let Some((&first, &last)) = done
            && (first <= checkpoint || last >= upto)
        {
            return Err(format!("dispatch: done ahead {first}..={last}, checkpoint {checkpoint}"));
        }
        Ok(())
    }

    fn check_in_flight(&self) -> Result<(), String> {
        if self.in_flight.len() > COMMIT_FANOUT {
            return Err(format!("dispatch: {} commits in flight", self.in_flight.len()));
        }
        for (id, flight) in &self.in_flight {
            let known =
                self.destinations.get(&flight.target).is_some_and(|d| d.in_flight == Some(*id));
            if !known {
                let target = flight.target;
                return Err(format!(
                    "dispatch: commit {} in flight to {target}, not in its destination",
                    id.0
                ));
            }
            if let Some(seq) = flight.seqs.iter().find(|seq| !self.held.contains_key(seq)) {
                return Err(format!("dispatch: commit {} carries {seq}, not held", id.0));
            }
        }
        Ok(())
    }
}
