//! Issue 4, acceptance 2: a node started with the wrong cluster secret is refused. Nodes 2 and 3
//! share the secret and form a quorum; node 1 (which dials both, as the lower id) has another
//! secret: it never becomes ready, never appears as a member, and its connection attempts are
//! logged as refused on both sides. Restarted with the right secret, it joins.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::{SECRET, TestCluster, members};

/// How long we watch the intruder being refused.
const WATCH: Duration = Duration::from_secs(8);

#[test]
fn a_node_with_the_wrong_secret_is_refused_and_never_joins() {
    let mut cluster = TestCluster::new(3);
    cluster.spawn(0, "not-the-cluster-secret-but-long-enough");
    cluster.spawn(1, SECRET);
    cluster.spawn(2, SECRET);
    cluster.wait_ready(1);
    cluster.wait_ready(2);

    let intruder = cluster.client(0);
    let insiders = [cluster.client(1), cluster.client(2)];
    let deadline = Instant::now() + WATCH;
    let mut polls = 0;
    while Instant::now() < deadline {
        assert!(cluster.is_running(0), "the intruder keeps running; log:\n{}", cluster.log(0));
        let (status, _) = intruder.get("/readyz");
        assert_eq!(status, 503, "the intruder must never be ready");
        for insider in &insiders {
            let seen = members(insider);
            assert!(!seen.contains_key(&1), "node 1 must never be a member: {seen:?}");
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(polls > 10);
    let topic = serde_json::json!({ "name": "secret-stuff", "partitions": 3 });
    assert_eq!(insiders[0].post_json("/v1/topics", &topic).0, 201, "the insiders have a quorum");

    let intruder_addr = cluster.nodes[0].cluster_addr.clone();
    for ix in [1, 2] {
        let log = cluster.log(ix);
        let refusals = log
            .lines()
            .filter(|l| l.contains("refused cluster connection") && l.contains(&intruder_addr))
            .count();
        assert!(refusals > 0, "node {} logs no refusal of {intruder_addr}:\n{log}", ix + 1);
        let refused = cluster.client(ix).metric("narad_peer_handshakes_refused_total");
        eprintln!(
            "node {}: {refusals} refusals of {intruder_addr} logged ({refused} counted)",
            ix + 1
        );
    }
    let intruder_log = cluster.log(0);
    assert!(
        intruder_log.contains("cluster connection refused") && intruder_log.contains("secret"),
        "the intruder logs that it was refused:\n{intruder_log}"
    );

    // The same process with the right secret joins.
    cluster.kill9(0);
    cluster.spawn(0, SECRET);
    cluster.wait_ready(0);
    let joined = common::wait_until(Duration::from_secs(10), || {
        members(&insiders[0]).get(&1).is_some_and(|m| m.0 == "alive")
    });
    assert!(joined, "node 1 joins once it holds the secret: {:?}", members(&insiders[0]));
}
