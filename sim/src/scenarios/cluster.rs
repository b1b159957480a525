//! Cluster scenarios (3 nodes): the metastore leader cut off during load, an owner that dies and
//! whose share is rerouted to live siblings before it returns, and a topic deleted while a node
//! that still holds its records is cut off from the leader (no discard before the leader's word;
//! the re-created topic never receives the old records). Node indexes are 0-based (node id - 1).

use narad_sim_runtime::FaultClass;

use super::Scenario;
use super::kit::{check, hit, plan, workload};
use crate::schedule::{FaultAction as A, ScheduledFault};
use crate::sim::START;
use crate::swarm::{NetPlan, NodeSizes, WorkloadConfig};

fn on(node: u32, ms: u64, action: A) -> ScheduledFault {
    ScheduledFault::on(node, ms, action)
}

/// The transport reports unreachable peers, as the tokio runtime's does.
fn net() -> NetPlan {
    NetPlan { report_unreachable: true, ..NetPlan::default() }
}

/// One topic of `partitions` partitions, keyed produces spread over `active_ms`.
fn one_topic(messages: u64, partitions: u32, active_ms: u64) -> WorkloadConfig {
    WorkloadConfig {
        initial_topics: 1,
        min_partitions: partitions,
        max_partitions: partitions,
        keyed_prob: 0.7,
        pinned_prob: 0.0,
        ..workload(messages, partitions, active_ms)
    }
}

pub(super) fn leader_isolated_during_load() -> Scenario {
    Scenario {
        name: "leader_isolated_during_load",
        story: "the metastore leader is cut off from both followers for 4 s while clients produce through every node: a new leader is elected, produces keep being accepted, nothing acked is lost",
        seed: 31,
        nodes: 3,
        sizes: NodeSizes::default(),
        net: net(),
        workload: WorkloadConfig { initial_topics: 2, ..workload(400, 3, 7_000) },
        faults: plan(),
        schedule: vec![
            on(0, 2_500, A::IsolateLeader { id: 0 }),
            on(0, 6_500, A::NetHeal { id: 0 }),
        ],
        expect: |o| {
            hit(o, FaultClass::LeaderIsolation)?;
            hit(o, FaultClass::LeaderChange)?;
            hit(o, FaultClass::Partition)?;
            check(o.totals.remote_commits > 0, "no commit went to another node")
        },
    }
}

pub(super) fn owner_dies_and_its_share_is_rerouted() -> Scenario {
    Scenario {
        name: "owner_dies_and_its_share_is_rerouted",
        story: "node 3 dies for 10 s while keyed produces to its partitions keep coming: once membership marks it dead its share is committed on live siblings, then it returns and serves its own partitions again; nothing is lost",
        seed: 32,
        nodes: 3,
        sizes: NodeSizes::default(),
        net: net(),
        workload: one_topic(400, 6, 12_000),
        faults: plan(),
        schedule: vec![on(2, 3_000, A::Die { power: false }), on(2, 13_000, A::Restart)],
        expect: |o| {
            hit(o, FaultClass::NodeDeath)?;
            check(o.totals.rerouted > 0, "nothing was rerouted while the owner was dead")?;
            check(o.counters.restarts > 0, "the dead node never came back")
        },
    }
}

pub(super) fn topic_deleted_while_a_node_is_cut_off() -> Scenario {
    Scenario {
        name: "topic_deleted_while_a_node_is_cut_off",
        story: "clients produce to t1 through node 3, which owns none of t1's partitions, while it is cut off; t1 is deleted through node 1: node 3's stale replica keeps the records (no discard without the leader's word), discards them only after the heal, and the re-created t1 never receives them",
        seed: 33,
        nodes: 3,
        sizes: NodeSizes::default(),
        net: net(),
        workload: one_topic(300, 2, 10_000),
        faults: plan(),
        schedule: vec![
            on(0, 0, A::Route { clients: Some(2), admin: Some(0) }),
            on(0, 1_500, A::Partition { id: 0, group: vec![2] }),
            on(0, 3_000, A::DeleteTopic("t1".into())),
            on(0, 6_000, A::NetHeal { id: 0 }),
            on(0, 6_000, A::Route { clients: None, admin: None }),
            on(0, 8_000, A::CreateTopic("t1".into())),
        ],
        expect: |o| {
            hit(o, FaultClass::Partition)?;
            let first = o.counters.first_discard_at.ok_or("no record was discarded")?;
            check(first.0 >= START.0 + 6_000_000, "a record was discarded before the heal")?;
            check(o.verdict.deleted_topic > 0, "no acked record belonged to the deleted t1")
        },
    }
}
