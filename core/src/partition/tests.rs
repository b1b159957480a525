//! `commit_durable` driven against a tiny in-memory disk: the happy path, a read-back that does
//! not match (a torn or misdirected write caught before visibility), and an fsync failure.

use super::*;
use crate::constants::PARTITION_INDEX_INTERVAL_BYTES;
use crate::ids::{NodeId, TopicId};

struct MemDisk {
    file: Vec<u8>,
    fail_sync: bool,
    corrupt_reads: bool,
    fail_create: bool,
}

impl MemDisk {
    fn healthy() -> MemDisk {
        MemDisk { file: Vec::new(), fail_sync: false, corrupt_reads: false, fail_create: false }
    }

    fn run(&mut self, log: &mut PartitionLog) -> Option<CommitOutcome> {
        let mut outcomes = Vec::new();
        while let Some((io, op)) = log.poll_io() {
            let result = self.execute(op);
            outcomes.extend(log.on_io(io, result));
        }
        assert!(outcomes.len() <= 1, "one part per commit in these tests");
        outcomes.pop()
    }

    fn execute(&mut self, op: DiskOp) -> Result<DiskDone, DiskError> {
        match op {
            DiskOp::Create { .. } if self.fail_create => Err(DiskError::NoSpace),
            DiskOp::Create { .. } => {
                self.file.clear();
                Ok(DiskDone::Done)
            }
            DiskOp::Delete { .. } => Ok(DiskDone::Done),
            DiskOp::Write { offset, data, .. } => {
                let end = offset as usize + data.len();
                if self.file.len() < end {
                    self.file.resize(end, 0);
                }
                self.file[offset as usize..end].copy_from_slice(&data);
                Ok(DiskDone::Done)
            }
            DiskOp::Sync { .. } if self.fail_sync => Err(DiskError::Io("EIO".into())),
            DiskOp::Sync { .. } => Ok(DiskDone::Done),
            DiskOp::Read { offset, len, .. } => {
                let mut bytes = self.file[offset as usize..(offset + len) as usize].to_vec();
                if self.corrupt_reads {
                    let last = bytes.len() - 1;
                    bytes[last] ^= 0xff;
                }
                Ok(DiskDone::Data(Bytes::from(bytes)))
            }
            DiskOp::Truncate { len, .. } => {
                self.file.truncate(len as usize);
                Ok(DiskDone::Done)
            }
            DiskOp::ReadUpTo { .. } => unreachable!("a partition log reads exactly"),
        }
    }
}

fn records(n: u64) -> Vec<PartitionRecord> {
    records_from(0, n)
}

fn records_from(first_seq: u64, n: u64) -> Vec<PartitionRecord> {
    (first_seq..first_seq + n)
        .map(|i| PartitionRecord {
            offset: 0,
            timestamp_ms: 5,
            origin_node: NodeId(1),
            origin_seq: i,
            key: None,
            payload: Bytes::from(format!("payload-{i}")),
        })
        .collect()
}

/// Starts a one-part commit; `Ok(Some(outcome))` when it was decided without writing.
fn begin(
    log: &mut PartitionLog,
    id: u64,
    origin: u32,
    records: Vec<PartitionRecord>,
) -> Result<Option<CommitOutcome>, String> {
    let records =
        records.into_iter().map(|r| PartitionRecord { origin_node: NodeId(origin), ..r }).collect();
    let part =
        CommitPart { id: CommitId(id), origin: NodeId(origin), origin_checkpoint: 0, records };
    log.begin_commit(vec![part]).map(|mut decided| decided.pop())
}

/// Recovers the log of `key()` from all of its bytes at once.
fn recover(bytes: &[u8]) -> Result<PartitionLog, crate::recovery_error::RecoveryError> {
    let mut scan = PartitionScan::new(key(), PARTITION_INDEX_INTERVAL_BYTES);
    scan.feed(bytes)?;
    scan.finish(&[])
}

fn key() -> PartitionKey {
    PartitionKey { topic: TopicId(1), partition: 0 }
}

#[test]
fn commit_becomes_visible_only_after_verified_read_back() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(3)).unwrap();
    assert_eq!(log.high_watermark(), 0, "nothing visible before the commit completes");
    let outcome = disk.run(&mut log).unwrap();
    assert_eq!(
        outcome,
        CommitOutcome {
            id: CommitId(1),
            result: Ok(Landed {
                first_offset: 0,
                origin_seqs: vec![0, 1, 2],
                first_timestamp_ms: Some(5)
            })
        }
    );
    assert_eq!(log.high_watermark(), 3);
    let plan = log.read_plan(1, 10, 1 << 20).unwrap();
    let bytes = &disk.file[plan.pos as usize..(plan.pos + plan.len) as usize];
    let got = log.decode_read(plan, bytes).unwrap();
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(got[0].payload, Bytes::from("payload-1"));
}

#[test]
fn failed_read_back_leaves_nothing_visible_and_truncates() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(2)).unwrap();
    disk.run(&mut log).unwrap();
    let committed_len = disk.file.len();

    disk.corrupt_reads = true;
    begin(&mut log, 2, 1, records_from(2, 4)).unwrap();
    let outcome = disk.run(&mut log).unwrap();
    assert!(outcome.result.is_err(), "{outcome:?}");
    assert_eq!(log.high_watermark(), 2, "the damaged commit must not become visible");
    assert_eq!(disk.file.len(), committed_len, "the failed commit's bytes are truncated away");
    assert!(log.is_idle());

    disk.corrupt_reads = false;
    begin(&mut log, 3, 1, records_from(2, 4)).unwrap();
    let landed = disk.run(&mut log).unwrap().result.unwrap();
    assert_eq!(landed.first_offset, 2, "a retry lands one copy");
    assert_eq!(log.high_watermark(), 6);
    let recovered = recover(&disk.file).unwrap();
    assert_eq!(recovered.high_watermark(), 6);
}

#[test]
fn fsync_failure_fails_the_commit_and_repair_failure_poisons() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(1)).unwrap();
    disk.run(&mut log).unwrap().result.unwrap();
    disk.fail_sync = true;
    begin(&mut log, 2, 1, records_from(1, 1)).unwrap();
    assert!(disk.run(&mut log).unwrap().result.is_err());
    assert_eq!(log.high_watermark(), 1);
    // The repair's own sync failed too: poisoned; the next attempt repairs instead of committing.
    assert!(begin(&mut log, 3, 1, records_from(1, 1)).is_err());
    disk.fail_sync = false;
    assert_eq!(disk.run(&mut log), None);
    begin(&mut log, 4, 1, records_from(1, 1)).unwrap();
    assert_eq!(disk.run(&mut log).unwrap().result.unwrap().first_offset, 1);
}

#[test]
fn nothing_is_written_before_the_file_is_created_and_a_failed_create_is_retried() {
    let file = b"old leftover bytes".to_vec();
    let mut disk = MemDisk { file, fail_sync: false, corrupt_reads: false, fail_create: true };
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(2)).unwrap();
    assert!(disk.run(&mut log).unwrap().result.is_err());
    assert_eq!(disk.file, b"old leftover bytes", "no write after a failed create");
    assert!(log.is_idle());
    disk.fail_create = false;
    begin(&mut log, 2, 1, records(2)).unwrap();
    assert_eq!(disk.run(&mut log).unwrap().result.unwrap().first_offset, 0);
    assert_eq!(recover(&disk.file).unwrap().high_watermark(), 2);
}

#[test]
fn a_failed_first_commit_is_truncated_away_before_the_next() {
    let mut disk = MemDisk { corrupt_reads: true, ..MemDisk::healthy() };
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(2)).unwrap();
    assert!(disk.run(&mut log).unwrap().result.is_err(), "the read-back caught the damage");
    assert!(disk.file.is_empty(), "the rolled-back bytes are cut, not left for a later create");
    disk.corrupt_reads = false;
    begin(&mut log, 2, 1, records(1)).unwrap();
    disk.run(&mut log).unwrap().result.unwrap();
    assert_eq!(recover(&disk.file).unwrap().high_watermark(), 1);
}

#[test]
fn recovery_truncates_a_torn_tail() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(3)).unwrap();
    disk.run(&mut log).unwrap();
    let mut bytes = disk.file.clone();
    bytes.truncate(bytes.len() - 3);
    let mut recovered = recover(&bytes).unwrap();
    assert_eq!(recovered.high_watermark(), 2);
    assert!(!recovered.is_idle(), "the torn tail is being truncated");
    disk.file = bytes;
    disk.run(&mut recovered);
    assert!(recovered.is_idle());
}

#[test]
fn a_replayed_commit_lands_no_second_copy_even_after_restart() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(3)).unwrap();
    disk.run(&mut log).unwrap();
    // Seqs 1-2 again plus a new one: only seq 3 lands.
    begin(&mut log, 2, 1, records_from(1, 3)).unwrap();
    let landed = disk.run(&mut log).unwrap().result.unwrap();
    let expected = Landed { first_offset: 3, origin_seqs: vec![3], first_timestamp_ms: Some(5) };
    assert_eq!(landed, expected);
    let mut log = recover(&disk.file).unwrap();
    let done = begin(&mut log, 3, 1, records(4)).unwrap();
    assert_eq!(done.unwrap().result.unwrap().origin_seqs, Vec::<u64>::new(), "all known: no write");
    assert_eq!(log.high_watermark(), 4);
    // Another origin's seq 0 is a different record.
    let other =
        records(1).into_iter().map(|r| PartitionRecord { origin_node: NodeId(2), ..r }).collect();
    assert!(begin(&mut log, 4, 2, other).unwrap().is_none());
}

#[test]
fn concurrent_requests_share_one_write_and_fsync() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    let part = |id: u64, origin: u32, seqs: std::ops::Range<u64>| CommitPart {
        id: CommitId(id),
        origin: NodeId(origin),
        origin_checkpoint: 0,
        records: records_from(seqs.start, seqs.end - seqs.start)
            .into_iter()
            .map(|r| PartitionRecord { origin_node: NodeId(origin), ..r })
            .collect(),
    };
    let decided = log.begin_commit(vec![part(1, 1, 0..3), part(2, 2, 0..2)]).unwrap();
    assert!(decided.is_empty());
    let mut outcomes = Vec::new();
    while let Some((io, op)) = log.poll_io() {
        let result = disk.execute(op);
        outcomes.extend(log.on_io(io, result));
    }
    assert_eq!(log.fsyncs, 1, "one fsync for both requests");
    let landed: Vec<(u64, Vec<u64>)> = outcomes
        .into_iter()
        .map(|o| o.result.map(|l| (l.first_offset, l.origin_seqs)).unwrap())
        .collect();
    assert_eq!(landed, vec![(0, vec![0, 1, 2]), (3, vec![0, 1])]);
    assert_eq!(log.high_watermark(), 5);
}

#[test]
fn a_replay_arriving_with_the_original_in_one_group_lands_once() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    let part = |id: u64| CommitPart {
        id: CommitId(id),
        origin: NodeId(1),
        origin_checkpoint: 0,
        records: records(3),
    };
    assert!(log.begin_commit(vec![part(1), part(2), part(3)]).unwrap().is_empty());
    let mut outcomes = Vec::new();
    while let Some((io, op)) = log.poll_io() {
        let result = disk.execute(op);
        outcomes.extend(log.on_io(io, result));
    }
    assert_eq!(log.high_watermark(), 3, "three copies of the same records land once");
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "every request is answered with the write");
}

/// Reads records from `offset` the way a consume does: plan, read the planned bytes, decode.
fn consume(
    log: &PartitionLog,
    disk: &MemDisk,
    offset: u64,
    max: u64,
    max_bytes: u64,
) -> Result<Vec<PartitionRecord>, String> {
    let plan = log.read_plan(offset, max, max_bytes).expect("offset below the high watermark");
    let bytes = &disk.file[plan.pos as usize..(plan.pos + plan.len) as usize];
    log.decode_read(plan, bytes).map_err(|damage| format!("{damage} (byte {})", damage.byte))
}

#[test]
fn consumes_from_any_offset_of_a_log_spanning_many_index_intervals() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    // 3,000 records of ~300 bytes in commits of 100: about 14 index intervals.
    for commit in 0..30 {
        let mut batch = records_from(commit * 100, 100);
        for record in &mut batch {
            record.payload = Bytes::from(vec![record.origin_seq as u8; 280]);
        }
        begin(&mut log, commit + 1, 1, batch).unwrap();
        assert!(disk.run(&mut log).unwrap().result.is_ok());
    }
    assert_eq!(log.high_watermark(), 3_000);
    let recovered = recover(&disk.file).unwrap();
    for log in [&log, &recovered] {
        for offset in [0, 1, 217, 218, 219, 1_499, 2_999] {
            for max in [1, 7, 1_000] {
                let got = consume(log, &disk, offset, max, 1 << 20).unwrap();
                let want = max.min(3_000 - offset);
                let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
                assert_eq!(offsets, (offset..offset + want).collect::<Vec<_>>());
                assert!(got.iter().all(|r| r.payload[..] == [r.origin_seq as u8; 280]));
            }
        }
        // The byte limit: whole records only, at least one.
        let got = consume(log, &disk, 100, 1_000, 10_000).unwrap();
        let frame = 10_000 / got.len();
        assert!(got.len() > 1 && (got.len() + 1) * frame > 10_000, "{}", got.len());
        assert_eq!(consume(log, &disk, 100, 1_000, 1).unwrap().len(), 1);
    }
}

#[test]
fn a_damaged_record_costs_only_itself() {
    let mut disk = MemDisk::healthy();
    let mut log = PartitionLog::new(key());
    begin(&mut log, 1, 1, records(10)).unwrap();
    disk.run(&mut log).unwrap();
    let frame = disk.file.len() / 10;
    let plan = log.read_plan(5, 1, 1 << 20).unwrap();
    assert_eq!(plan.pos, 0, "the sparse index starts the read at the log's first frame");
    disk.file[3 * frame + 12] ^= 0x01; // inside record 3's body
    let offsets = |got: Vec<PartitionRecord>| got.iter().map(|r| r.offset).collect::<Vec<_>>();
    // Skipped over on the way to a later offset.
    assert_eq!(offsets(consume(&log, &disk, 5, 2, 1 << 20).unwrap()), vec![5, 6]);
    assert_eq!(
        offsets(consume(&log, &disk, 4, 100, 1 << 20).unwrap()),
        (4..10).collect::<Vec<_>>()
    );
    // Ends an answer that reached it; reported when it is the first wanted record.
    assert_eq!(offsets(consume(&log, &disk, 1, 100, 1 << 20).unwrap()), vec![1, 2]);
    let err = consume(&log, &disk, 3, 100, 1 << 20).unwrap_err();
    assert!(err.contains("damaged record at offset 3"), "{err}");
    assert!(err.contains(&format!("(byte {})", 3 * frame)), "the frame's byte: {err}");
    // A damaged length field cannot be stepped over: later reads of that interval fail loudly.
    disk.file[3 * frame] ^= 0x40;
    let err = consume(&log, &disk, 5, 1, 1 << 20).unwrap_err();
    assert!(err.contains("damaged record at offset 3"), "{err}");
}
