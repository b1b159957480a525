//! Property tests of the dispatcher against a model: random arrivals, commit outcomes and time.
//! Whatever happens, no record is committed twice, the checkpoint never passes a record that is
//! not done, the window and lookahead bounds hold, and once failures stop everything drains.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::ids::TopicId;

struct AllAlive;

impl Placement for AllAlive {
    fn partitions(&self, topic: TopicId) -> Option<u32> {
        (topic == TopicId(1)).then_some(8)
    }
    fn owner_alive(&self, _key: PartitionKey) -> bool {
        true
    }
}

#[derive(Clone, Debug)]
enum Op {
    Arrive { count: u8, partition: u8 },
    Complete { which: u8, ok: bool },
    Tick { millis: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u8..50, 0u8..8).prop_map(|(count, partition)| Op::Arrive { count, partition }),
        (any::<u8>(), prop::bool::weighted(0.8)).prop_map(|(which, ok)| Op::Complete { which, ok }),
        (0u16..2000).prop_map(|millis| Op::Tick { millis }),
    ]
}

fn record(seq: u64, partition: u32) -> WalRecord {
    WalRecord {
        seq,
        timestamp_ms: 0,
        topic: "t".into(),
        topic_id: TopicId(1),
        partition,
        key: None,
        payload: Bytes::from_static(b"p"),
    }
}

struct Model {
    dispatcher: Dispatcher,
    now: Instant,
    next_seq: u64,
    in_flight: BTreeMap<CommitId, Vec<u64>>,
    committed: BTreeSet<u64>,
}

impl Model {
    fn new() -> Model {
        Model {
            dispatcher: Dispatcher::new(0),
            now: Instant(1_000_000),
            next_seq: 0,
            in_flight: BTreeMap::new(),
            committed: BTreeSet::new(),
        }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Arrive { count, partition } => {
                let room = self.dispatcher.room().min(usize::from(count));
                let records = (0..room as u64)
                    .map(|i| record(self.next_seq + i, u32::from(partition)))
                    .collect();
                self.next_seq += room as u64;
                self.dispatcher.accept(records, self.now, &AllAlive);
            }
            Op::Complete { which, ok } => {
                let Some(&id) =
                    self.in_flight.keys().nth(usize::from(which) % self.in_flight.len().max(1))
                else {
                    return;
                };
                let seqs = self.in_flight.remove(&id).unwrap();
                let result = if ok {
                    for seq in &seqs {
                        assert!(self.committed.insert(*seq), "record {seq} committed twice");
                    }
                    CommitResult::Committed { first_offset: 0 }
                } else {
                    CommitResult::Failed("injected".into())
                };
                self.dispatcher.on_commit(id, result, self.now, &AllAlive);
            }
            Op::Tick { millis } => self.now = self.now.plus_millis(u64::from(millis)),
        }
        for request in self.dispatcher.poll_commits(self.now) {
            let seqs: Vec<u64> = request.records.iter().map(|r| r.seq).collect();
            assert!(seqs.iter().all(|s| !self.committed.contains(s)), "recommitting done records");
            self.in_flight.insert(request.id, seqs);
        }
        self.check();
    }

    fn check(&self) {
        self.dispatcher.check_invariants();
        let checkpoint = self.dispatcher.checkpoint();
        assert!(
            (0..checkpoint).all(|s| self.committed.contains(&s)),
            "checkpoint passed an undone record"
        );
        assert!(self.dispatcher.held() <= self.dispatcher.window());
        assert!(self.in_flight.len() <= COMMIT_FANOUT);
    }

    fn drain(&mut self) {
        for _ in 0..10_000 {
            if self.dispatcher.checkpoint() == self.next_seq {
                return;
            }
            if self.in_flight.is_empty() {
                self.apply(Op::Tick { millis: 1_000 });
            } else {
                self.apply(Op::Complete { which: 0, ok: true });
            }
        }
        panic!(
            "dispatcher did not drain: checkpoint {} of {}",
            self.dispatcher.checkpoint(),
            self.next_seq
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn skip_set_window_and_checkpoint(ops in prop::collection::vec(op(), 1..300)) {
        let mut model = Model::new();
        for op in ops {
            model.apply(op);
        }
        model.drain();
        prop_assert_eq!(model.committed.len() as u64, model.next_seq, "every record committed once");
    }
}

#[test]
fn window_scales_with_active_destinations() {
    let mut dispatcher = Dispatcher::new(0);
    assert_eq!(dispatcher.window(), WINDOW_BASE_RECORDS);
    let placement = ManyPartitions;
    let records =
        (0..200u64).map(|seq| WalRecord { partition: seq as u32, ..record(seq, 0) }).collect();
    dispatcher.accept(records, Instant(0), &placement);
    assert_eq!(dispatcher.window(), 200 * 64);
}

struct ManyPartitions;

impl Placement for ManyPartitions {
    fn partitions(&self, _topic: TopicId) -> Option<u32> {
        Some(4096)
    }
    fn owner_alive(&self, _key: PartitionKey) -> bool {
        true
    }
}

#[test]
fn lookahead_bounds_reading_past_a_stuck_record() {
    let mut dispatcher = Dispatcher::new(0);
    let limit = dispatcher.read_limit();
    assert_eq!(limit, (LOOKAHEAD_WINDOWS * WINDOW_BASE_RECORDS) as u64);
    // One stuck record at seq 0 pins the checkpoint; records behind it commit but reading stops
    // at the lookahead bound.
    dispatcher.accept(vec![record(0, 0)], Instant(0), &AllAlive);
    let stuck = dispatcher.poll_commits(Instant(0));
    assert_eq!(stuck.len(), 1);
    let mut seq = 1;
    while dispatcher.room() > 0 {
        let n = dispatcher.room().min(1000) as u64;
        dispatcher.accept((seq..seq + n).map(|s| record(s, 1)).collect(), Instant(0), &AllAlive);
        seq += n;
        for request in dispatcher.poll_commits(Instant(0)) {
            let ok = CommitResult::Committed { first_offset: 0 };
            dispatcher.on_commit(request.id, ok, Instant(0), &AllAlive);
        }
    }
    assert_eq!(dispatcher.checkpoint(), 0, "pinned by the stuck record");
    assert_eq!(dispatcher.read_upto(), limit, "reading stops at 16 windows past the checkpoint");
    dispatcher.check_invariants();
}
