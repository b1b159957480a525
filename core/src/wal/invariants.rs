//! Cheap self-checks of the WAL's bookkeeping and its load gauges, for `Node::check_invariants`
//! (the simulator runs it after every step) and for the node's produce bound: sequences in order,
//! the cursor inside the segments it reads, every operation handed out counted.

use super::Wal;

/// WAL disk operations handed out and not yet completed, by what they are for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutstandingIo {
    pub batch: u32,
    pub checkpoint: u32,
    pub cursor_reads: u32,
    pub repairs: u32,
    pub prewrites: u32,
}

impl<W> Wal<W> {
    /// Produces waiting for a group commit (staged or in flight).
    pub fn produce_waiters(&self) -> usize {
        self.staging.waiters() + self.in_flight.as_ref().map_or(0, |f| f.waiters.len())
    }

    /// Bytes staged for the next group commit.
    pub fn staged_bytes(&self) -> usize {
        self.staging.bytes()
    }

    /// Bytes of bulk requests staged (`staging.rs`).
    pub fn staged_bulk_bytes(&self) -> usize {
        self.staging.bulk_bytes()
    }

    /// Where the dispatcher's cursor reads next (equals the dispatcher's `read_upto`).
    pub fn cursor_seq(&self) -> u64 {
        self.cursor.seq
    }

    /// Operations the WAL expects completions for (its outbox is empty after every pump).
    pub fn outstanding_io(&self) -> OutstandingIo {
        OutstandingIo {
            batch: self.in_flight.as_ref().map_or(0, |f| f.ios_left),
            checkpoint: self.checkpoint.in_flight.map_or(0, |write| write.ios_left),
            cursor_reads: u32::from(self.read_in_flight),
            repairs: self.repairs_left,
            prewrites: self.prewrite_ios(),
        }
    }

    /// Durable checkpoint ≤ target ≤ cursor ≤ durable sequence ≤ next sequence; the batch in
    /// flight starts at the durable sequence and ends at the next (staged records have no
    /// sequence yet); the
    /// cursor sits in a known segment, at most at its durable end.
    pub fn check_invariants(&self) -> Result<(), String> {
        let cp = &self.checkpoint;
        let chain = [cp.durable, cp.target, self.cursor.seq, self.durable_seq, self.next_seq];
        if chain.windows(2).any(|w| w[0] > w[1]) {
            return Err(format!(
                "wal: checkpoint {} ≤ target {} ≤ cursor {} ≤ durable {} ≤ next {} broken",
                chain[0], chain[1], chain[2], chain[3], chain[4]
            ));
        }
        self.check_batches()?;
        self.check_segments()?;
        self.check_chunked_request()?;
        self.staging.check().map_err(|error| format!("wal: staging: {error}"))?;
        if let Some(write) = cp.in_flight
            && (write.ios_left == 0 || write.value.is_some_and(|value| value > cp.target))
        {
            let (value, ios) = (write.value, write.ios_left);
            return Err(format!("wal: checkpoint write of {value:?} ({ios} ops) past target"));
        }
        Ok(())
    }

    fn check_batches(&self) -> Result<(), String> {
        let mut next = self.durable_seq;
        if let Some(flight) = &self.in_flight {
            if flight.first_seq != next || flight.ios_left == 0 {
                let first = flight.first_seq;
                return Err(format!("wal: batch in flight at {first}, durable sequence {next}"));
            }
            next += flight.records.len() as u64;
        }
        if self.latched.is_none() && next != self.next_seq {
            return Err(format!("wal: records end at {next}, next sequence {}", self.next_seq));
        }
        Ok(())
    }

    /// The cursor's hold is a durable record, at or before the request being written.
    fn check_chunked_request(&self) -> Result<(), String> {
        let Some(hold) = self.hold_from else { return Ok(()) };
        if hold >= self.durable_seq || self.open_request.is_some_and(|open| open < hold) {
            let (durable, open) = (self.durable_seq, self.open_request);
            return Err(format!(
                "wal: cursor held at {hold}, durable sequence {durable}, open request {open:?}"
            ));
        }
        Ok(())
    }

    fn check_segments(&self) -> Result<(), String> {
        let Some(segment) = self.segments.get(&self.cursor.segment) else {
            // Before the first group commit (or after a recovery that found everything
            // dispatched) the cursor waits at the start of the segment the next batch creates.
            let c = self.cursor;
            if c.offset == 0 && c.segment == c.seq && c.seq == self.durable_seq {
                return Ok(());
            }
            return Err(format!("wal: cursor in unknown segment {}", self.cursor.segment));
        };
        if self.cursor.offset > segment.durable || segment.durable > segment.written {
            let (at, durable, written) = (self.cursor.offset, segment.durable, segment.written);
            return Err(format!(
                "wal: cursor at {at}, segment durable {durable}, written {written}"
            ));
        }
        match self.segments.last_key_value() {
            Some((&first, _)) if first > self.next_seq => {
                Err(format!("wal: active segment {first} past next sequence {}", self.next_seq))
            }
            _ => Ok(()),
        }
    }
}
