//! The end of a tier-2 run, on the client host once the harness healed every fault: wait until
//! every node is ready again and its dispatch backlog is empty (`/readyz`, `/metrics`: what an
//! operator would look at), then read every partition of every live topic back over HTTP, in
//! full, and hand everything to the checker, as the first tier's final read does. With access
//! control on, every request carries the bootstrap admin's credentials.

use std::collections::BTreeMap;
use std::time::Duration;

use narad_core::api::TopicInfo;
use narad_core::constants::TOPIC_PAGE_DEFAULT;
use narad_core::{ClientError, ClientOp, ClientReply, PartitionKey, TopicId};

use super::clients::node_addr;
use super::http;
use super::world::{Shared, lock, now};
use crate::checker::{PageAsked, ReadKind, inv};

/// Simulated time the backlogs get to drain once faults are healed (one node / a cluster: a
/// commit lost in a healed partition is retried only after its 30 s timeout).
const DRAIN_LIMIT: Duration = Duration::from_secs(60);
const CLUSTER_DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Idle time after the drain for checkpoints to become durable.
const SETTLE: Duration = Duration::from_millis(1_500);
/// Longest wait for one request of the final read.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// A read answered 503 (an owner not reachable yet) is retried this many times.
const UNAVAILABLE_RETRIES: u32 = 8;

/// Drains, reads and judges; leaves the verdict in the world.
pub async fn run(world: Shared, nodes: u32) {
    let limit = if nodes > 1 { CLUSTER_DRAIN_LIMIT } else { DRAIN_LIMIT };
    let drained = drain(&world, nodes, limit).await;
    let up: Vec<u32> = {
        let mut w = lock(&world);
        let up: Vec<u32> = (0..nodes).filter(|&n| w.nodes[n as usize].serving).collect();
        w.lost_nodes = (0..nodes).filter(|n| !up.contains(n)).fold(0, |m, n| m | 1 << n);
        up
    };
    let quorum = 2 * (nodes as usize - up.len()) < nodes as usize;
    if !drained {
        let mut w = lock(&world);
        if !w.checker.corruption_hit && up.len() == nodes as usize {
            let detail =
                format!("dispatch backlog not drained {} s after faults healed", limit.as_secs());
            w.checker_at(now()).violation(inv::LIVENESS, detail);
        }
    }
    tokio::time::sleep(SETTLE).await;
    let read_complete = !up.is_empty() && quorum;
    if read_complete {
        final_read(&world, &up).await;
    }
    let mut w = lock(&world);
    let lost = w.lost_nodes;
    w.checker.set_now(now());
    let w = &mut *w;
    w.peers.judge(now().0, &mut w.checker);
    let verdict = w.checker.verdict(read_complete, lost);
    w.verdict = Some(verdict);
}

/// Polls every node until all are ready with an empty backlog, or `limit` passes.
async fn drain(world: &Shared, nodes: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        let mut all = true;
        for n in 0..nodes {
            let (serving, refused) = {
                let w = lock(world);
                (w.nodes[n as usize].serving, w.nodes[n as usize].refused)
            };
            // A node whose recovery refused its damaged disk stays down: the others drain.
            all &= refused || (serving && ready(n).await && backlog(world, n).await == Some(0));
        }
        if all {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(if nodes > 1 { 50 } else { 10 })).await;
    }
    false
}

/// Node `n` answers `/readyz` with 200: recovered, and its metastore replica caught up.
async fn ready(n: u32) -> bool {
    http::get(node_addr(n), "/readyz", CALL_TIMEOUT, None).await.is_some()
}

/// Node `n`'s dispatch backlog as its `/metrics` reports it.
async fn backlog(world: &Shared, n: u32) -> Option<u64> {
    let admin = lock(world).admin.clone();
    let body = http::get(node_addr(n), "/metrics", CALL_TIMEOUT, admin.as_ref()).await?;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|line| line.strip_prefix("narad_dispatch_backlog "))
        .and_then(|v| v.trim().parse().ok())
}

async fn call(world: &Shared, node: u32, op: ClientOp) -> Option<ClientReply> {
    call_over(world, node, op, http::Protocol::Http1).await
}

async fn call_over(
    world: &Shared,
    node: u32,
    op: ClientOp,
    protocol: http::Protocol,
) -> Option<ClientReply> {
    let admin = lock(world).admin.clone();
    let via = http::Via { protocol, auth: admin.as_ref() };
    let answer = tokio::time::timeout(CALL_TIMEOUT, http::call(node_addr(node), &op, via, || {}));
    answer.await.ok()?.ok()
}

fn violation(world: &Shared, invariant: &'static str, detail: String) {
    lock(world).checker_at(now()).violation(invariant, detail);
}

/// Every node lists every live topic, over HTTP/1.1 and over HTTP/2 (a healed node must answer
/// both); every partition is read in full through one of `up`.
async fn final_read(world: &Shared, up: &[u32]) {
    let live = lock(world).workload.topics.all_live();
    let protocols = [http::Protocol::Http1, http::Protocol::Http2];
    for (&node, protocol) in up.iter().flat_map(|n| protocols.iter().map(move |p| (n, *p))) {
        // HTTP/1.1 pages two topics at a time; HTTP/2 asks with the default page size.
        let limit = match protocol {
            http::Protocol::Http1 => 2,
            http::Protocol::Http2 => TOPIC_PAGE_DEFAULT,
        };
        let Some(listed) = list_pages(world, node, protocol, limit).await else { continue };
        for (name, inc, _) in &live {
            if !listed.iter().any(|t| &t.name == name && t.id == *inc) {
                let detail =
                    format!("acknowledged topic {name}#{} missing from n{node}'s list", inc.0);
                violation(world, inv::TOPIC_LOST, detail);
            }
        }
    }
    for (t, (name, inc, _)) in live.into_iter().enumerate() {
        let watermarks = watermarks(world, &name, inc, up).await;
        for (index, hwm) in watermarks {
            let key = PartitionKey { topic: inc, partition: index };
            lock(world).checker_at(now()).final_watermark(key, hwm);
            let via = up[(index as usize + t) % up.len()];
            read_partition(world, via, &name, key, hwm).await;
        }
    }
}

/// Node `node`'s whole topic list, `limit` topics a page, each page judged; `None` (and a
/// violation) when a page was not answered.
async fn list_pages(
    world: &Shared,
    node: u32,
    protocol: http::Protocol,
    limit: u32,
) -> Option<Vec<TopicInfo>> {
    let mut listed = Vec::new();
    let mut page = Some(PageAsked::first(limit));
    while let Some(asked) = page {
        let (topics, next) = match call_over(world, node, asked.op(), protocol).await {
            Some(ClientReply::Topics { topics, next }) => (topics, next),
            other => {
                let detail = format!("final list on n{node} over {protocol:?}: {other:?}");
                violation(world, inv::PROTOCOL, detail);
                return None;
            }
        };
        lock(world).checker_at(now()).topic_page(&asked, &topics, next.as_deref());
        listed.extend(topics);
        page = asked.following(next);
    }
    Some(listed)
}

/// Each partition's watermark, from its owner's own answer.
async fn watermarks(world: &Shared, name: &str, inc: TopicId, up: &[u32]) -> BTreeMap<u32, u64> {
    let mut watermarks = BTreeMap::new();
    for &node in up {
        let reply =
            call(world, node, ClientOp::GetTopic { name: name.to_string(), partition: None }).await;
        let Some(ClientReply::Topic(info, partitions)) = reply else {
            violation(
                world,
                inv::TOPIC_LOST,
                format!("final lookup of {name} on n{node}: {reply:?}"),
            );
            continue;
        };
        if info.id != inc {
            let detail =
                format!("topic {name} is incarnation {} on n{node}, expected {}", info.id.0, inc.0);
            violation(world, inv::TOPIC_LOST, detail);
            continue;
        }
        let lost_nodes = lock(world).lost_nodes;
        let lost = |owner: u32| owner >= 1 && lost_nodes & (1 << (owner - 1)) != 0;
        if partitions.iter().all(|p| lost(p.owner_node)) {
            // Every partition lives on a node whose disk is gone: no live sibling to reroute
            // to, so its records wait forever (docs/design.md §1, "one copy per partition").
            lock(world).checker_at(now()).unavailable(inc);
        }
        for stats in partitions.iter().filter(|p| p.owner_node == node + 1) {
            watermarks.insert(stats.index, stats.numbers.map_or(0, |n| n.high_watermark));
        }
    }
    watermarks
}

/// Reads `key` from offset 0 to `hwm` through node `via`; a failing read is retried one record
/// at a time, so a damaged record (detected corruption) costs only itself.
async fn read_partition(world: &Shared, via: u32, name: &str, key: PartitionKey, hwm: u64) {
    let (mut offset, mut errors, mut unavailable, mut max) = (0, 0, 0, 1_000);
    while offset < hwm && errors < 1_000 {
        let op = ClientOp::Consume {
            topic: name.to_string(),
            partition: key.partition,
            offset,
            max,
            wait_ms: 0,
        };
        let reply = call(world, via, op).await;
        let retry = {
            let mut w = lock(world);
            let checker = w.checker_at(now());
            match reply {
                Some(ClientReply::Records(records)) if !records.is_empty() => {
                    checker.consumed(key, offset, &records, ReadKind::Final);
                    offset += records.len() as u64;
                    max = 1_000;
                    false
                }
                Some(ClientReply::Error(ClientError::Gone { log_start_offset }))
                    if log_start_offset > offset && log_start_offset <= hwm =>
                {
                    checker.log_start_moved(key, offset, log_start_offset);
                    offset = log_start_offset;
                    false
                }
                Some(ClientReply::Error(ClientError::Unavailable(_))) | None
                    if unavailable < UNAVAILABLE_RETRIES =>
                {
                    true
                }
                Some(ClientReply::Error(_)) if checker.corruption_hit => {
                    checker.counters.consume_errors += 1;
                    errors += 1;
                    if max == 1 {
                        offset += 1; // the damaged record itself: skip it
                        checker.counters.declared_lost += 1;
                    }
                    max = 1;
                    false
                }
                other => {
                    let detail =
                        format!("{key}: final read via n{via} at {offset} below {hwm}: {other:?}");
                    checker.violation(inv::PROTOCOL, detail);
                    return;
                }
            }
        };
        if retry {
            // An owner not reachable yet: give it a moment (1 ms, doubling).
            tokio::time::sleep(Duration::from_millis(1 << unavailable)).await;
            unavailable += 1;
        }
    }
}
