//! Seal files through a whole node: a clean shutdown writes the seal of every partition's active
//! segment (and waits for those writes), a restart then adopts every segment without reading
//! one, and damage inside an adopted segment surfaces as a loud failed read, never as data.

use bytes::Bytes;

use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::io::{DiskOp, FileId, Input};

fn sealing_harness() -> Harness {
    let mut config = Harness::config();
    config.partition_segment_bytes = 400;
    let mut h = Harness::with_config(Default::default(), config);
    h.run();
    let reply = h.call(ClientOp::CreateTopic {
        name: "t".into(),
        partitions: Some(2),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    });
    assert!(matches!(reply, ClientReply::TopicCreated(_)), "{reply:?}");
    for batch in 0..20 {
        let messages = (0..5)
            .map(|i| ProduceMessage {
                key: None,
                partition: Some(i % 2),
                payload: Bytes::from(format!("b{batch}-m{i}-{}", "x".repeat(30))),
            })
            .collect();
        let reply = h.call(ClientOp::Produce { topic: "t".into(), messages, batch: true });
        assert!(matches!(reply, ClientReply::Produced { .. }), "{reply:?}");
    }
    h
}

fn files_of_kind(h: &Harness, seal: bool) -> Vec<FileId> {
    let wanted = |f: &&FileId| {
        if seal {
            matches!(f, FileId::PartitionSeal { .. })
        } else {
            matches!(f, FileId::PartitionSegment { .. })
        }
    };
    h.files.keys().filter(wanted).copied().collect()
}

fn read(h: &mut Harness, partition: u32, offset: u64) -> ClientReply {
    h.call(ClientOp::Consume { topic: "t".into(), partition, offset, max: 1_000, wait_ms: 0 })
}

fn shut_down(h: &mut Harness) {
    h.deliver(Input::BeginShutdown);
    h.run_io_only();
    assert!(h.node.is_shut_down());
}

#[test]
fn a_clean_shutdown_seals_every_active_segment_and_a_restart_reads_none() {
    let mut h = sealing_harness();
    let segments = files_of_kind(&h, false);
    assert!(segments.len() > 4, "{segments:?}");
    assert_eq!(files_of_kind(&h, true).len(), segments.len() - 2, "sealed ones only, yet");
    shut_down(&mut h);
    let seals: Vec<u64> = files_of_kind(&h, true)
        .into_iter()
        .map(|f| match f {
            FileId::PartitionSeal { base, .. } => base,
            _ => unreachable!(),
        })
        .collect();
    let bases: Vec<u64> = segments
        .iter()
        .map(|f| match f {
            FileId::PartitionSegment { base, .. } => *base,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(seals, bases, "one seal per segment, the active ones included");
    let before: Vec<ClientReply> = (0..2).map(|p| read(&mut h, p, 0)).collect();
    let mut h = h.restart();
    h.run();
    assert_eq!(h.node.recovered_segments(), (segments.len() as u64, 0), "nothing scanned");
    let after: Vec<ClientReply> = (0..2).map(|p| read(&mut h, p, 0)).collect();
    assert_eq!(before, after);
    // Nothing changed since: the next clean shutdown writes no seal again.
    let seals_before = files_of_kind(&h, true);
    h.deliver(Input::BeginShutdown);
    assert!(h.node.is_shut_down(), "nothing to write");
    assert_eq!(files_of_kind(&h, true), seals_before);
}

#[test]
fn damage_in_an_adopted_segment_is_a_loud_failed_read_never_data() {
    let mut h = sealing_harness();
    shut_down(&mut h);
    // Every segment keeps its length and loses its content: adoption reads none of it.
    for file in files_of_kind(&h, false) {
        let content = h.files.get_mut(&file).unwrap();
        content.iter_mut().for_each(|b| *b = 0xEE);
    }
    let mut h = h.restart();
    h.run();
    assert_eq!(h.node.recovered_segments().1, 0, "adopted without a read");
    let reply = read(&mut h, 1, 0);
    let ClientReply::Error(ClientError::Internal(message)) = &reply else { panic!("{reply:?}") };
    assert!(message.contains("p1: damaged record at offset 0"), "{message}");
    assert_eq!(reply_status(&reply), 500);
    assert_eq!(h.node.stats().partition_read_damaged, 1);
}

fn reply_status(reply: &ClientReply) -> u16 {
    match reply {
        ClientReply::Error(error) => error.http_status(),
        _ => 200,
    }
}

/// The partition files among `ops`, with the step that deleted each.
fn partition_deletes(ops: &[DiskOp], steps: &[u64]) -> Vec<(FileId, u64)> {
    let deleted = ops.iter().zip(steps).filter_map(|(op, &step)| match op {
        DiskOp::Delete { file }
            if matches!(file, FileId::PartitionSeal { .. } | FileId::PartitionSegment { .. }) =>
        {
            Some((*file, step))
        }
        _ => None,
    });
    deleted.collect()
}

fn base_of(file: FileId) -> (u32, u64, bool) {
    match file {
        FileId::PartitionSeal { key, base } => (key.partition, base, false),
        FileId::PartitionSegment { key, base } => (key.partition, base, true),
        other => panic!("{other:?}"),
    }
}

/// Found by the simulator (cluster seeds 0x5eed059d, 0x1c67): a deleted topic's files were all
/// deleted at once, a crash landed some of them, and the restart refused the hole left in the
/// middle of a log. They go one at a time now, oldest segment first and each seal before its
/// segment, so a crash after any of them restarts, and the rest goes as orphaned.
#[test]
fn a_deleted_topics_files_go_one_at_a_time_and_a_crash_after_any_of_them_restarts() {
    let mut h = sealing_harness();
    let before = h.files.clone();
    let first_op = h.ops.len();
    assert_eq!(h.call(ClientOp::DeleteTopic { name: "t".into() }), ClientReply::TopicDeleted);
    h.run();
    let deletes = partition_deletes(&h.ops[first_op..], &h.op_steps[first_op..]);
    assert!(files_of_kind(&h, false).is_empty() && files_of_kind(&h, true).is_empty());
    assert!(deletes.len() > 8, "{deletes:?}");
    for partition in 0..2 {
        let order: Vec<(u64, bool)> = deletes
            .iter()
            .map(|&(file, _)| base_of(file))
            .filter(|&(p, ..)| p == partition)
            .map(|(_, base, segment)| (base, segment))
            .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "oldest first, each seal before its segment");
    }
    for pair in deletes.windows(2) {
        let (a, b) = (base_of(pair[0].0), base_of(pair[1].0));
        assert!(a.0 != b.0 || pair[0].1 < pair[1].1, "one delete at a time per log: {pair:?}");
    }
    // A crash after the first `landed` deletes: the metastore already dropped the topic.
    for landed in 0..deletes.len() {
        let mut files = h.files.clone();
        for &(file, _) in &deletes[landed..] {
            if let Some(bytes) = before.get(&file) {
                files.insert(file, bytes.clone());
            }
        }
        let mut restarted = Harness::from_files(files);
        restarted.run();
        restarted.run();
        assert!(restarted.node.is_ready(), "restarts after {landed} deletes");
        let left = files_of_kind(&restarted, false).len() + files_of_kind(&restarted, true).len();
        assert_eq!(left, 0, "after {landed} deletes the rest goes as orphaned");
    }
}
