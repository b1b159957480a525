//! Property tests of the dispatcher against a model: random arrivals, commit outcomes and time.
//! Whatever happens, no record is committed twice, the checkpoint never passes a record that is
//! not done, the window and lookahead bounds hold, and once failures stop everything drains,
//! with the linger on or off.

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

/// Topic 1 with 8 partitions; the owners of the listed partitions are dead per membership.
struct Membership(BTreeSet<u32>);

impl Placement for Membership {
    fn partitions(&self, topic: TopicId) -> Option<u32> {
        (topic == TopicId(1)).then_some(8)
    }
    fn owner_alive(&self, key: PartitionKey) -> bool {
        !self.0.contains(&key.partition)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        count: u8,
        partition: u8,
    },
    Complete {
        which: u8,
        ok: bool,
    },
    Tick {
        millis: u16,
    },
    /// Membership says the owner of `partition` died (or came back).
    Owner {
        partition: u8,
        alive: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u8..50, 0u8..8).prop_map(|(count, partition)| Op::Arrive { count, partition }),
        6 => (any::<u8>(), prop::bool::weighted(0.8))
            .prop_map(|(which, ok)| Op::Complete { which, ok }),
        6 => (0u16..2000).prop_map(|millis| Op::Tick { millis }),
        1 => (0u8..8, any::<bool>()).prop_map(|(partition, alive)| Op::Owner { partition, alive }),
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
        chunk: None,
    }
}

struct Model {
    dispatcher: Dispatcher,
    now: Instant,
    next_seq: u64,
    in_flight: BTreeMap<CommitId, (PartitionKey, Vec<u64>)>,
    committed: BTreeSet<u64>,
    membership: Membership,
}

impl Model {
    fn new(linger: bool) -> Model {
        Model {
            dispatcher: Dispatcher::new(0).with_linger(linger),
            now: Instant(1_000_000),
            next_seq: 0,
            in_flight: BTreeMap::new(),
            committed: BTreeSet::new(),
            membership: Membership(BTreeSet::new()),
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
                self.dispatcher.accept(records, self.now, &self.membership);
            }
            Op::Complete { which, ok } => {
                let Some(&id) =
                    self.in_flight.keys().nth(usize::from(which) % self.in_flight.len().max(1))
                else {
                    return;
                };
                let (_, seqs) = self.in_flight.remove(&id).unwrap();
                let result = if ok {
                    for seq in &seqs {
                        assert!(self.committed.insert(*seq), "record {seq} committed twice");
                    }
                    CommitResult::Committed { first_offset: 0 }
                } else {
                    CommitResult::Failed("injected".into())
                };
                self.dispatcher.on_commit(id, result, self.now, &self.membership);
            }
            Op::Tick { millis } => self.now = self.now.plus_millis(u64::from(millis)),
            Op::Owner { partition, alive } => {
                let changed = if alive {
                    self.membership.0.remove(&u32::from(partition))
                } else {
                    self.membership.0.insert(u32::from(partition))
                };
                if changed {
                    self.dispatcher.reroute_dead_owners(self.now, &self.membership);
                }
            }
        }
        for request in self.dispatcher.poll_commits(self.now) {
            let seqs: Vec<u64> = request.records.iter().map(|r| r.seq).collect();
            assert!(seqs.iter().all(|s| !self.committed.contains(s)), "recommitting done records");
            self.in_flight.insert(request.id, (request.target, seqs));
        }
        self.check();
    }

    fn check(&self) {
        self.dispatcher.check_deep().expect("dispatcher consistent");
        let checkpoint = self.dispatcher.checkpoint();
        assert!(
            (0..checkpoint).all(|s| self.committed.contains(&s)),
            "checkpoint passed an undone record"
        );
        assert!(self.dispatcher.held() <= self.dispatcher.window());
        assert!(self.in_flight.len() <= COMMIT_FANOUT);
    }

    /// Faults stop: commits to live owners succeed, to dead ones fail (unreachable). Owners
    /// that stay dead never return, yet everything drains while one owner is alive.
    fn drain(&mut self) {
        if self.membership.0.len() == 8 {
            self.apply(Op::Owner { partition: 0, alive: true });
        }
        for _ in 0..10_000 {
            if self.dispatcher.checkpoint() == self.next_seq {
                return;
            }
            match self.in_flight.first_key_value() {
                None => self.apply(Op::Tick { millis: 1_000 }),
                Some((_, (target, _))) => {
                    let ok = self.membership.owner_alive(*target);
                    self.apply(Op::Complete { which: 0, ok });
                }
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
    fn skip_set_window_checkpoint_and_reroute(
        ops in prop::collection::vec(op(), 1..300),
        linger in any::<bool>(),
    ) {
        let mut model = Model::new(linger);
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
    dispatcher.check_deep().expect("dispatcher consistent");
}

/// Topic 1 with two partitions; the owner of `dead` (if any) is dead per membership.
struct Pair {
    dead: Option<u32>,
}

impl Placement for Pair {
    fn partitions(&self, topic: TopicId) -> Option<u32> {
        (topic == TopicId(1)).then_some(2)
    }
    fn owner_alive(&self, key: PartitionKey) -> bool {
        self.dead != Some(key.partition)
    }
}

/// Runs `passes` dispatch passes one second apart: commits to a partition whose owner is dead
/// fail (unreachable), all others succeed. Returns the partitions commits were sent to.
fn run_passes(d: &mut Dispatcher, now: &mut Instant, passes: u32, placement: &Pair) -> Vec<u32> {
    let mut targets = Vec::new();
    for _ in 0..passes {
        for request in d.poll_commits(*now) {
            targets.push(request.target.partition);
            let result = if placement.owner_alive(request.target) {
                CommitResult::Committed { first_offset: 0 }
            } else {
                CommitResult::Failed("owner unreachable".into())
            };
            d.on_commit(request.id, result, *now, placement);
            d.check_deep().expect("dispatcher consistent");
        }
        *now = now.plus_millis(FAILURE_BACKOFF_MS);
    }
    targets
}

/// Fails partition 1's commits until it is failing (3 passes), keeping `record` as its probe.
fn make_failing(d: &mut Dispatcher, now: &mut Instant, record: WalRecord, placement: &Pair) {
    d.accept(vec![record], *now, placement);
    for _ in 0..REROUTE_AFTER_FAILED_PASSES {
        let requests = d.poll_commits(*now);
        assert_eq!(requests.len(), 1);
        d.on_commit(requests[0].id, CommitResult::Failed("disk".into()), *now, placement);
        *now = now.plus_millis(FAILURE_BACKOFF_MS);
    }
}

/// C5 (sim seeds 0x3f4a, 0x8356): records placed on a dead owner's destination while the only
/// sibling was failing stayed there (one as a "probe") after the sibling became healthy again,
/// sent to the dead owner every second, forever.
#[test]
fn records_parked_on_a_dead_owner_move_once_a_sibling_is_healthy_and_no_probe_stays() {
    let mut d = Dispatcher::new(0);
    let mut now = Instant(1_000_000);
    let alive = Pair { dead: None };
    make_failing(&mut d, &mut now, record(0, 1), &alive);
    // Partition 0's owner is dead; partition 1 is failing: the records wait on partition 0.
    let dead = Pair { dead: Some(0) };
    d.accept((1..=5).map(|seq| record(seq, 0)).collect(), now, &dead);
    d.reroute_dead_owners(now, &dead);
    assert_eq!(d.destinations[&PartitionKey { topic: TopicId(1), partition: 0 }].queue_len(), 5);
    // The sibling's probe commits (it is healthy again); partition 0's next failed pass moves
    // everything there, and nothing is sent to the dead owner after that.
    let targets = run_passes(&mut d, &mut now, 6, &dead);
    assert_eq!(d.checkpoint(), 6, "every record committed on the live sibling: {targets:?}");
    let last_to_dead = targets.iter().rposition(|&p| p == 0).expect("tried the dead owner once");
    assert!(targets[last_to_dead + 1..].iter().all(|&p| p == 1));
    assert!(targets.iter().filter(|&&p| p == 0).count() <= 2, "{targets:?}");
    let parked = d.destinations.get(&PartitionKey { topic: TopicId(1), partition: 0 });
    assert!(parked.is_none_or(Destination::is_empty), "no probe kept on a dead owner");
}

/// A sibling that is failing but idle (its records moved away while its owner was dead) has no
/// probe, so nothing would show it healthy: a dead owner's parked record is lent as its probe.
#[test]
fn an_idle_failing_sibling_gets_a_probe_from_a_dead_owners_destination() {
    let mut d = Dispatcher::new(0);
    let mut now = Instant(1_000_000);
    make_failing(&mut d, &mut now, record(0, 1), &Pair { dead: None });
    // Partition 1's owner dies: its record moves to partition 0 and commits; 1 is idle, failing.
    let one_dead = Pair { dead: Some(1) };
    d.reroute_dead_owners(now, &one_dead);
    run_passes(&mut d, &mut now, 1, &one_dead);
    assert_eq!(d.checkpoint(), 1);
    // It returns; partition 0's owner dies with records queued for it.
    let zero_dead = Pair { dead: Some(0) };
    d.accept((1..=5).map(|seq| record(seq, 0)).collect(), now, &zero_dead);
    d.reroute_dead_owners(now, &zero_dead);
    let targets = run_passes(&mut d, &mut now, 6, &zero_dead);
    assert_eq!(d.checkpoint(), 6, "everything committed on partition 1: {targets:?}");
}

#[test]
fn records_of_an_abandoned_chunked_request_are_done_without_a_commit() {
    use crate::wal::Chunk;
    let now = Instant(1_000_000);
    let mut d = Dispatcher::new(0).with_abandoned([1]);
    let chunked =
        |seq, request| WalRecord { chunk: Some(Chunk { request, last: false }), ..record(seq, 0) };
    let records = vec![record(0, 0), chunked(1, 1), record(2, 0), chunked(3, 1), chunked(4, 4)];
    d.accept(records, now, &AllAlive);
    assert_eq!(d.counters().records_abandoned, 2);
    let commits = d.poll_commits(now);
    let seqs: Vec<u64> = commits.iter().flat_map(|c| c.records.iter().map(|r| r.seq)).collect();
    assert_eq!(seqs, [0, 2, 4], "a request not named abandoned is dispatched");
    for commit in commits {
        d.on_commit(commit.id, CommitResult::Committed { first_offset: 0 }, now, &AllAlive);
    }
    assert_eq!(d.checkpoint(), 5, "the checkpoint passes the dropped records");
}

#[test]
fn records_of_a_frozen_request_are_never_dispatched_and_hold_the_checkpoint() {
    use crate::wal::Chunk;
    let now = Instant(1_000_000);
    let mut d = Dispatcher::new(0);
    d.freeze(1);
    let chunked =
        |seq, request| WalRecord { chunk: Some(Chunk { request, last: false }), ..record(seq, 0) };
    d.accept(vec![record(0, 0), chunked(1, 1), record(2, 0), chunked(3, 1)], now, &AllAlive);
    let commits = d.poll_commits(now);
    let seqs: Vec<u64> = commits.iter().flat_map(|c| c.records.iter().map(|r| r.seq)).collect();
    assert_eq!(seqs, [0, 2], "the frozen request's records are set aside");
    for commit in commits {
        d.on_commit(commit.id, CommitResult::Committed { first_offset: 0 }, now, &AllAlive);
    }
    assert_eq!((d.checkpoint(), d.read_upto()), (1, 4), "the checkpoint stays below them");
    d.check_deep().expect("sound bookkeeping");
}
