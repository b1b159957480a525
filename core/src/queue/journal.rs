//! The consumer journal: one append-only file per node (`consumers/<n>.journal`) holding what
//! queue consumers settled and how often each message was delivered (`entry.rs`), for every
//! partition the node owns (docs/design.md §4.8).
//!
//! Group commit, like the ingress WAL: entries staged while a write is in flight go out
//! together in the next write + `fdatasync`, and each waiter is answered when the write that
//! holds its entries is durable, so acks cost one flush per batch, not one each. With *linger*
//! on, a commit that would start smaller than the last one waits for more entries, at most the
//! last commit's duration (≤ `CONSUMER_JOURNAL_LINGER_MAX_US`) from its first entry: under load
//! batches stay fat instead of alternating with one-entry commits; a lone consumer (last batch
//! of one) never waits. A failed write
//! or sync latches the journal (dirty pages cannot be trusted after a failed fsync): queue
//! receives and settles answer 500 until a restart, and nothing else stops.
//!
//! Compaction: once the file passes its size bound, the next write is a new file holding an
//! *image* (every partition's durable state, then `ImageEnd`), created, written and synced
//! before anything else is appended to it; then the old file is deleted. At start-up the newest
//! file whose image is complete is the journal; an older one is stale (its deletion did not
//! happen), a newer one with an incomplete image is an interrupted compaction: both are
//! deleted. Only the current file may end in a torn tail (cut off at start-up); a damaged entry
//! followed by valid ones refuses start-up, as in every other log.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::entry::JournalEntry;
use super::state::{DurableQueue, PartitionQueue};
use crate::codec::{ScanEnd, put_frame, scan};
use crate::constants::CONSUMER_JOURNAL_LINGER_MAX_US;
use crate::ids::{Instant, PartitionKey};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::recovery_error::RecoveryError;

/// What a journal disk operation was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalIo {
    /// A group commit's write or sync.
    Append,
    /// Create, write or sync of a new file's image.
    Image,
    /// Deleting a replaced file, or cutting a torn tail found at start-up.
    Tidy,
}

/// The outcome of a completed group commit.
#[derive(Debug)]
pub struct Settled<W> {
    /// Waiters whose entries are durable.
    pub durable: Vec<W>,
    /// Waiters whose entries never will be (the journal latched).
    pub failed: Vec<W>,
    /// Syncs of the journal this completion ended (0 or 1), for the counters.
    pub synced: u64,
}

impl<W> Default for Settled<W> {
    fn default() -> Self {
        Settled { durable: Vec::new(), failed: Vec::new(), synced: 0 }
    }
}

struct Flight<W> {
    waiters: Vec<W>,
    ops_left: u32,
    error: Option<DiskError>,
    started: Instant,
}

/// What the linger rule remembers (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
struct Linger {
    enabled: bool,
    /// Waiters of the last completed commit, and how long it took.
    last_batch: usize,
    last_us: u64,
    /// When the first entry of the staged batch was staged.
    staged_since: Option<Instant>,
}

struct ImageWrite {
    file: u64,
    size: u64,
    ops_left: u32,
    error: Option<DiskError>,
}

/// See the module docs.
pub struct ConsumerJournal<W> {
    /// The file appended to now; `None` until the first image (a node that never had a queue
    /// consumer has no journal file).
    file: Option<u64>,
    size: u64,
    /// Bytes of the current file's image (0 for a file start-up found): the file is past its
    /// bound once it holds `compact_bytes` beyond its image, so an image larger than the bound
    /// does not make every write a new image (and none an append).
    image_bytes: u64,
    compact_bytes: u64,
    staged: Vec<u8>,
    staged_waiters: Vec<W>,
    flight: Option<Flight<W>>,
    image: Option<ImageWrite>,
    tidying: u32,
    latched: Option<String>,
    outbox: VecDeque<(JournalIo, DiskOp)>,
    linger: Linger,
}

/// What start-up found in the journal files.
#[derive(Debug, Default)]
pub struct RecoveredJournal {
    pub file: Option<u64>,
    /// Bytes of the current file's valid prefix.
    pub size: u64,
    /// The current file ends in a torn tail from `size` on: cut it before appending.
    pub torn: bool,
    /// Every partition's durable queue state.
    pub queues: BTreeMap<PartitionKey, DurableQueue>,
    /// Journal files to delete (stale or interrupted compactions).
    pub stale: Vec<u64>,
}

/// Rebuilds the journal's state from its files (by number).
pub fn recover(files: &BTreeMap<u64, Bytes>) -> Result<RecoveredJournal, RecoveryError> {
    let mut recovered = RecoveredJournal::default();
    for (&number, bytes) in files.iter().rev() {
        if recovered.file.is_some() {
            recovered.stale.push(number);
            continue;
        }
        match read_file(number, bytes)? {
            Some((queues, size, torn)) => {
                recovered.file = Some(number);
                recovered.queues = queues;
                recovered.size = size;
                recovered.torn = torn;
            }
            None => recovered.stale.push(number),
        }
    }
    recovered.stale.sort_unstable();
    Ok(recovered)
}

type FileState = (BTreeMap<PartitionKey, DurableQueue>, u64, bool);

/// One journal file: `None` if its image is incomplete (an interrupted compaction).
fn read_file(number: u64, bytes: &[u8]) -> Result<Option<FileState>, RecoveryError> {
    let file = FileId::ConsumerJournal { number }.relative_path();
    let scanned = scan(bytes);
    let mut queues: BTreeMap<PartitionKey, PartitionQueue> = BTreeMap::new();
    let mut in_image = true;
    for frame in &scanned.frames {
        let entry =
            JournalEntry::decode(frame.body(bytes)).ok_or_else(|| RecoveryError::Inconsistent {
                file: file.clone(),
                what: format!("an entry at byte {} does not decode", frame.pos),
            })?;
        match (in_image, entry) {
            (true, JournalEntry::State { key, frontier, acked, deliveries }) => {
                let durable = DurableQueue {
                    frontier,
                    acked: acked.into_iter().collect(),
                    deliveries: deliveries.into_iter().collect(),
                };
                queues.insert(key, PartitionQueue::from_durable(durable));
            }
            (true, JournalEntry::ImageEnd) => in_image = false,
            (false, JournalEntry::Delivered { key, offset, count }) => {
                queues.entry(key).or_default().on_count_durable(offset, count);
            }
            (false, JournalEntry::Acked { key, offset }) => {
                queues.entry(key).or_default().on_acked(offset);
            }
            (_, entry) => {
                return Err(RecoveryError::Inconsistent {
                    file,
                    what: format!("{entry:?} out of place at byte {}", frame.pos),
                });
            }
        }
    }
    if in_image {
        return Ok(None);
    }
    if let ScanEnd::Corrupt { bad_pos, next_valid_pos } = scanned.end {
        let (bad_pos, next_valid_pos) = (bad_pos as u64, next_valid_pos as u64);
        return Err(RecoveryError::CorruptLog { file, bad_pos, next_valid_pos });
    }
    let torn = matches!(scanned.end, ScanEnd::TornTail { .. });
    let queues = queues.into_iter().map(|(key, q)| (key, q.durable().clone())).collect();
    Ok(Some((queues, scanned.valid_len() as u64, torn)))
}

impl<W> ConsumerJournal<W> {
    /// The journal as start-up found it; `compact_bytes` bounds a file before the next image.
    pub fn recovered(found: &RecoveredJournal, compact_bytes: u64) -> ConsumerJournal<W> {
        let mut journal = ConsumerJournal {
            file: found.file,
            size: found.size,
            image_bytes: 0,
            compact_bytes,
            staged: Vec::new(),
            staged_waiters: Vec::new(),
            flight: None,
            image: None,
            tidying: 0,
            latched: None,
            outbox: VecDeque::new(),
            linger: Linger::default(),
        };
        if let (Some(number), true) = (found.file, found.torn) {
            let op = DiskOp::Truncate { file: FileId::ConsumerJournal { number }, len: found.size };
            journal.tidy(op);
        }
        journal
    }

    /// Turns the linger rule on or off (`Config::consumer_journal_linger`).
    pub fn with_linger(mut self, enabled: bool) -> Self {
        self.linger.enabled = enabled;
        self
    }

    fn tidy(&mut self, op: DiskOp) {
        self.tidying += 1;
        self.outbox.push_back((JournalIo::Tidy, op));
    }

    /// Why the journal no longer writes, if it latched.
    pub fn latched(&self) -> Option<&str> {
        self.latched.as_deref()
    }

    /// Stages `entries` for the next group commit; `waiter` is answered when they are durable
    /// (or failed). Refused (waiter given back) once the journal latched.
    pub fn stage(&mut self, entries: &[JournalEntry], waiter: W, now: Instant) -> Result<(), W> {
        if self.latched.is_some() {
            return Err(waiter);
        }
        self.linger.staged_since.get_or_insert(now);
        for entry in entries {
            put_frame(&mut self.staged, &entry.encode());
        }
        self.staged_waiters.push(waiter);
        Ok(())
    }

    /// True when the next write must be a new file's image (there is no file yet, or the
    /// current one is past its bound) and one can start now: the caller answers with
    /// `begin_image`.
    pub fn wants_image(&self) -> bool {
        self.latched.is_none()
            && self.flight.is_none()
            && self.image.is_none()
            && !self.staged_waiters.is_empty()
            && self.file.is_none_or(|_| self.past_bound())
    }

    /// The current file holds `compact_bytes` beyond its image: compact before the next write.
    fn past_bound(&self) -> bool {
        self.size >= self.compact_bytes.saturating_add(self.image_bytes)
    }

    /// Starts writing a new file holding `states` (every partition's durable state).
    pub fn begin_image(&mut self, states: Vec<JournalEntry>) {
        let number = self.file.map_or(0, |n| n + 1);
        let file = FileId::ConsumerJournal { number };
        let mut data = Vec::new();
        for state in states.iter().chain([&JournalEntry::ImageEnd]) {
            put_frame(&mut data, &state.encode());
        }
        let size = data.len() as u64;
        self.outbox.push_back((JournalIo::Image, DiskOp::Create { file }));
        self.outbox.push_back((
            JournalIo::Image,
            DiskOp::Write { file, offset: 0, data: Bytes::from(data) },
        ));
        self.outbox.push_back((JournalIo::Image, DiskOp::Sync { file }));
        self.image = Some(ImageWrite { file: number, size, ops_left: 3, error: None });
    }

    /// Starts the next group commit if one can start (and need not linger at `now`).
    pub fn pump(&mut self, now: Instant) {
        if self.latched.is_some() || self.flight.is_some() || self.image.is_some() {
            return;
        }
        let Some(number) = self.file else { return };
        if self.staged_waiters.is_empty() || self.past_bound() {
            return;
        }
        if self.linger_until().is_some_and(|until| now < until) {
            return;
        }
        self.linger.staged_since = None;
        let file = FileId::ConsumerJournal { number };
        let data = Bytes::from(std::mem::take(&mut self.staged));
        let offset = self.size;
        self.size += data.len() as u64;
        self.outbox.push_back((JournalIo::Append, DiskOp::Write { file, offset, data }));
        self.outbox.push_back((JournalIo::Append, DiskOp::Sync { file }));
        let waiters = std::mem::take(&mut self.staged_waiters);
        self.flight = Some(Flight { waiters, ops_left: 2, error: None, started: now });
    }

    /// While the staged batch lingers (a commit could start but waits for more entries), when
    /// it stops waiting: the node wakes then.
    pub fn linger_until(&self) -> Option<Instant> {
        let Linger { enabled, last_batch, last_us, staged_since } = self.linger;
        let idle = self.latched.is_none() && self.flight.is_none() && self.image.is_none();
        if !enabled || !idle || self.staged_waiters.len() >= last_batch {
            return None;
        }
        Some(staged_since?.plus_micros(last_us.min(CONSUMER_JOURNAL_LINGER_MAX_US)))
    }

    /// The next disk operation to issue.
    pub fn poll_io(&mut self) -> Option<(JournalIo, DiskOp)> {
        self.outbox.pop_front()
    }

    /// A journal operation completed.
    pub fn on_io(
        &mut self,
        io: JournalIo,
        result: Result<DiskDone, DiskError>,
        now: Instant,
    ) -> Settled<W> {
        match io {
            JournalIo::Append => self.on_append(result, now),
            JournalIo::Image => self.on_image(result),
            JournalIo::Tidy => {
                self.tidying = self.tidying.saturating_sub(1);
                if let Err(error) = result {
                    tracing::warn!(%error, "tidying the consumer journal failed (a stale file stays until the next start-up)");
                }
                Settled::default()
            }
        }
    }

    fn on_append(&mut self, result: Result<DiskDone, DiskError>, now: Instant) -> Settled<W> {
        let flight = self.flight.as_mut().expect("invariant: an append completes a flight");
        flight.ops_left -= 1;
        if let Err(error) = result {
            flight.error.get_or_insert(error);
        }
        if flight.ops_left > 0 {
            return Settled::default();
        }
        let flight = self.flight.take().expect("checked above");
        self.linger.last_batch = flight.waiters.len();
        self.linger.last_us = now.micros_since(flight.started);
        match flight.error {
            None => Settled { durable: flight.waiters, failed: Vec::new(), synced: 1 },
            Some(error) => {
                let mut failed = flight.waiters;
                failed.append(&mut self.latch(&error));
                Settled { durable: Vec::new(), failed, synced: 1 }
            }
        }
    }

    fn on_image(&mut self, result: Result<DiskDone, DiskError>) -> Settled<W> {
        let image = self.image.as_mut().expect("invariant: an image op completes an image");
        image.ops_left -= 1;
        if let Err(error) = result {
            image.error.get_or_insert(error);
        }
        if image.ops_left > 0 {
            return Settled::default();
        }
        let image = self.image.take().expect("checked above");
        if let Some(error) = image.error {
            // A half-written image might look complete at the next start-up and hide what we
            // would append to the old file: stop writing instead.
            return Settled { durable: Vec::new(), failed: self.latch(&error), synced: 1 };
        }
        if let Some(old) = self.file.replace(image.file) {
            self.tidy(DiskOp::Delete { file: FileId::ConsumerJournal { number: old } });
        }
        self.size = image.size;
        self.image_bytes = image.size;
        Settled { synced: 1, ..Settled::default() }
    }

    /// Stops writing for good; gives back every staged waiter.
    fn latch(&mut self, error: &DiskError) -> Vec<W> {
        tracing::error!(%error, "the consumer journal failed: queue receives and acks answer 500 until a restart");
        self.latched = Some(error.to_string());
        self.staged.clear();
        std::mem::take(&mut self.staged_waiters)
    }

    /// Journal operations handed out by `poll_io` and not yet completed
    /// (`Node::check_invariants`).
    pub fn ops_in_flight(&self) -> usize {
        let flight = self.flight.as_ref().map_or(0, |f| f.ops_left);
        let image = self.image.as_ref().map_or(0, |i| i.ops_left);
        (flight + image + self.tidying) as usize - self.outbox.len()
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
