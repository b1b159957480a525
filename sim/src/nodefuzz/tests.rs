//! Hand-built operation sequences: each asserts something a broken node or a broken harness
//! would fail.

use bytes::Bytes;
use narad_core::{ClientOp, ClientReply, DiskOp, FileId, ProduceMessage};

use super::input::{
    ClientCmd, CrashKind, Fault, FuzzInput, KeySel, MessageSpec, Op, Setup, Size, Span, TopicSel,
};
use super::{Harness, run, run_input};

fn input(ops: Vec<Op>) -> FuzzInput {
    FuzzInput {
        setup: Setup::ReadyWithTopics,
        small_index: true,
        small_lanes: true,
        grouped_chunks: false,
        produce_quota: false,
        scan_chunk: 7,
        final_power_loss: true,
        ops,
    }
}

fn produce(topic: u8, sizes: &[Size]) -> Op {
    let messages = sizes
        .iter()
        .map(|&size| MessageSpec { key: KeySel::Small(1), partition: None, size })
        .collect();
    Op::Client(ClientCmd::Produce { topic: TopicSel(topic), messages, batch: true })
}

fn one(payload: &'static [u8]) -> ClientOp {
    let message =
        ProduceMessage { key: None, partition: None, payload: Bytes::from_static(payload) };
    ClientOp::Produce { topic: "t1".into(), messages: vec![message], batch: false }
}

#[test]
fn produce_crash_recover_read_back() {
    let ops = vec![
        produce(0, &[Size::Tiny(5), Size::Medium(300), Size::Edge(1)]),
        produce(1, &[Size::Tiny(1)]),
        Op::CompleteAll,
        Op::Crash { kind: CrashKind::PowerLoss, land: vec![] },
        Op::Settle,
        produce(1, &[Size::Tiny(9)]),
        Op::CompleteAll,
    ];
    let report = run_input(&input(ops));
    assert_eq!(report.acked, 5, "{report:?}");
    assert_eq!(report.starts, 3, "initial, crash, final power loss: {report:?}");
    assert!(report.checked);
}

#[test]
fn acknowledged_records_survive_power_loss_and_are_read_back() {
    let mut h = Harness::new(&input(Vec::new()));
    let request = h.client(one(b"durable"));
    h.complete_all();
    assert!(h.oracle.acked.iter().any(|a| a.payload.as_ref() == b"durable"), "request {request:?}");
    h.crash_and_restart(CrashKind::PowerLoss, &[]);
    assert!(h.run_until(10_000_000, |h| h.ready() && h.node().stats().dispatch_backlog == 0));
    let contents = h.read_everything();
    let found =
        contents.partitions.values().flatten().filter(|(_, p)| p.as_ref() == b"durable").count();
    assert_eq!(found, 1);
}

#[test]
fn a_single_failed_wal_write_fails_its_produce_and_latches() {
    let mut h = Harness::new(&input(Vec::new()));
    h.client(one(b"doomed"));
    loop {
        let pending = h.disk.pop_oldest().expect("the group commit's write comes");
        if matches!(pending.op, DiskOp::Write { file: FileId::WalSegment { .. }, .. }) {
            h.complete(pending, Some(Fault::Io));
            break;
        }
        h.complete(pending, None);
    }
    h.complete_all();
    assert!(h.latched, "a failed WAL write latches the WAL");
    assert!(h.oracle.acked.is_empty(), "nothing was acknowledged");
    assert_eq!(h.oracle.outstanding(), 0, "the produce was answered (500)");
    h.client(one(b"after"));
    assert_eq!(h.oracle.outstanding(), 0, "a latched WAL refuses at once");
    assert!(h.final_phase(true));
    assert!(h.oracle.acked.is_empty());
}

#[test]
fn failed_write_then_the_whole_story_passes_the_final_checks() {
    let ops = vec![
        produce(1, &[Size::Tiny(3)]),
        Op::Fail { pick: 0, error: Fault::NoSpace },
        Op::CompleteAll,
        produce(1, &[Size::Tiny(4)]),
        Op::CompleteAll,
    ];
    let report = run_input(&input(ops));
    assert_eq!(report.acked, 0, "the WAL latched at the first failure: {report:?}");
    assert_eq!(report.starts, 3, "restart at the heal, then the final power loss: {report:?}");
}

#[test]
fn completions_out_of_order_across_files() {
    let mut h = Harness::new(&input(Vec::new()));
    h.client(one(b"first"));
    while h.oracle.acked.is_empty() {
        let pending = h.disk.pop_oldest().expect("the group commit's I/O");
        h.complete(pending, None);
    }
    // The dispatcher's commit of `first` is queued on the partition log; the next group
    // commit's write on the WAL.
    h.client(one(b"second"));
    let files: Vec<FileId> = h.disk.busy_files();
    assert!(files.iter().any(|f| matches!(f, FileId::PartitionSegment { .. })), "{files:?}");
    assert!(files.iter().any(|f| matches!(f, FileId::WalSegment { .. })), "{files:?}");
    // Newest-first across files (within a file the queue keeps emission order).
    let mut order = Vec::new();
    while let Some(pending) = h.disk.pop_newest_head() {
        order.push(pending.seq);
        h.complete(pending, None);
    }
    assert!(order.windows(2).any(|w| w[0] > w[1]), "completed in emission order: {order:?}");
    assert_eq!(h.oracle.acked.len(), 2);
    assert!(h.final_phase(true));
}

#[test]
fn with_the_linger_on_a_lone_record_reaches_its_partition_by_the_timer() {
    let mut with_linger = input(Vec::new());
    with_linger.scan_chunk |= 0x8000;
    assert!(with_linger.dispatch_linger() && with_linger.scan_chunk_bytes() == 7 * 64);
    let mut h = Harness::new(&with_linger);
    h.client(one(b"first"));
    while h.oracle.acked.is_empty() {
        let pending = h.disk.pop_oldest().expect("the group commit's I/O");
        h.complete(pending, None);
    }
    h.complete_all();
    let partition_busy = |h: &Harness| {
        h.disk.busy_files().iter().any(|f| matches!(f, FileId::PartitionSegment { .. }))
    };
    assert!(!partition_busy(&h), "the lone record lingers for company");
    h.advance(narad_core::constants::LINGER_CAP_MS * 1_000);
    assert!(partition_busy(&h), "the linger's deadline sends it");
    assert!(h.final_phase(true));
}

#[test]
fn the_harness_catches_a_lost_acknowledged_record() {
    let mut h = Harness::new(&input(Vec::new()));
    h.client(one(b"kept"));
    h.complete_all();
    let mut forged = h.oracle.acked[0].clone();
    forged.payload = Bytes::from_static(b"never sent");
    h.oracle.acked.push(forged);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.final_phase(false)));
    let message = caught.expect_err("a missing record must fail the final check");
    let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("acked-visible"), "{text}");
}

#[test]
fn create_and_delete_round_trip() {
    let mut h = Harness::new(&input(Vec::new()));
    let reply = h.ask(ClientOp::DeleteTopic { name: "t0".into() }, 5_000_000);
    assert_eq!(reply, Some(ClientReply::TopicDeleted));
    let ops = vec![
        Op::Client(ClientCmd::Delete { topic: TopicSel(0) }),
        Op::Advance { time: Span::Centis(5) },
        Op::CompleteAll,
    ];
    for op in &ops {
        h.apply(op);
    }
    assert!(h.final_phase(true));
}

#[test]
fn arbitrary_bytes_decode_and_run() {
    for seed in 0..64u64 {
        let data: Vec<u8> = (0..512)
            .map(|i| (seed.wrapping_mul(0x9E37_79B9).wrapping_add(i * 31) >> 3) as u8)
            .collect();
        run(&data);
    }
    run(&[]);
}

#[test]
fn small_limits_make_the_metastore_snapshot_and_survive_a_restart() {
    let mut h = Harness::new(&input(Vec::new()));
    h.run_until(20_000_000, |_| false); // twenty heartbeats: past two snapshots
    assert!(h.disk.snapshot().contains_key(&FileId::MetaSnapshot), "no metastore snapshot");
    h.crash_and_restart(CrashKind::PowerLoss, &[]);
    assert!(h.run_until(10_000_000, Harness::ready));
    assert!(h.final_phase(true));
}

#[test]
fn chunks_of_one_batch_share_group_commits_and_read_back_once_after_a_power_loss() {
    let mut grouped = input(Vec::new());
    grouped.grouped_chunks = true;
    let mut h = Harness::new(&grouped);
    let payloads: Vec<Bytes> = (0..8u8).map(|i| Bytes::from(vec![b'a' + i; 300])).collect();
    let messages = payloads
        .iter()
        .map(|payload| ProduceMessage { key: None, partition: None, payload: payload.clone() })
        .collect();
    h.client(ClientOp::Produce { topic: "t1".into(), messages, batch: true });
    let mut record_writes = 0;
    while h.oracle.acked.len() < payloads.len() {
        let pending = h.disk.pop_oldest().expect("the batch's group commits");
        if let DiskOp::Write { file: FileId::WalSegment { .. }, data, .. } = &pending.op
            && data.iter().any(|&byte| byte != 0)
        {
            record_writes += 1;
        }
        h.complete(pending, None);
    }
    // Eight chunks of one ~340 B record each; a quiet group takes up to 2 KiB of them.
    assert!((2..8).contains(&record_writes), "{record_writes} WAL writes for 8 chunks");
    h.crash_and_restart(CrashKind::PowerLoss, &[]);
    assert!(h.run_until(10_000_000, |h| h.ready() && h.node().stats().dispatch_backlog == 0));
    let contents = h.read_everything();
    for payload in &payloads {
        let copies = contents.partitions.values().flatten().filter(|(_, p)| p == payload).count();
        assert_eq!(copies, 1, "payload {:?} read back once", payload[0]);
    }
}

#[test]
fn a_produce_past_the_quota_is_refused_and_never_lands() {
    let mut quota = input(Vec::new());
    quota.produce_quota = true;
    let mut h = Harness::new(&quota);
    let big = Bytes::from(vec![b'q'; 6_000]); // three seconds of 2 KiB/s
    let message =
        |payload: &Bytes| ProduceMessage { key: None, partition: None, payload: payload.clone() };
    h.client(ClientOp::Produce { topic: "t1".into(), messages: vec![message(&big)], batch: false });
    let refused = Bytes::from_static(b"refused");
    h.client(ClientOp::Produce {
        topic: "t1".into(),
        messages: vec![message(&refused)],
        batch: false,
    });
    assert!(h.run_until(10_000_000, |h| !h.oracle.acked.is_empty()), "the first is taken");
    assert_eq!(h.node().stats().produce_requests_throttled, 1, "the second is refused at once");
    assert!(h.final_phase(true));
    let contents = h.read_everything();
    let landed = |p: &Bytes| contents.partitions.values().flatten().filter(|(_, q)| q == p).count();
    assert_eq!((landed(&big), landed(&refused)), (1, 0));
}
