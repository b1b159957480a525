//! Segmented partition logs: a log rolls into a new segment file once the active one is full,
//! reads find the segment holding the wanted offset, and recovery takes the segments back in
//! order, refusing a sealed segment that ends badly or a gap between segments.

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
        }
        Ok(DiskDone::Done)
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

fn recover(files: &Files, chunk: usize) -> Result<PartitionLog, RecoveryError> {
    let mut scan = PartitionScan::new(KEY, INTERVAL).with_segment_bytes(300);
    let mut rest: &[u8] = &[];
    for (file, bytes) in &files.0 {
        let FileId::PartitionSegment { base, .. } = file else { panic!("only segments") };
        scan.begin_segment(*base)?;
        for piece in bytes.chunks(chunk) {
            if scan.stopped() {
                break;
            }
            scan.feed(piece)?;
        }
        rest = &bytes[usize::try_from(scan.fed()).unwrap()..];
    }
    scan.finish(rest)
}

fn offsets_and_seqs(records: &[PartitionRecord]) -> Vec<(u64, u64)> {
    records.iter().map(|r| (r.offset, r.origin_seq)).collect()
}

#[test]
fn a_full_segment_rolls_and_reads_cross_every_segment() {
    let (log, files) = filled(20, 3, 300);
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    assert_eq!(log.files(), files.0.keys().copied().collect::<Vec<_>>(), "one file per segment");
    let bases: Vec<u64> = files
        .0
        .keys()
        .map(|f| match f {
            FileId::PartitionSegment { base, .. } => *base,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(bases[0], 0);
    assert!(bases.iter().all(|base| base % 3 == 0), "segments start at commit boundaries");
    let sizes: u64 = files.0.values().map(|f| f.len() as u64).sum();
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
        assert_eq!(recovered.files(), log.files());
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
    assert_eq!(recovered.files().last(), Some(&next));
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
    let first = *files.0.keys().next().unwrap();
    let mut torn = Files(files.0.clone());
    torn.0.get_mut(&first).unwrap().extend_from_slice(&[9, 9, 9]);
    let refused = recover(&torn, 64).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("sealed segment"), "{refused}");
    let mut gap = Files(files.0.clone());
    let second = *gap.0.keys().nth(1).unwrap();
    gap.0.remove(&second);
    let refused = recover(&gap, 64).map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("next segment starts at"), "{refused}");
    // A torn tail of the last segment is cut as always.
    let mut tail = Files(files.0.clone());
    tail.0.values_mut().last().unwrap().extend_from_slice(&[9, 9, 9]);
    assert_eq!(recover(&tail, 64).expect("torn last tail").high_watermark(), 60);
}
