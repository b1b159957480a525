//! The consumer journal against an in-memory disk: group commit, latching, compaction, and
//! start-up from every state a crash can leave.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::*;
use crate::ids::TopicId;

const T0: Instant = Instant(0);

const KEY: PartitionKey = PartitionKey { topic: TopicId(3), partition: 1 };

/// Files by journal number, written as the journal asks.
#[derive(Default)]
struct Disk(BTreeMap<u64, Vec<u8>>);

impl Disk {
    /// Executes one operation.
    fn apply(&mut self, op: &DiskOp) {
        let number = |file: &FileId| match file {
            FileId::ConsumerJournal { number } => *number,
            other => panic!("not a journal file: {other:?}"),
        };
        match op {
            DiskOp::Create { file } => {
                self.0.insert(number(file), Vec::new());
            }
            DiskOp::Write { file, offset, data } => {
                let bytes = self.0.get_mut(&number(file)).expect("created");
                let offset = *offset as usize;
                if bytes.len() < offset + data.len() {
                    bytes.resize(offset + data.len(), 0);
                }
                bytes[offset..offset + data.len()].copy_from_slice(data);
            }
            DiskOp::Truncate { file, len } => {
                self.0.get_mut(&number(file)).expect("exists").truncate(*len as usize);
            }
            DiskOp::Delete { file } => {
                self.0.remove(&number(file));
            }
            DiskOp::Sync { .. } | DiskOp::Read { .. } | DiskOp::ReadUpTo { .. } => {}
        }
    }

    fn files(&self) -> BTreeMap<u64, Bytes> {
        self.0.iter().map(|(n, b)| (*n, Bytes::from(b.clone()))).collect()
    }
}

/// Runs every queued operation to success; returns the waiters made durable.
fn run(journal: &mut ConsumerJournal<u32>, disk: &mut Disk) -> Vec<u32> {
    let mut durable = Vec::new();
    loop {
        if journal.wants_image() {
            journal.begin_image(Vec::new());
        }
        journal.pump(T0);
        let Some((io, op)) = journal.poll_io() else { break };
        disk.apply(&op);
        let settled = journal.on_io(io, Ok(DiskDone::Done), T0);
        assert!(settled.failed.is_empty());
        durable.extend(settled.durable);
    }
    durable
}

fn acked(offset: u64) -> JournalEntry {
    JournalEntry::Acked { key: KEY, offset }
}

fn delivered(offset: u64, count: u32) -> JournalEntry {
    JournalEntry::Delivered { key: KEY, offset, count }
}

fn fresh(compact_bytes: u64) -> ConsumerJournal<u32> {
    ConsumerJournal::recovered(&RecoveredJournal::default(), compact_bytes)
}

#[test]
fn entries_staged_together_share_one_write_and_one_sync() {
    let (mut journal, mut disk) = (fresh(1 << 20), Disk::default());
    journal.stage(&[delivered(0, 1)], 1, T0).expect("open");
    assert_eq!(run(&mut journal, &mut disk), vec![1], "the first image, then the entry");
    for waiter in 2..10 {
        journal.stage(&[acked(u64::from(waiter))], waiter, T0).expect("open");
    }
    journal.pump(T0);
    let ops: Vec<_> = std::iter::from_fn(|| journal.poll_io()).collect();
    assert_eq!(ops.len(), 2, "one write and one sync for eight waiters: {ops:?}");
    let mut durable = Vec::new();
    for (io, op) in ops {
        disk.apply(&op);
        durable.extend(journal.on_io(io, Ok(DiskDone::Done), T0).durable);
    }
    assert_eq!(durable, (2..10).collect::<Vec<_>>());
    let found = recover(&disk.files()).expect("recovers");
    let queue = &found.queues[&KEY];
    assert_eq!(queue.deliveries.get(&0), Some(&1));
    assert_eq!(queue.acked.len(), 8, "acks 2..10, ahead of the frontier 0");
}

#[test]
fn a_failed_sync_latches_and_fails_every_waiter() {
    let (mut journal, mut disk) = (fresh(1 << 20), Disk::default());
    journal.stage(&[acked(0)], 1, T0).expect("open");
    run(&mut journal, &mut disk);
    journal.stage(&[acked(1)], 2, T0).expect("open");
    journal.pump(T0);
    journal.stage(&[acked(2)], 3, T0).expect("staged behind the flight");
    let (write_io, write) = journal.poll_io().expect("write");
    disk.apply(&write);
    assert!(journal.on_io(write_io, Ok(DiskDone::Done), T0).failed.is_empty());
    let (sync_io, _) = journal.poll_io().expect("sync");
    let settled = journal.on_io(sync_io, Err(DiskError::Io("EIO".into())), T0);
    assert_eq!((settled.durable, settled.failed), (vec![], vec![2, 3]));
    assert!(journal.latched().is_some());
    assert_eq!(journal.stage(&[acked(3)], 4, T0), Err(4), "refused once latched");
}

#[test]
fn compaction_writes_an_image_then_deletes_the_old_file() {
    let (mut journal, mut disk) = (fresh(200), Disk::default());
    let mut queue = PartitionQueue::default();
    for offset in 0..40 {
        journal.stage(&[acked(offset)], offset as u32, T0).expect("open");
        queue.on_acked(offset);
        // An image holds the caller's durable state.
        if journal.wants_image() {
            let state = queue.durable();
            journal.begin_image(vec![JournalEntry::State {
                key: KEY,
                frontier: state.frontier,
                acked: state.acked.iter().copied().collect(),
                deliveries: state.deliveries.iter().map(|(o, c)| (*o, *c)).collect(),
            }]);
        }
        run(&mut journal, &mut disk);
    }
    assert_eq!(disk.0.len(), 1, "old files are deleted: {:?}", disk.0.keys());
    assert!(*disk.0.keys().next().expect("one") > 1, "several compactions happened");
    let found = recover(&disk.files()).expect("recovers");
    assert_eq!(found.queues[&KEY].frontier, 40);
}

/// An image larger than the compaction bound (many partitions' states) must not make every
/// write a new image: then nothing staged was ever appended, and no waiter was ever answered.
#[test]
fn an_image_larger_than_the_bound_still_lets_entries_through() {
    let (mut journal, mut disk) = (fresh(64), Disk::default());
    let big =
        JournalEntry::State { key: KEY, frontier: 0, acked: (1..40).collect(), deliveries: vec![] };
    for waiter in 0..5 {
        journal.stage(&[acked(100 + u64::from(waiter))], waiter, T0).expect("open");
        let mut durable = Vec::new();
        for _ in 0..8 {
            if journal.wants_image() {
                journal.begin_image(vec![big.clone()]);
            }
            journal.pump(T0);
            while let Some((io, op)) = journal.poll_io() {
                disk.apply(&op);
                durable.extend(journal.on_io(io, Ok(DiskDone::Done), T0).durable);
            }
        }
        assert_eq!(durable, vec![waiter], "the entry is appended after at most one image");
    }
    assert!(*disk.0.keys().next().expect("a file") <= 5, "an image per write at most");
}

#[test]
fn start_up_takes_the_newest_complete_image() {
    let (mut journal, mut disk) = (fresh(1 << 20), Disk::default());
    journal.stage(&[delivered(5, 2)], 1, T0).expect("open");
    run(&mut journal, &mut disk);
    // An interrupted compaction: file 1 has half an image.
    let mut half = Vec::new();
    crate::codec::put_frame(
        &mut half,
        &JournalEntry::State { key: KEY, frontier: 99, acked: vec![], deliveries: vec![] }.encode(),
    );
    disk.0.insert(1, half);
    let found = recover(&disk.files()).expect("recovers");
    assert_eq!((found.file, found.stale.clone()), (Some(0), vec![1]));
    assert_eq!(found.queues[&KEY].deliveries.get(&5), Some(&2), "file 0's state");
    // A stale older file next to a complete newer one.
    disk.0.insert(1, disk.0[&0].clone());
    let found = recover(&disk.files()).expect("recovers");
    assert_eq!((found.file, found.stale), (Some(1), vec![0]));
}

#[test]
fn a_torn_tail_is_cut_and_damage_before_valid_entries_refuses() {
    let (mut journal, mut disk) = (fresh(1 << 20), Disk::default());
    journal.stage(&[acked(0), acked(1)], 1, T0).expect("open");
    run(&mut journal, &mut disk);
    let whole = disk.0[&0].clone();
    let mut torn = whole.clone();
    torn.truncate(whole.len() - 3);
    disk.0.insert(0, torn);
    let found = recover(&disk.files()).expect("a torn tail is not an error");
    assert!(found.torn);
    assert_eq!(found.queues[&KEY].frontier, 1, "the torn ack of 1 never happened");
    let mut journal = ConsumerJournal::<u32>::recovered(&found, 1 << 20);
    let (io, op) = journal.poll_io().expect("the tail is cut first");
    assert!(matches!(op, DiskOp::Truncate { len, .. } if len == found.size), "{op:?}");
    disk.apply(&op);
    journal.on_io(io, Ok(DiskDone::Done), T0);
    journal.stage(&[acked(1)], 2, T0).expect("open");
    assert_eq!(run(&mut journal, &mut disk), vec![2]);
    assert_eq!(recover(&disk.files()).expect("recovers").queues[&KEY].frontier, 2);
    // Damage in the middle: the first entry after the image flips a bit.
    let mut damaged = disk.0[&0].clone();
    let image_len = {
        let mut image = Vec::new();
        crate::codec::put_frame(&mut image, &JournalEntry::ImageEnd.encode());
        image.len()
    };
    damaged[image_len + 9] ^= 0x10;
    disk.0.insert(0, damaged);
    assert!(recover(&disk.files()).is_err(), "damage followed by valid entries");
}

#[test]
fn with_linger_a_commit_smaller_than_the_last_waits_at_most_the_last_ones_duration() {
    let (mut journal, mut disk) = (fresh(1 << 20).with_linger(true), Disk::default());
    journal.stage(&[acked(0)], 0, T0).expect("open");
    assert_eq!(run(&mut journal, &mut disk), vec![0], "a lone waiter never lingers");
    let at = |us: u64| T0.plus_micros(us);
    for waiter in 1..4 {
        journal.stage(&[acked(u64::from(waiter))], waiter, at(100)).expect("open");
    }
    journal.pump(at(100));
    let ops: Vec<_> = std::iter::from_fn(|| journal.poll_io()).collect();
    assert_eq!(ops.len(), 2, "three waiters, more than the last commit's one: no linger");
    for (io, op) in ops {
        disk.apply(&op);
        journal.on_io(io, Ok(DiskDone::Done), at(500)); // this commit took 400 us
    }
    journal.stage(&[acked(4)], 4, at(1_000)).expect("open");
    journal.pump(at(1_000));
    assert!(journal.poll_io().is_none(), "one waiter after a commit of three lingers");
    assert_eq!(journal.linger_until(), Some(at(1_400)), "for the last commit's 400 us");
    journal.stage(&[acked(5)], 5, at(1_200)).expect("open");
    journal.pump(at(1_399));
    assert!(journal.poll_io().is_none());
    journal.pump(at(1_400));
    let ops: Vec<_> = std::iter::from_fn(|| journal.poll_io()).collect();
    assert_eq!(ops.len(), 2, "the linger ends: both waiters in one commit");
    assert_eq!(journal.linger_until(), None, "nothing lingers while a commit runs");
}
