//! Elections, replication of topic commands, assignment, membership and read barriers across
//! 1, 3 and 5 replicas in the deterministic test world.

use crate::api::ClientError;
use crate::ids::{NodeId, PartitionKey, TopicId};
use crate::meta::{Applied, MetaCommand, ProposeError};

use super::harness::{World, create, heartbeat};

fn elect(world: &mut World) -> u32 {
    let all_agree = |w: &World| {
        w.leader().is_some_and(|l| {
            w.hosts.values().filter_map(|h| h.meta.as_ref()).all(|m| m.leader() == Some(NodeId(l)))
        })
    };
    assert!(world.run_until(10_000, all_agree), "no leader elected");
    world.leader().unwrap()
}

/// A cluster with a leader and every member heartbeating and alive.
fn healthy(nodes: u32, seed: u64) -> World {
    let mut world = World::new(nodes, seed);
    elect(&mut world);
    world.heartbeating = (1..=nodes).map(NodeId).collect();
    let all_alive = |w: &World| {
        let leader = w.leader().unwrap();
        (1..=nodes).all(|n| w.meta(leader).is_alive(NodeId(n)))
    };
    assert!(world.run_until(5_000, all_alive));
    world
}

fn owners(world: &World, node: u32, topic: TopicId, partitions: u32) -> Vec<u32> {
    (0..partitions)
        .map(|partition| {
            let key = PartitionKey { topic, partition };
            world.meta(node).owner(key).unwrap().0
        })
        .collect()
}

#[test]
fn elections_in_one_three_and_five_nodes() {
    let mut single = World::new(1, 7);
    single.run_for(5);
    assert_eq!(single.leader(), Some(1), "a single voter elects itself at once");
    for nodes in [3, 5] {
        for seed in 0..4 {
            let mut world = World::new(nodes, seed);
            let leader = elect(&mut world);
            assert!(world.now.micros_since(super::harness::T0) < 4_000_000);
            assert!(world.meta(leader).is_leader());
            world.run_for(3_000);
            assert_eq!(world.leader(), Some(leader), "a healthy leader stays");
        }
    }
}

#[test]
fn topics_replicate_with_round_robin_owners_and_apply_time_validation() {
    let mut world = healthy(3, 11);
    let Ok(Applied::Created(orders)) = world.propose_and_wait(create("orders", 6)) else {
        panic!("create failed");
    };
    assert_eq!(orders.partitions, 6);
    assert!(world.run_until(1_000, |w| { (1..=3).all(|n| w.meta(n).topic("orders").is_some()) }));
    for node in 1..=3 {
        assert_eq!(owners(&world, node, orders.id, 6), [1, 2, 3, 1, 2, 3]);
        assert!(world.meta(node).caught_up());
    }
    let members = world.meta(1).members();
    assert_eq!(members.iter().map(|m| m.partitions_owned).collect::<Vec<_>>(), [2, 2, 2]);
    assert!(matches!(world.propose_and_wait(create("orders", 1)), Err(ClientError::Conflict(_))));
    assert!(matches!(
        world.propose_and_wait(create("bad/name", 1)),
        Err(ClientError::BadRequest(_))
    ));
    let delete = MetaCommand::DeleteTopic { name: "orders".into(), id: orders.id };
    assert!(matches!(world.propose_and_wait(delete.clone()), Ok(Applied::Deleted(_))));
    assert!(matches!(world.propose_and_wait(delete.clone()), Err(ClientError::NotFound(_))));
    let Ok(Applied::Created(again)) = world.propose_and_wait(create("orders", 2)) else {
        panic!("recreate failed");
    };
    assert_ne!(again.id, orders.id, "a new incarnation");
    // A late copy of the first delete names the first incarnation: it leaves the new one be.
    assert!(matches!(world.propose_and_wait(delete), Err(ClientError::NotFound(_))));
    assert!(world.run_until(1_000, |w| {
        (1..=3).all(|n| w.meta(n).topic("orders").is_some_and(|t| t.id == again.id))
    }));
    for node in 1..=3 {
        let meta = world.meta(node);
        assert!(meta.confirm_gone_locally(orders.id));
        assert!(!meta.confirm_gone_locally(again.id));
        assert_eq!(meta.topic_by_id(again.id).unwrap().name, "orders");
        assert_eq!(meta.topics().count(), 1);
    }
}

#[test]
fn followers_refuse_proposals_and_name_the_leader() {
    let mut world = World::new(3, 5);
    let leader = elect(&mut world);
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    assert_eq!(
        world.propose(follower, heartbeat(follower)),
        Err(ProposeError::NotLeader { leader: Some(NodeId(leader)) })
    );
}

#[test]
fn a_silent_member_is_marked_dead_after_the_timeout_and_alive_when_it_returns() {
    let mut world = healthy(3, 21);
    let leader = world.leader().unwrap();
    let victim = (1..=3).rev().find(|&n| n != leader).unwrap();
    world.crash(NodeId(victim));
    let crashed_at = world.now;
    let dead_everywhere =
        |w: &World| (1..=3).filter(|&n| n != victim).all(|n| !w.meta(n).is_alive(NodeId(victim)));
    assert!(world.run_until(10_000, dead_everywhere));
    let took = world.now.micros_since(crashed_at) / 1_000;
    assert!((4_000..=7_000).contains(&took), "marked dead after {took} ms");
    // Sticky: a topic created now goes to the live members only.
    let Ok(Applied::Created(topic)) = world.propose_and_wait(create("t", 4)) else {
        panic!("create failed");
    };
    let live: Vec<u32> = owners(&world, leader, topic.id, 4);
    assert!(live.iter().all(|&o| o != victim), "{live:?}");
    world.start(NodeId(victim));
    assert!(world.run_until(5_000, |w| { (1..=3).all(|n| w.meta(n).is_alive(NodeId(victim))) }));
    assert!(world.liveness.contains(&(NodeId(leader), NodeId(victim), false)));
    assert!(world.liveness.contains(&(NodeId(leader), NodeId(victim), true)));
}

#[test]
fn an_isolated_leader_is_replaced_and_its_proposals_fail() {
    let mut world = healthy(3, 31);
    let old = world.leader().unwrap();
    world.isolate(old);
    let stale = world.propose(old, create("lost", 1)).expect("it still believes it leads");
    let others: Vec<u32> = (1..=3).filter(|&n| n != old).collect();
    let new_leader = |w: &World| others.iter().any(|&n| w.meta(n).is_leader());
    assert!(world.run_until(5_000, new_leader));
    let barrier = world.read_barrier(old);
    // A new leader commits without the old one.
    let new = *others.iter().find(|&&n| world.meta(n).is_leader()).unwrap();
    let waiter = world.propose(new, create("kept", 1)).unwrap();
    assert!(world.run_until(2_000, |w| w.results.contains_key(&waiter)));
    assert!(world.results[&waiter].is_ok());
    assert!(
        world.run_until(6_000, |w| w.results.contains_key(&stale)
            && w.barriers.contains_key(&barrier))
    );
    assert!(matches!(world.results[&stale], Err(ClientError::Unavailable(_))));
    assert!(!world.barriers[&barrier], "a partitioned leader cannot confirm");
    assert!(!world.meta(old).is_leader(), "check-quorum made it step down");
    assert_eq!(world.propose(old, create("x", 1)), Err(ProposeError::NotLeader { leader: None }));
    world.cut.clear();
    assert!(world.run_until(5_000, |w| w.meta(old).topic("kept").is_some()));
    assert!(world.meta(old).topic("lost").is_none(), "its uncommitted entry was replaced");
}

#[test]
fn read_barriers_succeed_only_with_the_leaders_word() {
    let mut world = healthy(3, 41);
    let leader = world.leader().unwrap();
    let follower = (1..=3).find(|&n| n != leader).unwrap();
    let on_leader = world.read_barrier(leader);
    let on_follower = world.read_barrier(follower);
    assert!(world.run_until(1_000, |w| w.barriers.len() == 2));
    assert!(world.barriers[&on_leader] && world.barriers[&on_follower]);
    // Partition the follower; the leader deletes a topic it cannot hear about.
    let Ok(Applied::Created(topic)) = world.propose_and_wait(create("doomed", 1)) else {
        panic!("create failed");
    };
    assert!(world.run_until(1_000, |w| w.meta(follower).topic("doomed").is_some()));
    world.isolate(follower);
    world
        .propose_and_wait(MetaCommand::DeleteTopic { name: "doomed".into(), id: topic.id })
        .unwrap();
    let stale = world.read_barrier(follower);
    assert!(world.run_until(8_000, |w| w.barriers.contains_key(&stale)));
    assert!(!world.barriers[&stale], "a stale follower must not confirm");
    assert!(!world.meta(follower).confirm_gone_locally(topic.id));
    world.cut.clear();
    assert!(world.run_until(5_000, |w| w.meta(follower).leader().is_some()));
    let fresh = world.read_barrier(follower);
    assert!(world.run_until(3_000, |w| w.barriers.contains_key(&fresh)));
    assert!(world.barriers[&fresh]);
    assert!(world.meta(follower).confirm_gone_locally(topic.id), "applied the delete");
}

#[test]
fn undecodable_or_misaddressed_messages_are_dropped_and_counted() {
    let mut world = World::new(3, 3);
    elect(&mut world);
    let meta = world.hosts.get_mut(&NodeId(1)).unwrap().meta.as_mut().unwrap();
    let now = super::harness::T0;
    meta.handle_message(now, NodeId(2), b"\xff\xff\xff garbage");
    meta.handle_message(now, NodeId(2), &[]);
    assert!(meta.counters().messages_dropped >= 1);
}

#[test]
fn five_nodes_tolerate_two_failures_but_not_three() {
    let mut world = healthy(5, 51);
    let leader = world.leader().unwrap();
    let mut down: Vec<u32> = (1..=5).filter(|&n| n != leader).take(2).collect();
    for &n in &down {
        world.crash(NodeId(n));
    }
    assert!(world.propose_and_wait(create("a", 1)).is_ok());
    down.push((1..=5).find(|&n| n != leader && !down.contains(&n)).unwrap());
    world.crash(NodeId(down[2]));
    let waiter = world.propose(leader, create("b", 1)).unwrap();
    assert!(world.run_until(8_000, |w| w.results.contains_key(&waiter)));
    assert!(matches!(world.results[&waiter], Err(ClientError::Unavailable(_))), "503, no hang");
}

#[test]
fn followers_acknowledge_entries_only_after_their_fsync() {
    let mut world = healthy(3, 81);
    let leader = world.leader().unwrap();
    let followers: Vec<u32> = (1..=3).filter(|&n| n != leader).collect();
    world.heartbeating.clear();
    world.run_for(500);
    // One follower's disk hangs, the other's takes 400 ms per operation.
    world.hosts.get_mut(&NodeId(followers[0])).unwrap().stalled =
        Some(crate::io::FileId::MetaRaftLog);
    world.hosts.get_mut(&NodeId(followers[1])).unwrap().disk_delay_ms = 400;
    let waiter = world.propose(leader, create("slow", 1)).unwrap();
    world.run_for(300);
    assert!(!world.results.contains_key(&waiter), "no quorum of durable copies yet");
    assert!(world.run_until(2_000, |w| w.results.contains_key(&waiter)));
    assert!(world.results[&waiter].is_ok());
}

#[test]
fn barriers_from_several_followers_do_not_collide_at_the_leader() {
    let mut world = healthy(5, 91);
    let asks: Vec<u64> = (1..=5).map(|n| world.read_barrier(n)).collect();
    assert!(world.run_until(1_000, |w| asks.iter().all(|a| w.barriers.contains_key(a))));
    assert!(asks.iter().all(|a| world.barriers[a]), "{:?}", world.barriers);
}

/// A leader takes two proposals, is cut off before they commit, and a new leader commits its own
/// empty entry and another create at exactly those indices. After the heal the old leader's log
/// is overwritten: its waiters must hear that their proposals were lost (503), never the result
/// of the entries that took their indices (a waiter matched by index alone would be told that
/// `kept` was created, as if its own create had been).
#[test]
fn a_proposal_whose_index_a_new_leader_took_is_never_answered_with_that_entry() {
    let configs = (1..=3)
        .map(|n| {
            let mut config = super::harness::config(n, 3, 53);
            (config.request_timeout_ms, config.dead_after_ms) = (60_000, 600_000);
            config
        })
        .collect();
    let mut world = World::with_configs(configs);
    elect(&mut world);
    world.heartbeating = (1..=3).map(NodeId).collect();
    let leader = world.leader().unwrap();
    assert!(world.run_until(5_000, |w| (1..=3).all(|n| w.meta(leader).is_alive(NodeId(n)))));
    world.heartbeating.clear();
    world.run_for(1_000);
    let old = world.leader().unwrap();
    let last = world.meta(old).applied_index();
    assert!((1..=3).all(|n| world.meta(n).applied_index() == last), "all caught up");
    world.isolate(old);
    let stale =
        [world.propose(old, create("stale-a", 1)), world.propose(old, create("stale-b", 1))]
            .map(|waiter| waiter.expect("it still believes it leads"));
    let others: Vec<u32> = (1..=3).filter(|&n| n != old).collect();
    assert!(world.run_until(5_000, |w| others.iter().any(|&n| w.meta(n).is_leader())));
    let new = *others.iter().find(|&&n| world.meta(n).is_leader()).unwrap();
    let kept = world.propose(new, create("kept", 1)).unwrap();
    assert!(world.run_until(2_000, |w| w.results.contains_key(&kept)));
    assert!(matches!(&world.results[&kept], Ok(Applied::Created(t)) if t.name == "kept"));
    assert_eq!(world.meta(new).applied_index(), last + 2, "an empty entry, then `kept`");
    assert!(stale.iter().all(|w| !world.results.contains_key(w)), "undecided while cut off");
    world.cut.clear();
    assert!(world.run_until(5_000, |w| stale.iter().all(|s| w.results.contains_key(s))));
    for waiter in stale {
        match &world.results[&waiter] {
            Err(ClientError::Unavailable(why)) => assert!(why.contains("leader change"), "{why}"),
            other => panic!("a lost proposal was answered with {other:?}"),
        }
    }
    assert!(world.meta(old).topic("kept").is_some() && world.meta(old).topic("stale-b").is_none());
}

/// Seeds whose three nodes draw one election timeout (about one seed in a hundred) campaign at
/// the same tick in a symmetric world: the seeded spread must still separate them (sim seed
/// 0x26ea: with batched inputs, every campaign split the vote and the cluster never got ready).
#[test]
fn three_nodes_with_one_election_timeout_still_elect_a_leader() {
    let same_timeout = |world: &World| {
        let timeouts: Vec<usize> =
            (1..=3).map(|n| world.meta(n).raw.raft.randomized_election_timeout()).collect();
        timeouts.iter().all(|t| *t == timeouts[0])
    };
    let seeds: Vec<u64> = (0..2_000).filter(|s| same_timeout(&World::new(3, *s))).take(5).collect();
    assert_eq!(seeds.len(), 5, "about one seed in a hundred draws one timeout for all three");
    for seed in seeds {
        let mut world = World::new(3, seed);
        elect(&mut world);
    }
}
