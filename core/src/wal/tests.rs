//! Tests of the WAL's segment life cycle with tiny segment sizes: sealing, rotation, compaction
//! and recovery across several sealed segments that still hold a backlog. A toy in-memory disk
//! completes every operation at once and in order.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::*;
use crate::codec::{ScanEnd, scan};
use crate::ids::TopicId;

/// Files by id; every operation succeeds.
#[derive(Default)]
pub(super) struct Disk {
    files: BTreeMap<FileId, Vec<u8>>,
}

impl Disk {
    pub(super) fn apply(&mut self, op: &DiskOp) -> DiskDone {
        match op {
            DiskOp::Create { file } => {
                self.files.insert(*file, Vec::new());
            }
            DiskOp::Write { file, offset, data } => {
                let bytes = self.files.get_mut(file).expect("written file exists");
                let end = *offset as usize + data.len();
                bytes.resize(bytes.len().max(end), 0);
                bytes[*offset as usize..end].copy_from_slice(data);
            }
            DiskOp::Read { file, offset, len } => {
                let bytes = &self.files[file];
                let end = (*offset + *len) as usize;
                return DiskDone::Data(Bytes::copy_from_slice(&bytes[*offset as usize..end]));
            }
            DiskOp::ReadUpTo { file, offset, len } => {
                let bytes = &self.files[file];
                let start = (*offset as usize).min(bytes.len());
                let end = ((*offset + *len) as usize).min(bytes.len());
                return DiskDone::Data(Bytes::copy_from_slice(&bytes[start..end]));
            }
            DiskOp::Truncate { file, len } => {
                self.files.get_mut(file).expect("truncated file exists").truncate(*len as usize);
            }
            DiskOp::Delete { file } => {
                self.files.remove(file);
            }
            DiskOp::Sync { .. } => {}
        }
        DiskDone::Done
    }

    pub(super) fn segments(&self) -> BTreeMap<u64, Bytes> {
        self.files
            .iter()
            .filter_map(|(file, bytes)| match file {
                FileId::WalSegment { first_seq } => Some((*first_seq, Bytes::from(bytes.clone()))),
                _ => None,
            })
            .collect()
    }
}

pub(super) fn draft(payload_len: usize) -> Draft {
    Draft {
        timestamp_ms: 1,
        topic: "t".to_string(),
        topic_id: TopicId(1),
        partition: 0,
        key: None,
        payload: Bytes::from(vec![7u8; payload_len]),
    }
}

fn tiny(segment_bytes: u64, rotate_dispatched_bytes: u64) -> Wal<u32> {
    empty_with(WalSizes { segment_bytes, rotate_dispatched_bytes, ..WalSizes::default() })
}

/// An empty WAL with these sizes, pre-writing off.
fn empty_with(sizes: WalSizes) -> Wal<u32> {
    let recovered = recover(&BTreeMap::new(), None).expect("an empty disk recovers");
    Wal::from_recovered(recovered).with_sizes(WalSizes { prewrite_chunk_bytes: 0, ..sizes })
}

/// Pumps the WAL and completes its operations until none is left; returns the records read by
/// the cursor (from batches and from disk), advancing it as the dispatcher would.
pub(super) fn settle(wal: &mut Wal<u32>, disk: &mut Disk, now: Instant) -> Vec<u64> {
    let mut seen = Vec::new();
    loop {
        wal.pump(now, false);
        wal.poll_read(u64::MAX);
        let Some((io, op)) = wal.poll_io() else {
            return seen;
        };
        let done = disk.apply(&op);
        let taken = match io {
            WalIo::Batch => wal.on_batch_io(Ok(done)).map(|o| o.durable).unwrap_or_default(),
            WalIo::Checkpoint | WalIo::CheckpointCreate => {
                wal.on_checkpoint_io(io, Ok(done), now);
                Vec::new()
            }
            WalIo::CursorRead { segment, offset } => {
                match wal.on_cursor_read(segment, offset, Ok(done)).expect("a sound read") {
                    CursorRead::Records(records) => records,
                    CursorRead::Lost(range) => panic!("nothing is damaged, lost {range:?}"),
                    CursorRead::Damaged(reason) => panic!("nothing is damaged: {reason}"),
                }
            }
            WalIo::Repair => {
                wal.on_repair_io(Ok(done)).expect("repairs succeed");
                Vec::new()
            }
            WalIo::Delete => Vec::new(),
            WalIo::Prewrite => {
                assert!(matches!(wal.on_prewrite_io(Ok(done)), PrewriteDone::Quiet));
                Vec::new()
            }
        };
        wal.advance_cursor(&taken);
        seen.extend(taken.iter().map(|(record, _)| record.seq));
    }
}

/// Every segment on disk holds whole, clean records.
fn assert_whole_records(disk: &Disk) {
    for (first, bytes) in disk.segments() {
        let scanned = scan(&bytes);
        assert!(matches!(scanned.end, ScanEnd::Clean), "segment {first} is not clean");
        assert!(!scanned.frames.is_empty() || bytes.is_empty(), "segment {first} holds no record");
    }
}

#[test]
fn a_tiny_segment_size_seals_after_each_batch_and_never_refuses_a_larger_record() {
    let mut wal = tiny(300, 1 << 30);
    let mut disk = Disk::default();
    let now = Instant(1_000);
    for (waiter, len) in [(1, 400), (2, 10), (3, 64 * 1024), (4, 10)] {
        wal.stage(vec![draft(len), draft(len)], waiter).expect("not latched");
        settle(&mut wal, &mut disk, now);
    }
    // The first batch passed 300 bytes and sealed segment 0; the second (small) left segment 2
    // below the size, so the third joined it (its 64 KiB records landing whole in a 300-byte
    // segment) and sealed it; the fourth opened segment 6.
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![0, 2, 6]);
    assert_whole_records(&disk);
    assert_eq!(wal.durable_seq(), 8);
}

#[test]
fn a_fully_dispatched_segment_past_the_rotate_size_is_rotated_and_compacted() {
    let mut wal = tiny(1 << 20, 500);
    let mut disk = Disk::default();
    let mut now = Instant(1_000);
    wal.stage(vec![draft(100)], 1).expect("not latched");
    assert_eq!(settle(&mut wal, &mut disk, now), vec![0]);
    wal.stage(vec![draft(600)], 2).expect("not latched");
    assert_eq!(settle(&mut wal, &mut disk, now), vec![1], "below the rotate size: same segment");
    assert_eq!(disk.segments().len(), 1);
    wal.set_checkpoint_target(2, now);
    now = now.plus_millis(CHECKPOINT_SYNC_DELAY_MS);
    settle(&mut wal, &mut disk, now);
    // Dispatched and past 500 bytes: a fresh segment replaces it and the old one is deleted.
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![2]);
    assert_eq!(wal.durable_checkpoint(), 2);
}

#[test]
fn recovery_across_sealed_segments_with_a_backlog_resumes_at_the_checkpoint() {
    let mut wal = tiny(200, 1 << 30);
    let mut disk = Disk::default();
    let mut now = Instant(1_000);
    for waiter in 0..6 {
        wal.stage(vec![draft(150), draft(150)], waiter).expect("not latched");
        settle(&mut wal, &mut disk, now);
    }
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![0, 2, 4, 6, 8, 10]);
    // Records 0..5 are done: segments 0 and 2 go; 4 is sealed and still holds record 5.
    wal.set_checkpoint_target(5, now);
    now = now.plus_millis(CHECKPOINT_SYNC_DELAY_MS);
    settle(&mut wal, &mut disk, now);
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![4, 6, 8, 10], "compaction keeps every segment above the checkpoint");
    // Crash and recover: the cursor sits at record 5, the second frame of segment 4.
    let checkpoint_file = disk.files.get(&FileId::WalCheckpoint).cloned().map(Bytes::from);
    let recovered = recover(&disk.segments(), checkpoint_file.as_ref()).expect("sound disk");
    let first_frame = scan(&disk.segments()[&4]).frames[1].pos as u64;
    assert_eq!((recovered.checkpoint, recovered.backlog), (5, 7));
    assert_eq!((recovered.cursor_segment, recovered.cursor_offset), (4, first_frame));
    let mut wal: Wal<u32> = Wal::from_recovered(recovered)
        .with_sizes(WalSizes { segment_bytes: 200, ..WalSizes::default() });
    let read = settle(&mut wal, &mut disk, now);
    assert_eq!(read, (5..12).collect::<Vec<u64>>(), "every undispatched record, once, in order");
    wal.stage(vec![draft(10)], 9).expect("not latched");
    assert_eq!(settle(&mut wal, &mut disk, now), vec![12]);
    assert_eq!(*disk.segments().keys().last().expect("segments"), 12, "a new segment follows");
}

/// Feeds the cursor's reads until it has nothing more to read: the records it yields, the ranges
/// it declares lost, and how many reads it refused (errors).
fn drain_cursor(wal: &mut Wal<u32>, disk: &mut Disk) -> (Vec<u64>, Vec<std::ops::Range<u64>>, u32) {
    let (mut seen, mut lost, mut refused) = (Vec::new(), Vec::new(), 0);
    loop {
        wal.poll_read(u64::MAX);
        let Some((io, op)) = wal.poll_io() else {
            return (seen, lost, refused);
        };
        let WalIo::CursorRead { segment, offset } = io else {
            panic!("only cursor reads are expected, got {io:?}");
        };
        match wal.on_cursor_read(segment, offset, Ok(disk.apply(&op))) {
            Ok(CursorRead::Records(records)) => {
                wal.advance_cursor(&records);
                seen.extend(records.iter().map(|(record, _)| record.seq));
            }
            Ok(CursorRead::Lost(range)) => lost.push(range),
            Ok(CursorRead::Damaged(_)) => refused += 1,
            Err(reason) => panic!("the simulated read cannot fail: {reason}"),
        }
    }
}

#[test]
fn a_segment_cut_short_behind_the_wals_back_yields_its_intact_records_then_counts_the_rest_lost() {
    let mut wal = tiny(200, 1 << 30);
    let mut disk = Disk::default();
    for waiter in 0..3 {
        wal.stage(vec![draft(150), draft(150)], waiter).expect("not latched");
        settle(&mut wal, &mut disk, Instant(1_000));
    }
    assert_eq!(disk.segments().keys().copied().collect::<Vec<_>>(), vec![0, 2, 4]);
    let recovered = recover(&disk.segments(), None).expect("sound disk");
    let mut wal: Wal<u32> = Wal::from_recovered(recovered);
    // After recovery, a write that "landed elsewhere" leaves segment 2 ending inside record 3:
    // an exact read of the length the WAL knows would fail on every attempt.
    let cut = scan(&disk.segments()[&2]).frames[1].pos + 5;
    disk.files.get_mut(&FileId::WalSegment { first_seq: 2 }).expect("segment 2").truncate(cut);
    let (seen, lost, refused) = drain_cursor(&mut wal, &mut disk);
    assert_eq!(seen, vec![0, 1, 2, 4, 5], "the intact prefix and the next segment are dispatched");
    assert_eq!(lost, vec![3..4], "only the record the file no longer holds is lost");
    assert_eq!(
        refused,
        damage::DAMAGED_READS_BEFORE_SKIP - 1,
        "it is read again before it is lost"
    );
}

/// Found by the simulator (seed 0x1bce, cluster): a crash right after a checkpoint became
/// durable, before the node heard of it, left the segments below it; the recovered node had
/// nothing new to checkpoint, so they stayed forever. Recovery now compacts what the recovered
/// checkpoint covers (once start-up's syncs made it durable).
#[test]
fn segments_below_the_recovered_checkpoint_are_deleted_after_recovery() {
    let mut wal = tiny(200, 1 << 30);
    let mut disk = Disk::default();
    let now = Instant(1_000);
    for waiter in 0..3 {
        wal.stage(vec![draft(150), draft(150)], waiter).expect("not latched");
        settle(&mut wal, &mut disk, now);
    }
    // The checkpoint slot reaches the disk, but the compaction it would trigger never runs.
    let mut checkpoint = vec![0u8; crate::wal::checkpoint::SLOT_STRIDE as usize];
    let slot = crate::wal::checkpoint::encode_slot(6);
    checkpoint[..slot.len()].copy_from_slice(&slot);
    disk.files.insert(FileId::WalCheckpoint, checkpoint);
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![0, 2, 4]);
    let checkpoint_file = disk.files.get(&FileId::WalCheckpoint).cloned().map(Bytes::from);
    let recovered = recover(&disk.segments(), checkpoint_file.as_ref()).expect("sound disk");
    assert_eq!((recovered.checkpoint, recovered.backlog), (6, 0));
    let mut wal: Wal<u32> = Wal::from_recovered(recovered)
        .with_sizes(WalSizes { segment_bytes: 200, ..WalSizes::default() });
    wal.compact_recovered();
    settle(&mut wal, &mut disk, now);
    let firsts: Vec<u64> = disk.segments().keys().copied().collect();
    assert_eq!(firsts, vec![4], "only the segment the cursor is in stays");
}

/// Pumps once and completes the group commit it starts; returns the waiters it acknowledged.
fn one_group_commit(wal: &mut Wal<u32>, disk: &mut Disk, now: Instant) -> Vec<u32> {
    wal.pump(now, false);
    while let Some((io, op)) = wal.poll_io() {
        let done = disk.apply(&op);
        if io == WalIo::Batch
            && let Some(outcome) = wal.on_batch_io(Ok(done))
        {
            wal.advance_cursor(&outcome.durable);
            return outcome.acked;
        }
    }
    panic!("no group commit started");
}

#[test]
fn a_small_produce_staged_behind_bulk_batches_goes_in_the_next_group_commit() {
    let mut wal = with_lanes(1_000, 3_000);
    let mut disk = Disk::default();
    let now = Instant(1_000);
    wal.stage(vec![draft(2_000)], 1).expect("not latched");
    wal.stage(vec![draft(2_000)], 2).expect("not latched");
    wal.stage(vec![draft(10)], 3).expect("not latched");
    assert_eq!(wal.staged_bytes(), 2 * (2_000 + 35) + 10 + 35);
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [3, 1], "small first, one bulk");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [2]);
    assert_eq!(wal.durable_seq(), 3);
    // The WAL's order is the order of the groups: the small record got sequence 0.
    let decoded: Vec<(u64, usize)> =
        wal_records(&disk).iter().map(|record| (record.seq, record.payload.len())).collect();
    assert_eq!(decoded, [(0, 10), (1, 2_000), (2, 2_000)]);
    wal.check_invariants().expect("sound bookkeeping");
}

/// An empty WAL with these lane bounds (`staging.rs`) and no pre-writing.
fn with_lanes(small_request_bytes: u64, group_bulk_bytes: u64) -> Wal<u32> {
    empty_with(WalSizes { small_request_bytes, group_bulk_bytes, ..WalSizes::default() })
}

/// Every record in the WAL's segments, in order.
fn wal_records(disk: &Disk) -> Vec<WalRecord> {
    let mut records = Vec::new();
    for segment in disk.segments().values() {
        for frame in scan(segment).frames {
            records.push(WalRecord::decode(frame.body(segment)).expect("a record"));
        }
    }
    records
}

/// Reads what the cursor may read from `disk`; returns the sequences read.
fn read_cursor(wal: &mut Wal<u32>, disk: &mut Disk) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        wal.poll_read(u64::MAX);
        let Some((WalIo::CursorRead { segment, offset }, op)) = wal.poll_io() else {
            return seqs;
        };
        let done = disk.apply(&op);
        let Ok(CursorRead::Records(records)) = wal.on_cursor_read(segment, offset, Ok(done)) else {
            panic!("a clean read");
        };
        seqs.extend(records.iter().map(|(record, _)| record.seq));
        wal.advance_cursor(&records);
    }
}

#[test]
fn a_bulk_request_past_the_group_bound_is_written_in_chunks_and_read_only_once_whole() {
    let mut wal = with_lanes(1_000, 3_000);
    let mut disk = Disk::default();
    let now = Instant(1_000);
    wal.stage(vec![draft(2_000), draft(2_000), draft(2_000)], 1).expect("not latched");
    wal.stage(vec![draft(10)], 2).expect("not latched");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [2], "the first chunk has no waiter");
    assert_eq!(wal.durable_seq(), 2);
    assert_eq!(wal.cursor.seq, 1, "the small record went to the dispatcher, the chunk did not");
    assert_eq!(read_cursor(&mut wal, &mut disk), [0u64; 0], "nothing past an open request");
    wal.stage(vec![draft(10)], 3).expect("not latched");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [3], "a small group between chunks");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [0u32; 0]);
    assert_eq!(read_cursor(&mut wal, &mut disk), [0u64; 0]);
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [1], "the last chunk answers");
    assert_eq!(read_cursor(&mut wal, &mut disk), [1, 2, 3, 4]);
    let chunks: Vec<(u64, Option<Chunk>)> =
        wal_records(&disk).iter().map(|record| (record.seq, record.chunk)).collect();
    let chunk = |last| Some(Chunk { request: 1, last });
    assert_eq!(
        chunks,
        [(0, None), (1, chunk(false)), (2, None), (3, chunk(false)), (4, chunk(true))]
    );
    wal.check_invariants().expect("sound bookkeeping");
}

#[test]
fn a_request_whose_last_chunk_failed_is_frozen_and_recovery_decides_it() {
    let mut wal = with_lanes(100, 100);
    let mut disk = Disk::default();
    let now = Instant(1_000);
    wal.stage(vec![draft(50), draft(50)], 1).expect("not latched");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [0u32; 0]);
    wal.stage(vec![draft(10)], 2).expect("not latched");
    assert_eq!(one_group_commit(&mut wal, &mut disk, now), [2], "a small group between chunks");
    assert_eq!(read_cursor(&mut wal, &mut disk), [0u64; 0], "held at the open request");
    wal.pump(now, false);
    let mut outcome = None;
    while let Some((io, op)) = wal.poll_io() {
        assert_eq!(io, WalIo::Batch);
        let result = match op {
            DiskOp::Sync { .. } => Err(DiskError::Io("the disk failed".into())),
            op => Ok(disk.apply(&op)),
        };
        outcome = outcome.or(wal.on_batch_io(result));
    }
    let outcome = outcome.expect("the group ended");
    assert_eq!((outcome.acked.len(), outcome.failed), (0, vec![1]));
    // Latched: the request will not be finished here. The cursor moves on (the dispatcher sets
    // the request's records aside), so the small record behind its first chunk is dispatched.
    assert_eq!(wal.frozen_request(), Some(0));
    assert_eq!(read_cursor(&mut wal, &mut disk), [0, 1]);
    // The failed group's bytes may or may not have reached the disk: without them, the next
    // start-up drops the request; with them, it is whole.
    let segments = disk.segments();
    let mut first_chunk_only = segments.clone();
    let cut = scan(&segments[&0]).frames[2].pos;
    first_chunk_only.insert(0, segments[&0].slice(..cut));
    let got = recover(&first_chunk_only, None).expect("recovers");
    assert_eq!(got.abandoned, BTreeMap::from([(0, 1)]));
    assert_eq!(recover(&segments, None).expect("recovers").abandoned, BTreeMap::new());
}

#[test]
fn a_bulk_request_is_refused_while_the_bulk_lane_holds_sixteen_groups_worth() {
    let mut wal = with_lanes(100, 1_000);
    let bulk = || vec![draft(1_500)];
    assert!(wal.admits(&bulk()), "an empty lane takes one request past the bound");
    for waiter in 1..=10 {
        wal.stage(bulk(), waiter).expect("not latched");
    }
    assert!(!wal.admits(&bulk()), "16,885 bytes would pass 16 × 1,000");
    assert!(wal.admits(&[draft(10)]), "small requests are never held back by the bulk lane");
    let mut disk = Disk::default();
    assert_eq!(one_group_commit(&mut wal, &mut disk, Instant(1_000)), [1]);
    assert!(wal.admits(&bulk()), "room again once a group took one");
}
