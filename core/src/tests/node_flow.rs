//! End-to-end flows through one `Node`: produce → group commit → dispatch → commit_durable →
//! consume, across restarts and injected disk failures.

use bytes::Bytes;

use super::harness::Harness;
use crate::api::{ClientError, ClientOp, ClientReply, ProduceMessage};
use crate::io::{DiskError, DiskOp, FileId};

fn create(h: &mut Harness, name: &str, partitions: u32) {
    let reply = h.call(ClientOp::CreateTopic {
        name: name.into(),
        partitions: Some(partitions),
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    });
    assert!(matches!(reply, ClientReply::TopicCreated(_)), "{reply:?}");
}

fn message(payload: &str, key: Option<&str>, partition: Option<u32>) -> ProduceMessage {
    ProduceMessage {
        key: key.map(|k| Bytes::from(k.to_string())),
        partition,
        payload: Bytes::from(payload.to_string()),
    }
}

fn produce(h: &mut Harness, topic: &str, messages: Vec<ProduceMessage>) -> ClientReply {
    h.call(ClientOp::Produce { topic: topic.into(), messages, batch: true })
}

fn read_all(h: &mut Harness, topic: &str, partitions: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for partition in 0..partitions {
        let mut offset = 0;
        loop {
            let reply = h.call(ClientOp::Consume {
                topic: topic.into(),
                partition,
                offset,
                max: 7,
                wait_ms: 0,
            });
            let ClientReply::Records(records) = reply else { panic!("{reply:?}") };
            if records.is_empty() {
                break;
            }
            for record in records {
                assert_eq!(record.offset, offset);
                offset += 1;
                out.push((partition, String::from_utf8(record.payload.to_vec()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn produced_records_become_visible_and_survive_restart() {
    let mut h = Harness::new();
    create(&mut h, "t", 4);
    let mut expected = Vec::new();
    for i in 0..50 {
        let msg = match i % 3 {
            0 => message(&format!("m{i}"), Some(&format!("k{i}")), None),
            1 => message(&format!("m{i}"), None, Some(2)),
            _ => message(&format!("m{i}"), None, None),
        };
        assert_eq!(produce(&mut h, "t", vec![msg]), ClientReply::Produced { accepted: 1 });
        expected.push(format!("m{i}"));
    }
    let got = read_all(&mut h, "t", 4);
    let mut payloads: Vec<String> = got.iter().map(|(_, p)| p.clone()).collect();
    payloads.sort();
    expected.sort();
    assert_eq!(payloads, expected);
    assert!(
        got.iter()
            .filter(|(_, p)| p[1..].parse::<u32>().unwrap() % 3 == 1)
            .all(|(part, _)| *part == 2)
    );
    assert_eq!(h.node.stats().dispatch_backlog, 0);

    let mut h = h.restart();
    assert_eq!(read_all(&mut h, "t", 4), got, "a restart changes nothing visible");
    assert_eq!(h.node.stats().dispatch_backlog, 0);
}

#[test]
fn concurrent_produces_share_one_group_commit() {
    let mut h = Harness::new();
    create(&mut h, "t", 2);
    let requests: Vec<_> = (0..20)
        .map(|i| {
            let messages = vec![message(&format!("m{i}"), None, None)];
            h.submit(ClientOp::Produce { topic: "t".into(), messages, batch: false })
        })
        .collect();
    h.run();
    for request in requests {
        assert_eq!(h.replies[&request], ClientReply::Produced { accepted: 1 });
    }
    let stats = h.node.stats();
    assert_eq!(stats.records_accepted, 20);
    assert!(
        stats.wal_group_commits <= 2,
        "20 staged produces took {} group commits",
        stats.wal_group_commits
    );
}

#[test]
fn wal_fsync_failure_latches_and_loses_nothing_acked() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    assert_eq!(
        produce(&mut h, "t", vec![message("before", None, None)]),
        ClientReply::Produced { accepted: 1 }
    );
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Sync { file: FileId::WalSegment { .. } })
            .then(|| DiskError::Io("EIO".into()))
    }));
    let reply = produce(&mut h, "t", vec![message("during", None, None)]);
    assert!(matches!(reply, ClientReply::Error(ClientError::WalFailed(_))), "{reply:?}");
    h.fault = None;
    let reply = produce(&mut h, "t", vec![message("after", None, None)]);
    assert!(matches!(reply, ClientReply::Error(ClientError::WalFailed(_))), "latched: {reply:?}");
    assert_eq!(h.node.stats().wal_failed, 1);
    let mut h = h.restart();
    let got = read_all(&mut h, "t", 1);
    assert!(got.contains(&(0, "before".to_string())), "{got:?}");
    assert!(!got.iter().any(|(_, p)| p == "after"));
    assert_eq!(
        produce(&mut h, "t", vec![message("again", None, None)]),
        ClientReply::Produced { accepted: 1 }
    );
}

#[test]
fn wal_stays_small_once_dispatched() {
    let mut h = Harness::new();
    create(&mut h, "t", 3);
    let payload = "x".repeat(10_000);
    for _ in 0..400 {
        let messages = (0..2).map(|_| message(&payload, None, None)).collect();
        assert!(matches!(produce(&mut h, "t", messages), ClientReply::Produced { .. }));
    }
    assert_eq!(h.node.stats().dispatch_backlog, 0);
    assert!(
        h.wal_bytes() < 2 * 1024 * 1024,
        "WAL holds {} bytes after 8 MB produced",
        h.wal_bytes()
    );
}

#[test]
fn stuck_destination_pins_checkpoint_while_others_commit_then_drains() {
    let mut h = Harness::new();
    create(&mut h, "t", 3);
    let stuck = |op: &DiskOp| match op {
        DiskOp::Sync { file: FileId::PartitionSegment { key, .. } } if key.partition == 0 => {
            Some(DiskError::Io("EIO".into()))
        }
        _ => None,
    };
    h.fault = Some(Box::new(stuck));
    let messages = (0..30).map(|i| message(&format!("m{i}"), None, Some(i % 3))).collect();
    assert!(matches!(produce(&mut h, "t", messages), ClientReply::Produced { .. }));
    // Partition 0 fails: its records are rerouted to siblings after 3 passes, except a probe.
    let stats = h.node.stats();
    assert!(stats.commits_failed >= 3, "{stats:?}");
    assert!(stats.records_rerouted > 0);
    assert!(stats.dispatch_backlog >= 1, "the probe keeps the checkpoint pinned");
    h.fault = None;
    h.now = h.now.plus_millis(5_000);
    h.run();
    assert_eq!(h.node.stats().dispatch_backlog, 0);
    assert_eq!(read_all(&mut h, "t", 3).len(), 30, "every record visible exactly once");
}

#[test]
fn deleted_topic_records_are_discarded_and_never_reach_the_new_incarnation() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    // Stop the dispatch by failing partition commits, so records wait in the WAL.
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Sync { file: FileId::PartitionSegment { .. } })
            .then(|| DiskError::Io("EIO".into()))
    }));
    assert!(matches!(
        produce(&mut h, "t", vec![message("old", None, None)]),
        ClientReply::Produced { .. }
    ));
    assert_eq!(h.call(ClientOp::DeleteTopic { name: "t".into() }), ClientReply::TopicDeleted);
    h.fault = None;
    create(&mut h, "t", 1);
    h.now = h.now.plus_millis(5_000);
    h.run();
    assert_eq!(h.node.stats().records_discarded, 1);
    assert_eq!(h.node.stats().dispatch_backlog, 0);
    assert!(read_all(&mut h, "t", 1).is_empty());
}

#[test]
fn bad_requests_change_nothing() {
    let mut h = Harness::new();
    create(&mut h, "t", 4);
    let reply = h.call(ClientOp::CreateTopic {
        name: "t".into(),
        partitions: None,
        retention_ms: None,
        retention_bytes: None,
        queue: Default::default(),
    });
    assert!(matches!(reply, ClientReply::Error(ClientError::Conflict(_))));
    let reply = produce(&mut h, "nope", vec![message("x", None, None)]);
    assert!(matches!(reply, ClientReply::Error(ClientError::NotFound(_))));
    let reply = produce(&mut h, "t", vec![message("x", None, None), message("y", None, Some(99))]);
    assert!(matches!(reply, ClientReply::Error(ClientError::BadRequest(_))));
    assert_eq!(h.node.stats().records_accepted, 0);
    assert_eq!(h.wal_bytes(), 0);
}

#[test]
fn replay_after_crash_above_checkpoint_lands_no_duplicates() {
    let mut h = Harness::new();
    create(&mut h, "t", 2);
    let messages = (0..40).map(|i| message(&format!("m{i}"), None, None)).collect();
    h.submit(ClientOp::Produce { topic: "t".into(), messages, batch: true });
    // A lone producer's commit may wait out the linger and the flush pairing hold.
    h.run_for_micros(Harness::LONE_COMMIT_WAIT_US + 1);
    let mut committed = 0;
    while let Some(event) = h.node.poll_event() {
        if let crate::io::NodeEvent::Committed { origins, .. } = event {
            committed += origins.len();
        }
    }
    assert_eq!(committed, 40, "each record reported visible once");
    assert_eq!(h.node.stats().wal_checkpoint, 0, "the checkpoint is not durable yet");
    // Crash now: the dispatcher re-commits everything above the durable checkpoint.
    let mut h = h.restart();
    h.run();
    assert_eq!(h.node.stats().dispatch_backlog, 0);
    assert_eq!(read_all(&mut h, "t", 2).len(), 40, "idempotent commits: no second copy");
}

#[test]
fn a_max_size_record_is_dispatched_from_disk_after_restart() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Sync { file: FileId::PartitionSegment { .. } })
            .then(|| DiskError::Io("EIO".into()))
    }));
    let big = ProduceMessage {
        key: Some(Bytes::from(vec![b'k'; crate::constants::MAX_KEY_BYTES])),
        partition: None,
        payload: Bytes::from(vec![0xAB; crate::constants::MAX_MESSAGE_BYTES]),
    };
    let small = message("after", None, None);
    assert!(matches!(produce(&mut h, "t", vec![big, small]), ClientReply::Produced { .. }));
    assert_eq!(h.node.stats().dispatch_backlog, 2, "commits fail: both wait in the WAL");
    let mut h = h.restart();
    h.run();
    assert_eq!(h.node.stats().dispatch_backlog, 0, "read back from the WAL in one chunk");
    let reply = h.call(ClientOp::Consume {
        topic: "t".into(),
        partition: 0,
        offset: 0,
        max: 2,
        wait_ms: 0,
    });
    let ClientReply::Records(records) = reply else { panic!("{reply:?}") };
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].payload.len(), crate::constants::MAX_MESSAGE_BYTES);
}

/// Seed 0x4015: every WAL record damaged at rest held dispatch back for ten 1 s back-offs, so
/// a WAL with a few damaged records left the healthy ones behind them undispatched for a minute.
/// A damaged read is read again soon (10 ms); only an I/O error backs off.
#[test]
fn a_record_damaged_at_rest_in_the_wal_holds_dispatch_back_briefly() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    h.fault = Some(Box::new(|op| {
        matches!(op, DiskOp::Sync { file: FileId::PartitionSegment { .. } })
            .then(|| DiskError::Io("EIO".into()))
    }));
    // More records than the dispatcher holds: the ones past its window are read from the WAL.
    let total = crate::constants::WINDOW_BASE_RECORDS + 200;
    for batch in 0..total.div_ceil(1_000) {
        let messages = (batch * 1_000..total.min(batch * 1_000 + 1_000))
            .map(|i| message(&format!("m{i:06}"), None, None))
            .collect();
        assert!(matches!(produce(&mut h, "t", messages), ClientReply::Produced { .. }));
    }
    let damaged = format!("m{:06}", total - 100);
    let wal = h.files.get_mut(&FileId::WalSegment { first_seq: 0 }).expect("the WAL segment");
    let at = wal.windows(7).position(|w| w == damaged.as_bytes()).expect("the record's payload");
    wal[at + 3] ^= 0xff;
    h.fault = None;
    h.run(); // 3 simulated seconds: ten 1 s back-offs would not fit
    assert_eq!(h.node.stats().dispatch_backlog, 0, "the damaged record is declared lost");
    let read = read_all(&mut h, "t", 1);
    assert_eq!(read.len(), total - 1, "every other record is dispatched");
    assert!(!read.iter().any(|(_, p)| *p == damaged));
}

#[test]
fn shutdown_drains_dispatch_and_flushes_the_checkpoint() {
    let mut h = Harness::new();
    create(&mut h, "t", 3);
    let messages = (0..30).map(|i| message(&format!("m{i}"), None, None)).collect();
    h.submit(ClientOp::Produce { topic: "t".into(), messages, batch: true });
    h.node.handle_input(h.now, crate::io::Input::BeginShutdown);
    h.run_io_only();
    assert!(h.node.is_shut_down());
    let stats = h.node.stats();
    assert_eq!((stats.dispatch_backlog, stats.wal_checkpoint), (0, 30), "{stats:?}");
    let reply = h.call(ClientOp::Produce {
        topic: "t".into(),
        messages: vec![message("late", None, None)],
        batch: false,
    });
    assert_eq!(reply, ClientReply::Error(ClientError::ShuttingDown));
}

#[test]
fn nothing_read_at_start_up_is_used_before_it_is_synced() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    assert!(matches!(
        produce(&mut h, "t", vec![message("a", None, None)]),
        ClientReply::Produced { .. }
    ));
    let mut h = h.restart();
    assert!(!h.node.is_ready(), "start-up syncs are still running");
    let request = h.submit(ClientOp::Consume {
        topic: "t".into(),
        partition: 0,
        offset: 0,
        max: 1,
        wait_ms: 0,
    });
    assert!(!h.replies.contains_key(&request), "requests wait for the start-up syncs");
    h.run();
    assert!(h.node.is_ready());
    let ClientReply::Records(records) = &h.replies[&request] else { panic!() };
    assert_eq!(records.len(), 1);

    // A failed start-up sync means what was read may not be durable: fatal, never ready.
    let files = h.files.clone();
    assert!(files.contains_key(&FileId::MetaRaftLog));
    let mut h = Harness::from_files_with_fault(
        files,
        Box::new(|op| {
            matches!(op, DiskOp::Sync { file: FileId::MetaRaftLog })
                .then(|| DiskError::Io("EIO".into()))
        }),
    );
    h.run();
    assert!(!h.node.is_ready());
    assert!(
        h.node.fatal_error().is_some_and(|e| e.contains("raft.log")),
        "{:?}",
        h.node.fatal_error()
    );
}

/// Simulator finding M2 (seed 0x1363 nodes=1): the single voter appended to `meta/raft.log`
/// while the start-up sync of that file was in flight. When the sync failed (its dirty pages
/// dropped), the append still landed past a hole, and every later start refused the log as
/// corrupt. Nothing of the metastore may reach the disk before the start-up syncs succeed.
#[test]
fn the_metastore_writes_nothing_before_its_start_up_sync_succeeds() {
    use std::cell::RefCell;
    use std::rc::Rc;

    let mut h = Harness::new();
    create(&mut h, "t", 1);
    let files = h.files.clone();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&seen);
    let mut h = Harness::from_files_with_fault(
        files,
        Box::new(move |op| {
            let meta = matches!(op.file(), FileId::MetaRaftLog | FileId::MetaSnapshot);
            if meta {
                log.borrow_mut().push(op.clone());
            }
            let first_sync =
                matches!(op, DiskOp::Sync { file: FileId::MetaRaftLog }) && log.borrow().len() == 1;
            first_sync.then(|| DiskError::Io("EIO".into()))
        }),
    );
    h.run();
    assert!(h.node.fatal_error().is_some(), "the failed start-up sync is fatal");
    let seen = seen.borrow();
    assert!(matches!(seen[0], DiskOp::Sync { file: FileId::MetaRaftLog }), "{seen:?}");
    let written =
        seen.iter().any(|op| matches!(op, DiskOp::Write { .. } | DiskOp::Truncate { .. }));
    assert!(!written, "nothing reached the metastore's files: {seen:?}");
}

#[test]
fn a_failed_checkpoint_write_keeps_the_last_good_slot() {
    use std::cell::Cell;
    use std::rc::Rc;

    let mut h = Harness::new();
    create(&mut h, "t", 1);
    assert!(matches!(
        produce(&mut h, "t", vec![message("a", None, None)]),
        ClientReply::Produced { .. }
    ));
    let good = h.node.stats().wal_checkpoint;
    assert_eq!(good, 1, "the first checkpoint is durable");
    let creates = Rc::new(Cell::new(0));
    let syncs = Rc::new(Cell::new(0));
    let (c, s) = (creates.clone(), syncs.clone());
    h.fault = Some(Box::new(move |op| match op {
        DiskOp::Create { file: FileId::WalCheckpoint } => {
            c.set(c.get() + 1);
            None
        }
        DiskOp::Sync { file: FileId::WalCheckpoint } => {
            s.set(s.get() + 1);
            (s.get() <= 2).then(|| DiskError::Io("EIO".into()))
        }
        _ => None,
    }));
    assert!(matches!(
        produce(&mut h, "t", vec![message("b", None, None)]),
        ClientReply::Produced { .. }
    ));
    h.now = h.now.plus_millis(5_000);
    h.run();
    assert_eq!(
        creates.get(),
        0,
        "an existing checkpoint file is never re-created (it would truncate)"
    );
    assert!(syncs.get() >= 3, "failed checkpoint writes are retried");
    assert_eq!(h.node.stats().wal_checkpoint, 2);
    let h = h.restart();
    assert_eq!(h.node.stats().wal_checkpoint, 2, "recovered from the slot that was rewritten");
}

/// Issue 9, defect 4: a node whose durable checkpoint sits at the largest sequence recovery
/// accepts still produces, dispatches and serves (no `checkpoint + lookahead` overflow), and a
/// checkpoint past it is refused at start-up instead of overflowing later.
#[test]
fn a_checkpoint_at_the_sequence_bound_works_and_one_past_it_is_refused() {
    use crate::constants::MAX_WAL_SEQ;
    use crate::node::Node;
    use crate::wal::checkpoint::encode_slot;

    let mut h = Harness::new();
    create(&mut h, "t", 2);
    let mut files = std::mem::take(&mut h.files);
    files.retain(|file, _| !matches!(file, FileId::WalSegment { .. }));
    files.insert(FileId::WalCheckpoint, encode_slot(MAX_WAL_SEQ));
    let mut h = Harness::from_files(files.clone());
    h.run();
    let reply = produce(&mut h, "t", vec![message("x", None, Some(1)), message("y", None, None)]);
    assert_eq!(reply, ClientReply::Produced { accepted: 2 });
    assert_eq!(read_all(&mut h, "t", 2).len(), 2);
    assert_eq!(h.node.stats().dispatch_backlog, 0);

    files.insert(FileId::WalCheckpoint, encode_slot(u64::MAX - 3));
    let snapshot = files.into_iter().map(|(f, b)| (f, Bytes::from(b))).collect();
    let config = crate::node::Config::single(crate::ids::NodeId(1), 42);
    let refused = Node::recover(config, h.now, snapshot).err().expect("refused");
    assert!(refused.to_string().contains("beyond the largest WAL sequence"), "{refused}");
}

/// Issue 9, defect 5, through the node: the create is refused before it is proposed (encoded,
/// `u64::MAX` would have reached the log as "no retention" and been applied as such).
#[test]
fn a_create_with_retention_past_the_bound_is_refused_before_it_is_proposed() {
    use crate::constants::MAX_RETENTION_MS;

    let mut h = Harness::new();
    for bad in [u64::MAX, MAX_RETENTION_MS + 1] {
        let reply = h.call(ClientOp::CreateTopic {
            name: "r".into(),
            partitions: Some(1),
            retention_ms: Some(bad),
            retention_bytes: None,
            queue: Default::default(),
        });
        assert!(
            matches!(&reply, ClientReply::Error(ClientError::BadRequest(m)) if m.contains("retention_ms")),
            "{reply:?}"
        );
    }
    let empty = ClientReply::Topics { topics: Vec::new(), next: None };
    assert_eq!(h.call(ClientOp::list_topics()), empty);
    let reply = h.call(ClientOp::CreateTopic {
        name: "r".into(),
        partitions: Some(1),
        retention_ms: Some(MAX_RETENTION_MS),
        retention_bytes: None,
        queue: Default::default(),
    });
    let ClientReply::TopicCreated(topic) = reply else { panic!("{reply:?}") };
    assert_eq!(topic.retention_ms, Some(MAX_RETENTION_MS));
    let mut h = h.restart();
    h.run();
    let ClientReply::Topics { topics, .. } = h.call(ClientOp::list_topics()) else {
        panic!("list")
    };
    assert_eq!(topics[0].retention_ms, Some(MAX_RETENTION_MS), "the bound survives a restart");
}

#[test]
fn a_record_damaged_at_rest_is_a_loud_500_never_data() {
    let mut h = Harness::new();
    create(&mut h, "t", 1);
    let messages = (0..3).map(|i| message(&format!("m{i}"), None, Some(0))).collect();
    assert!(matches!(produce(&mut h, "t", messages), ClientReply::Produced { .. }));
    h.run();
    let log = h.files.keys().copied().find(|f| matches!(f, FileId::PartitionSegment { .. }));
    let file = h.files.get_mut(&log.expect("the partition's segment")).unwrap();
    let last = file.len() - 1;
    file[last] ^= 0x20; // inside the last record's payload
    let reply = h.call(ClientOp::Consume {
        topic: "t".into(),
        partition: 0,
        offset: 2,
        max: 10,
        wait_ms: 0,
    });
    let ClientReply::Error(error @ ClientError::Internal(message)) = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(error.http_status(), 500);
    assert!(message.contains("/p0: damaged record at offset 2"), "{message}");
    assert_eq!(h.node.stats().partition_read_damaged, 1);
    let ok = h.call(ClientOp::Consume {
        topic: "t".into(),
        partition: 0,
        offset: 0,
        max: 2,
        wait_ms: 0,
    });
    assert!(matches!(ok, ClientReply::Records(r) if r.len() == 2), "the rest is served");
}
