//! Seal files: a roll writes the sealed segment's seal, a clean shutdown the active one's, and
//! recovery adopts a trusted seal instead of reading its segment, ending with the log a full scan
//! gives (same watermark, indexes, read plans and dedup answers). A seal that is torn, garbled,
//! stale or out of place is not trusted: its segment is scanned.

use super::*;
use crate::partition::PartIo;
use crate::partition::seal::Seal;

/// Records each commit lags behind in the origin checkpoint it reports.
const LAG: u64 = 4;

/// `commits` commits of 3 records alternating between origins 1 and 2, each reporting a durable
/// checkpoint `LAG` records behind what it sends, into a log sealing segments past `bytes`.
fn filled_two_origins(commits: u64, bytes: u64) -> (PartitionLog, Files) {
    let mut log = PartitionLog::with_index_interval(KEY, INTERVAL).with_segment_bytes(bytes);
    let mut files = Files::default();
    for c in 0..commits {
        let origin = NodeId(1 + (c % 2) as u32);
        let first = (c / 2) * 3;
        let records: Vec<PartitionRecord> = (first..first + 3)
            .map(|seq| PartitionRecord {
                origin_node: origin,
                timestamp_ms: 100 + c,
                ..record(seq)
            })
            .collect();
        let origin_checkpoint = first.saturating_sub(LAG);
        let part = CommitPart { id: CommitId(c), origin, origin_checkpoint, records };
        assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
        files.run(&mut log);
    }
    (log, files)
}

/// Recovers `files` as start-up does: the seal files go to the scan, segments with a trusted
/// seal are adopted (never read), the others are fed in chunks of `chunk` bytes.
fn recover_sealed(files: &Files, chunk: usize) -> Result<PartitionLog, RecoveryError> {
    let mut scan =
        PartitionScan::new(KEY, INTERVAL).with_segment_bytes(300).with_seals(files.seals());
    let mut rest: &[u8] = &[];
    for (base, bytes) in files.segments() {
        rest = &[];
        if scan.open_segment(base, bytes.len() as u64)? {
            continue;
        }
        rest = feed_segment(&mut scan, bytes, chunk)?;
    }
    scan.finish(rest)
}

fn seal_file(base: u64) -> FileId {
    FileId::PartitionSeal { key: KEY, base }
}

/// The two logs answer every read plan alike and hold the same segments.
fn assert_same_log(a: &PartitionLog, b: &PartitionLog, files: &Files) {
    assert_eq!(a.high_watermark(), b.high_watermark());
    assert_eq!((a.base, a.size, &a.index), (b.base, b.size, &b.index), "the active segment");
    assert_eq!(a.sealed, b.sealed, "sealed segments: indexes, sizes, newest timestamps");
    assert_eq!(a.active_newest_ms, b.active_newest_ms);
    for offset in a.log_start_offset()..a.high_watermark() {
        for (max, max_bytes) in [(1, 1 << 20), (5, 1 << 20), (1_000, 200)] {
            assert_eq!(a.read_plan(offset, max, max_bytes), b.read_plan(offset, max, max_bytes));
        }
    }
    assert_eq!(files.read_all(a), files.read_all(b));
}

#[test]
fn a_roll_writes_the_sealed_segments_seal_file() {
    let (log, files) = filled_two_origins(20, 300);
    let seals = files.seals();
    assert_eq!(
        seals.keys().copied().collect::<Vec<_>>(),
        log.sealed.keys().copied().collect::<Vec<_>>()
    );
    for (base, bytes) in &seals {
        let seal = Seal::decode(bytes).expect("a whole, intact seal");
        let segment = &log.sealed[base];
        assert_eq!(
            (seal.base, seal.end, seal.size),
            (*base, segment.index.records(), segment.size)
        );
        assert_eq!(seal.newest_ms, segment.newest_ms);
        assert_eq!(seal.entries, segment.index.entry_list());
        let replayable = seal.tail.iter().all(|(origin, seqs)| {
            seqs.keys().all(|seq| *seq >= seal.checkpoints.get(origin).copied().unwrap_or(0))
        });
        assert!(replayable, "the tail holds only what an origin may still replay: {seal:?}");
        assert!(bytes.len() < 1_024, "small: {} bytes", bytes.len());
    }
    assert!(!files.0.contains_key(&seal_file(log.base)), "the active segment has none yet");
}

#[test]
fn an_adopted_log_equals_a_scanned_one() {
    let (mut log, mut files) = filled_two_origins(25, 300);
    log.write_shutdown_seal();
    files.run(&mut log);
    for chunk in [1, 64, 4096] {
        let scanned = recover(&files, chunk).expect("scans");
        let mut adopted = recover_sealed(&files, chunk).expect("adopts");
        assert_eq!(adopted.recovered_segments(), (log.segment_count() as u64, 0), "no scan");
        assert_eq!(scanned.recovered_segments(), (0, log.segment_count() as u64));
        assert_same_log(&adopted, &scanned, &files);
        assert_same_log(&adopted, &log, &files);
        // Dedup: every record an origin may still replay (at or above its checkpoint) is known.
        for record in files.read_all(&log) {
            let checkpoint = log.checkpoints[&record.origin_node];
            let fingerprint = record.fingerprint();
            let (origin, seq) = (record.origin_node, record.origin_seq);
            if seq >= checkpoint {
                assert!(adopted.origins.contains(origin, seq, fingerprint), "{origin:?} {seq}");
                assert!(scanned.origins.contains(origin, seq, fingerprint), "{origin:?} {seq}");
            }
        }
        assert_eq!(adopted.checkpoints, log.checkpoints, "checkpoints come back with the seals");
        assert!(adopted.take_stale_seals().is_empty());
        // Start-up syncs what it read, and nothing it adopted.
        assert!(adopted.startup_sync_files().is_empty(), "adopted segments are not synced");
        let mut scanned = scanned;
        assert_eq!(scanned.startup_sync_files(), log.segment_files(), "scanned ones are");
    }
}

#[test]
fn a_replay_of_an_adopted_sealed_segments_records_is_recognised() {
    let (mut log, mut files) = filled_two_origins(25, 300);
    log.write_shutdown_seal();
    files.run(&mut log);
    let mut adopted = recover_sealed(&files, 64).expect("adopts");
    // Origin 2's last commits, replayed whole after the restart: what sits at or above its
    // checkpoint is already here; nothing is written again.
    let checkpoint = log.checkpoints[&NodeId(2)];
    let replay: Vec<PartitionRecord> = files
        .read_all(&log)
        .into_iter()
        .filter(|r| r.origin_node == NodeId(2) && r.origin_seq >= checkpoint)
        .map(|r| PartitionRecord { offset: 0, ..r })
        .collect();
    let in_sealed = replay.iter().any(|r| {
        files.read_all(&log).iter().any(|x| {
            x.origin_node == r.origin_node && x.origin_seq == r.origin_seq && x.offset < log.base
        })
    });
    assert!(in_sealed, "some of the replay sits in a sealed, adopted segment");
    let part = CommitPart {
        id: CommitId(99),
        origin: NodeId(2),
        origin_checkpoint: checkpoint,
        records: replay,
    };
    let decided = adopted.begin_commit(vec![part]).expect("idle");
    assert_eq!(decided.len(), 1, "decided at once: every record is a duplicate");
    assert_eq!(decided[0].result.as_ref().map(|l| l.origin_seqs.len()), Ok(0));
    assert!(adopted.poll_io().is_none(), "nothing written");
    assert_eq!(adopted.high_watermark(), log.high_watermark());
}

#[test]
fn a_torn_garbled_misplaced_or_orphaned_seal_is_not_trusted() {
    let (mut log, mut files) = filled_two_origins(20, 300);
    log.write_shutdown_seal();
    files.run(&mut log);
    let scanned = recover(&files, 64).expect("scans");
    let second = *log.sealed.keys().nth(1).expect("several sealed segments");
    let good = files.0[&seal_file(second)].clone();
    let mut torn = good.clone();
    torn.truncate(good.len() - 3);
    let mut garbled = good.clone();
    garbled[20] ^= 0x04;
    let misplaced = files.0[&seal_file(0)].clone();
    for (what, bytes) in [("torn", torn), ("garbled", garbled), ("another segment's", misplaced)] {
        let mut damaged = Files(files.0.clone());
        damaged.0.insert(seal_file(second), bytes);
        let mut recovered = recover_sealed(&damaged, 64).expect("scanned instead");
        assert_eq!(recovered.recovered_segments().1, 1, "{what} seal: its segment is scanned");
        assert_same_log(&recovered, &scanned, &files);
        assert_eq!(recovered.take_stale_seals(), [seal_file(second)], "{what} seal: deleted");
        let synced = [FileId::PartitionSegment { key: KEY, base: second }];
        assert_eq!(recovered.startup_sync_files(), synced, "{what} seal: only it is synced");
        // The scanned segment's seal is written again once the node serves.
        recovered.release_held_seals();
        assert!(
            matches!(recovered.poll_io(), Some((PartIo::Seal { base }, DiskOp::Create { .. })) if base == second)
        );
    }
    let mut orphaned = Files(files.0.clone());
    orphaned.0.insert(seal_file(9_999), good);
    let mut recovered = recover_sealed(&orphaned, 64).expect("an orphan seal is ignored");
    assert_eq!(recovered.recovered_segments().1, 0);
    assert_eq!(recovered.take_stale_seals(), [seal_file(9_999)]);
}

#[test]
fn a_seal_whose_length_no_longer_matches_is_not_trusted() {
    let (mut log, mut files) = filled_two_origins(20, 300);
    if log.size >= log.segment_bytes {
        // The next commit would roll (and seal this segment afresh): make room first.
        let part = CommitPart {
            id: CommitId(76),
            origin: NodeId(1),
            origin_checkpoint: 0,
            records: vec![record(499)],
        };
        assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
        files.run(&mut log);
    }
    assert!(log.size < log.segment_bytes, "the next commit appends to this segment");
    log.write_shutdown_seal();
    files.run(&mut log);
    // A commit after the clean shutdown's seal: the active segment grew past what it records.
    let part = CommitPart {
        id: CommitId(77),
        origin: NodeId(1),
        origin_checkpoint: 0,
        records: vec![record(500)],
    };
    assert!(log.begin_commit(vec![part]).expect("idle").is_empty());
    files.run(&mut log);
    let mut recovered = recover_sealed(&files, 64).expect("recovers");
    assert_eq!(recovered.recovered_segments(), (log.segment_count() as u64 - 1, 1));
    assert_eq!(recovered.high_watermark(), log.high_watermark(), "the last record is found");
    assert_eq!(recovered.take_stale_seals(), [seal_file(log.base)], "the stale seal goes");
    // A torn tail on the last segment: the seal's length no longer holds, and the scan cuts it.
    let mut torn = Files(files.0.clone());
    recovered.write_shutdown_seal();
    torn.run(&mut recovered);
    torn.0.get_mut(&FileId::PartitionSegment { key: KEY, base: log.base }).unwrap().extend([7; 5]);
    let mut cut = recover_sealed(&torn, 64).expect("a torn last tail is cut");
    assert_eq!(cut.recovered_segments().1, 1);
    assert_eq!(cut.high_watermark(), log.high_watermark());
    assert!(matches!(cut.poll_io(), Some((PartIo::Repair, DiskOp::Truncate { .. }))));
}

#[test]
fn a_clean_shutdown_seals_the_active_segment_once_per_state() {
    let (mut log, mut files) = filled_two_origins(7, 300);
    assert!(log.wants_shutdown_seal());
    log.write_shutdown_seal();
    assert!(!log.wants_shutdown_seal(), "in flight");
    files.run(&mut log);
    assert!(!log.wants_shutdown_seal(), "written for this state");
    let seal = Seal::decode(&files.0[&seal_file(log.base)]).expect("the active segment's seal");
    assert_eq!((seal.end, seal.size), (log.high_watermark(), log.size));
    let mut adopted = recover_sealed(&files, 64).expect("adopts");
    assert_eq!(adopted.recovered_segments().1, 0, "the active segment needs no scan");
    assert!(!adopted.wants_shutdown_seal(), "adopted as it is: nothing to write again");
    let part = CommitPart {
        id: CommitId(9),
        origin: NodeId(1),
        origin_checkpoint: 0,
        records: vec![record(900)],
    };
    assert!(adopted.begin_commit(vec![part]).expect("idle").is_empty());
    files.run(&mut adopted);
    assert!(adopted.wants_shutdown_seal(), "a commit made it stale");
}

#[test]
fn a_sealed_segment_damaged_at_rest_is_adopted_and_its_damage_found_by_reads() {
    let (mut log, mut files) = filled_two_origins(20, 300);
    log.write_shutdown_seal();
    files.run(&mut log);
    let first = FileId::PartitionSegment { key: KEY, base: 0 };
    files.0.get_mut(&first).unwrap()[20] ^= 0x01; // inside record 0's body
    let adopted = recover_sealed(&files, 64).expect("adopted without a read: damage unseen");
    assert_eq!(adopted.recovered_segments().1, 0);
    let plan = adopted.read_plan(0, 1, 1 << 20).unwrap();
    let bytes = &files.0[&first][plan.pos as usize..(plan.pos + plan.len) as usize];
    let damage = adopted.decode_read(plan, bytes).unwrap_err();
    assert_eq!((damage.offset, damage.file, damage.byte), (0, first, 0));
    assert!(damage.to_string().contains("damaged record at offset 0"), "{damage}");
    assert!(recover(&files, 64).is_err(), "a scan refuses the same damage at start-up");
}
