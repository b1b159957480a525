//! Segmented partition logs: a log rolls into a new segment file once the active one is full,
//! reads find the segment holding the wanted offset, and recovery takes the segments back in
//! order, refusing a sealed segment that ends badly or a gap between segments. Seal files and
//! their adoption by recovery are tested in `seal_tests`.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{CommitId, CommitPart, PartitionLog, PartitionRecord, PartitionScan};
use crate::ids::{NodeId, PartitionKey, TopicId};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::recovery_error::RecoveryError;

const KEY: PartitionKey = PartitionKey { topic: TopicId(4), partition: 2 };
const INTERVAL: u64 = 64;

/// Files by id; every operation succeeds, in order.
#[derive(Default)]
struct Files(BTreeMap<FileId, Vec<u8>>);

impl Files {
    fn run(&mut self, log: &mut PartitionLog) {
        while let Some((io, op)) = log.poll_io() {
            let result = self.execute(op);
            for outcome in log.on_io(io, result) {
                outcome.result.expect("healthy disk: every commit lands");
            }
        }
    }

    fn execute(&mut self, op: DiskOp) -> Result<DiskDone, DiskError> {
        let file = self.0.entry(op.file()).or_default();
        match op {
            DiskOp::Create { .. } => file.clear(),
            DiskOp::Write { offset, data, .. } => {
                let end = offset as usize + data.len();
                file.resize(file.len().max(end), 0);
                file[offset as usize..end].copy_from_slice(&data);
            }
            DiskOp::Read { offset, len, .. } => {
                let bytes = file[offset as usize..(offset + len) as usize].to_vec();
                return Ok(DiskDone::Data(Bytes::from(bytes)));
            }
            DiskOp::Truncate { len, .. } => file.truncate(len as usize),
            DiskOp::Sync { .. } | DiskOp::Delete { .. } => {}
            DiskOp::ReadUpTo { .. } => unreachable!("a partition log reads exactly"),
        }
        Ok(DiskDone::Done)
    }

    /// The segment files, by base.
    fn segments(&self) -> impl Iterator<Item = (u64, &Vec<u8>)> {
        self.0.iter().filter_map(|(file, bytes)| match file {
            FileId::PartitionSegment { base, .. } => Some((*base, bytes)),
            _ => None,
        })
    }

    /// The seal files, by base.
    fn seals(&self) -> BTreeMap<u64, Bytes> {
        let seals = self.0.iter().filter_map(|(file, bytes)| match file {
            FileId::PartitionSeal { base, .. } => Some((*base, Bytes::from(bytes.clone()))),
            _ => None,
        });
        seals.collect()
    }

    /// Every record of `log`, read one consume at a time as a client walks a partition.
    fn read_all(&self, log: &PartitionLog) -> Vec<PartitionRecord> {
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while let Some(plan) = log.read_plan(offset, 7, 1 << 20) {
            let file = &self.0[&plan.file];
            let bytes = &file[plan.pos as usize..(plan.pos + plan.len) as usize];
            let records = log.decode_read(plan, bytes).expect("intact");
            offset += records.len() as u64;
            out.extend(records);
        }
        out
    }
}

fn record(seq: u64) -> PartitionRecord {
    PartitionRecord {
        offset: 0,
        timestamp_ms: 5,
        origin_node: NodeId(1),
        origin_seq: seq,
        key: None,
        payload: Bytes::from(format!("payload-{seq}-{}", "x".repeat((seq % 40) as usize))),
    }
}

/// `commits` commits of `per_commit` records each into a log sealing segments past `bytes`.
fn filled(commits: u64, per_commit: u64, bytes: u64) -> (PartitionLog, Files) {
    let mut log = PartitionLog::with_index_interval(KEY, INTERVAL).with_segment_bytes(bytes);
    let mut files = Files::default();
    for c in 0..commits {
        let records = (c * per_commit..(c + 1) * per_commit).map(record).collect();
        let part = CommitPart { id: CommitId(c), origin: NodeId(1), origin_checkpoint: 0, records };
        assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
        files.run(&mut log);
    }
    (log, files)
}

/// Recovers the segments of `files` by scanning every one (seal files ignored).
fn recover(files: &Files, chunk: usize) -> Result<PartitionLog, RecoveryError> {
    let mut scan = PartitionScan::new(KEY, INTERVAL).with_segment_bytes(300);
    let mut rest: &[u8] = &[];
    for (base, bytes) in files.segments() {
        scan.begin_segment(base)?;
        rest = feed_segment(&mut scan, bytes, chunk)?;
    }
    scan.finish(rest)
}

/// Feeds one segment's bytes to `scan` `chunk` bytes at a time, up to where it stopped; returns
/// what it did not consume (the tail `finish` looks at).
fn feed_segment<'a>(
    scan: &mut PartitionScan,
    bytes: &'a [u8],
    chunk: usize,
) -> Result<&'a [u8], RecoveryError> {
    for piece in bytes.chunks(chunk) {
        if scan.stopped() {
            break;
        }
        scan.feed(piece)?;
    }
    Ok(&bytes[usize::try_from(scan.fed()).unwrap()..])
}

fn is_segment(file: &FileId) -> bool {
    matches!(file, FileId::PartitionSegment { .. })
}

fn offsets_and_seqs(records: &[PartitionRecord]) -> Vec<(u64, u64)> {
    records.iter().map(|r| (r.offset, r.origin_seq)).collect()
}

#[test]
fn a_full_segment_rolls_and_reads_cross_every_segment() {
    let (log, files) = filled(20, 3, 300);
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    let segments: Vec<FileId> = files.0.keys().copied().filter(is_segment).collect();
    assert_eq!(log.segment_files(), segments, "one file per segment");
    let bases: Vec<u64> = files.segments().map(|(base, _)| base).collect();
    assert_eq!(bases[0], 0);
    assert!(bases.iter().all(|base| base % 3 == 0), "segments start at commit boundaries");
    let sizes: u64 = files.segments().map(|(_, f)| f.len() as u64).sum();
    assert_eq!(log.size_bytes(), sizes);
    let expected: Vec<(u64, u64)> = (0..60).map(|i| (i, i)).collect();
    assert_eq!(offsets_and_seqs(&files.read_all(&log)), expected);
    log.check_invariants().expect("consistent");
}

#[test]
fn recovery_takes_the_segments_back_in_any_chunking() {
    let (log, files) = filled(20, 3, 300);
    for chunk in [1, 5, 64, 4096] {
        let recovered = recover(&files, chunk).expect("clean segments recover");
        assert_eq!(recovered.high_watermark(), 60);
        assert_eq!(recovered.segment_count(), log.segment_count());
        assert_eq!(recovered.size_bytes(), log.size_bytes());
        assert_eq!(recovered.segment_files(), log.segment_files());
        recovered.check_invariants().expect("consistent");
        assert_eq!(files.read_all(&recovered), files.read_all(&log));
    }
}

#[test]
fn an_empty_new_segment_left_by_a_crash_is_the_active_one() {
    let (log, mut files) = filled(4, 3, 100);
    // A roll created the next segment, then the process died before the commit's write.
    let next = FileId::PartitionSegment { key: KEY, base: log.high_watermark() };
    files.0.insert(next, Vec::new());
    let mut recovered = recover(&files, 64).expect("an empty last segment is fine");
    assert_eq!(recovered.high_watermark(), 12);
    assert_eq!(recovered.segment_files().last(), Some(&next));
    let part = CommitPart {
        id: CommitId(9),
        origin: NodeId(1),
        origin_checkpoint: 0,
        records: vec![record(100)],
    };
    assert!(recovered.begin_commit(vec![part]).expect("idle").is_empty());
    files.run(&mut recovered);
    assert_eq!(recovered.high_watermark(), 13);
    assert_eq!(files.read_all(&recovered).last().map(|r| r.origin_seq), Some(100));
}

#[test]
fn recovery_refuses_a_sealed_segment_with_a_bad_tail_or_a_gap() {
    let (_, files) = filled(20, 3, 300);
    let first = FileId::PartitionSegment { key: KEY, base: 0 };
    let mut torn = Files(files.0.clone());
    torn.0.get_mut(&first).unwrap().extend_from_slice(&[9, 9, 9]);
    let refused = recover(&torn, 64).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("sealed segment"), "{refused}");
    let mut gap = Files(files.0.clone());
    let second = gap.0.keys().copied().filter(is_segment).nth(1).unwrap();
    gap.0.remove(&second);
    let refused = recover(&gap, 64).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("next segment starts at"), "{refused}");
    // A torn tail of the last segment is cut as always.
    let mut tail = Files(files.0.clone());
    let last = tail.0.keys().copied().rfind(is_segment).unwrap();
    tail.0.get_mut(&last).unwrap().extend_from_slice(&[9, 9, 9]);
    assert_eq!(recover(&tail, 64).expect("torn last tail").high_watermark(), 60);
}

mod retention {
    use super::*;
    use crate::partition::{PartIo, ReadRefusal, RetentionPolicy, Trimmed};

    /// A log of `commits` commits of 3 records, commit `c` stamped `1_000 * c` ms, one commit
    /// a segment.
    fn aged_log(commits: u64) -> (PartitionLog, Files) {
        let mut log = PartitionLog::with_index_interval(KEY, INTERVAL).with_segment_bytes(1);
        let mut files = Files::default();
        for c in 0..commits {
            let records = (c * 3..c * 3 + 3)
                .map(|seq| PartitionRecord { timestamp_ms: 1_000 * c, ..record(seq) })
                .collect();
            let part =
                CommitPart { id: CommitId(c), origin: NodeId(1), origin_checkpoint: 0, records };
            assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
            files.run(&mut log);
        }
        (log, files)
    }

    /// Runs the log's queued operations (`fail`: the pass's operations fail); the deletes it
    /// emitted, in order. Seal writes of segments sealed for their age run as they come; the
    /// pass deletes one file at a time, and before the last segment goes it creates and syncs
    /// the active segment's file (only those two run together).
    fn run_trims(log: &mut PartitionLog, files: &mut Files, fail: bool) -> Vec<FileId> {
        let mut deleted = Vec::new();
        while let Some(first) = log.poll_io() {
            let all: Vec<(PartIo, DiskOp)> =
                std::iter::once(first).chain(std::iter::from_fn(|| log.poll_io())).collect();
            let (seals, ops): (Vec<_>, Vec<_>) =
                all.into_iter().partition(|(io, _)| matches!(io, PartIo::Seal { .. }));
            for (io, op) in seals {
                let result = files.execute(op);
                let _ = log.on_io(io, result);
            }
            let creates = matches!(ops[..], [(_, DiskOp::Create { .. }), (_, DiskOp::Sync { .. })]);
            assert!(ops.len() <= 1 || creates, "one delete in flight at a time: {ops:?}");
            for (io, op) in ops {
                assert!(log.log_start_offset() < log.high_watermark() || log.segment_count() == 1);
                let result = if fail {
                    Err(DiskError::Io("EIO".into()))
                } else if let DiskOp::Delete { file } = op {
                    files.0.remove(&file);
                    deleted.push(file);
                    Ok(DiskDone::Done)
                } else {
                    files.execute(op)
                };
                let _ = log.on_io(io, result);
            }
        }
        deleted
    }

    /// Each trimmed segment lost its seal file first, then the segment file.
    fn seal_then_segment(deleted: &[FileId]) -> usize {
        for pair in deleted.chunks(2) {
            let [FileId::PartitionSeal { base: a, .. }, FileId::PartitionSegment { base: b, .. }] =
                pair
            else {
                panic!("seal, then segment: {pair:?}")
            };
            assert_eq!(a, b);
        }
        deleted.len() / 2
    }

    fn trimmed(log: &mut PartitionLog) -> Vec<Trimmed> {
        std::iter::from_fn(|| log.poll_trimmed()).collect()
    }

    #[test]
    fn time_retention_deletes_whole_sealed_segments_oldest_first_one_at_a_time() {
        let (mut log, mut files) = aged_log(10);
        assert_eq!(log.segment_count(), 10);
        let policy = RetentionPolicy { retention_ms: 5_000, retention_bytes: None };
        // At 9.5 s, records stamped 0..=4.5 s are past 5 s: commits 0..=4.
        log.start_retention(9_500, policy);
        assert_eq!(log.log_start_offset(), 0, "nothing is gone before its delete completes");
        assert!(log.is_being_trimmed(0) && !log.is_being_trimmed(log.high_watermark() - 1));
        assert_eq!(log.refuse_read(0), Some(ReadRefusal::BeingTrimmed));
        let deleted = run_trims(&mut log, &mut files, false);
        assert_eq!(seal_then_segment(&deleted), 5, "{deleted:?}");
        assert_eq!(log.log_start_offset(), 15);
        assert!(log.read_plan(14, 10, 1 << 20).is_none(), "below the start: nothing to read");
        assert_eq!(log.refuse_read(14), Some(ReadRefusal::Gone { log_start_offset: 15 }));
        assert_eq!(log.refuse_read(15), None);
        let gone = trimmed(&mut log);
        assert_eq!(gone.iter().map(|t| t.records).sum::<u64>(), 15);
        assert!(gone.iter().all(|t| t.newest_ms + 5_000 <= 9_500), "only past retention");
        assert_eq!(gone.last().unwrap().log_start_offset, 15);
        let rest: Vec<u64> = files.read_all(&log).iter().map(|r| r.offset).collect();
        assert_eq!(rest, (15..30).collect::<Vec<_>>(), "no gap, the rest intact");
        log.check_invariants().expect("consistent");
        // Recovery from what is left starts at the new log start.
        let recovered = recover(&files, 64).expect("a trimmed log recovers");
        assert_eq!((recovered.log_start_offset(), recovered.high_watermark()), (15, 30));
    }

    #[test]
    fn a_quiet_partition_past_retention_is_sealed_and_emptied_never_forever_kept() {
        let (mut log, mut files) = aged_log(4);
        log.start_retention(60_000, RetentionPolicy { retention_ms: 0, retention_bytes: None });
        assert!(run_trims(&mut log, &mut files, false).is_empty(), "retention 0 keeps forever");
        log.start_retention(
            60_000,
            RetentionPolicy { retention_ms: 10_000, retention_bytes: None },
        );
        let deleted = run_trims(&mut log, &mut files, false);
        assert_eq!(seal_then_segment(&deleted), 4, "every segment, the active too");
        assert_eq!((log.log_start_offset(), log.high_watermark()), (12, 12));
        // One empty file is left: the active segment's, named by the next offset, so that a
        // restart goes on at 12 rather than at 0 (found by the simulator: seed 0x7).
        let left: Vec<&FileId> = files.0.keys().collect();
        assert_eq!(left, [&FileId::PartitionSegment { key: KEY, base: 12 }]);
        assert!(files.0.values().all(|bytes| bytes.is_empty()));
        let restarted = recover(&files, 64).expect("an emptied log recovers");
        assert_eq!((restarted.log_start_offset(), restarted.high_watermark()), (12, 12));
        // New records go on in that segment at the old high watermark.
        let part = CommitPart {
            id: CommitId(50),
            origin: NodeId(1),
            origin_checkpoint: 0,
            records: vec![PartitionRecord { timestamp_ms: 60_000, ..record(50) }],
        };
        assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
        files.run(&mut log);
        assert_eq!(files.read_all(&log).iter().map(|r| r.offset).collect::<Vec<_>>(), [12]);
        assert_eq!(recover(&files, 64).expect("recovers").log_start_offset(), 12);
    }

    #[test]
    fn no_commit_starts_while_the_active_segment_is_created_and_a_failed_create_is_retried() {
        let (mut log, mut files) = aged_log(1);
        let policy = RetentionPolicy { retention_ms: 1_000, retention_bytes: None };
        // The first pass seals the aged active segment; nothing is deleted while its seal
        // file is being written.
        log.start_retention(5_000, policy);
        assert!(run_trims(&mut log, &mut files, false).is_empty());
        log.start_retention(5_000, policy);
        assert!(!log.can_start_commit(), "the active segment's create is in flight");
        assert!(run_trims(&mut log, &mut files, true).is_empty(), "the create failed");
        assert!(log.can_start_commit());
        assert_eq!(log.log_start_offset(), 0, "the last segment stays until its successor exists");
        log.start_retention(5_000, policy);
        assert_eq!(seal_then_segment(&run_trims(&mut log, &mut files, false)), 1);
        assert_eq!((log.log_start_offset(), log.high_watermark()), (3, 3));
    }

    #[test]
    fn a_busy_active_segment_rolls_by_age_so_old_records_go_while_new_ones_keep_coming() {
        let mut log = PartitionLog::with_index_interval(KEY, INTERVAL).with_segment_bytes(u64::MAX);
        let mut files = Files::default();
        // Retention 16 s: the active segment rolls once older than 2 s (16 / 8).
        let policy = RetentionPolicy { retention_ms: 16_000, retention_bytes: None };
        for c in 0..40u64 {
            let now = 500 * c;
            let records = vec![PartitionRecord { timestamp_ms: now, ..record(c) }];
            let part =
                CommitPart { id: CommitId(c), origin: NodeId(1), origin_checkpoint: 0, records };
            assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
            files.run(&mut log);
            log.start_retention(now, policy);
            run_trims(&mut log, &mut files, false);
        }
        assert!(log.segment_count() >= 5, "rolled by age: {} segments", log.segment_count());
        // At 19.5 s, records stamped before 3.5 s are past retention; a segment spans 2 s.
        assert!((1..=7).contains(&log.log_start_offset()), "start {}", log.log_start_offset());
        let newest = files.read_all(&log).last().map(|r| r.offset);
        assert_eq!(newest, Some(39), "new records keep flowing");
    }

    #[test]
    fn a_roll_looks_at_the_size_bound_again_without_waiting_for_the_next_pass() {
        let (mut log, mut files) = aged_log(2);
        let limit = 3 * log.size_bytes() / 2;
        let policy = RetentionPolicy { retention_ms: 0, retention_bytes: Some(limit) };
        log.start_retention(0, policy);
        assert!(run_trims(&mut log, &mut files, false).is_empty(), "under the bound");
        // More commits, one segment each, and no pass: each roll deletes what the bound allows,
        // so the log never holds more than the bound plus two segments (the oldest, which the
        // bound still needs, and the active one).
        let mut biggest = 0;
        for c in 2..12 {
            let records = (c * 3..c * 3 + 3).map(record).collect();
            let part =
                CommitPart { id: CommitId(c), origin: NodeId(1), origin_checkpoint: 0, records };
            let before = log.size_bytes();
            assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
            files.run(&mut log);
            run_trims(&mut log, &mut files, false);
            let trimmed_now: u64 = trimmed(&mut log).iter().map(|t| t.bytes).sum();
            biggest = biggest.max(log.size_bytes() + trimmed_now - before);
            assert!(
                log.size_bytes() <= limit + 2 * biggest,
                "{} > {limit} + 2 x {biggest}",
                log.size_bytes()
            );
        }
        assert!(log.log_start_offset() >= 12, "start {}", log.log_start_offset());
    }

    #[test]
    fn size_retention_keeps_at_least_the_bound_and_a_failed_delete_is_retried() {
        let (mut log, mut files) = aged_log(10);
        let total = log.size_bytes();
        let policy = RetentionPolicy { retention_ms: 0, retention_bytes: Some(total / 2) };
        log.start_retention(0, policy);
        assert!(run_trims(&mut log, &mut files, true).is_empty(), "the delete failed");
        assert_eq!(log.log_start_offset(), 0, "a failed delete removes nothing");
        log.start_retention(0, policy);
        assert!(!run_trims(&mut log, &mut files, false).is_empty());
        assert!(log.size_bytes() >= total / 2, "never below the bound");
        let oldest_left = log.size_bytes() - log.sealed.values().next().map_or(0, |s| s.size);
        assert!(oldest_left < total / 2, "and the oldest left is needed to hold it");
    }
}

mod seal_tests;
