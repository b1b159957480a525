//! The tier-2 workload clients, on turmoil host `client`: the first tier's `Workload` decides
//! every request (and every retry of an ambiguous answer), and each one goes over HTTP/1.1 to a
//! node chosen per request. A connection that cannot be made is a refusal (nothing reached the
//! node); a request sent whose answer never comes, or comes broken, is ambiguous. With access
//! control on, every request carries credentials (`access.rs`), and the answers to the admin's
//! are judged by the access checker.

use std::net::SocketAddr;
use std::time::Duration;

use narad_core::quota::Payer;
use narad_core::{ClientOp, RequestId};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::access;
use super::host::{HTTP_PORT, host_name};
use super::http::{self, CallError};
use super::world::{Shared, lock, now};
use crate::trace::{TopicTag, What};
use crate::workload::{Wake, Who};

/// Longest the access client waits for the bootstrap admin before it starts anyway.
const ADMIN_WAIT: Duration = Duration::from_secs(10);

/// The address of node `n`'s HTTP API.
pub fn node_addr(n: u32) -> SocketAddr {
    SocketAddr::new(turmoil::lookup(host_name(n)), HTTP_PORT)
}

/// Runs every workload client until each has finished.
pub async fn run_workload(world: Shared, route: ChaCha8Rng) {
    let clients = lock(&world).workload.clients();
    let route = std::sync::Arc::new(std::sync::Mutex::new(route));
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::task::spawn_local(run_client(world.clone(), route.clone(), c)))
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

async fn run_client(world: Shared, route: std::sync::Arc<std::sync::Mutex<ChaCha8Rng>>, c: usize) {
    if lock(&world).workload.is_access_client(c) {
        admin_reported(&world).await;
    }
    loop {
        let wake = {
            let mut w = lock(&world);
            let w = &mut *w;
            w.checker.set_now(now());
            w.workload.wake(c, &mut w.checker)
        };
        let delay = match wake {
            Wake::Done => return,
            Wake::Sleep(micros) => micros,
            Wake::Send { request, op, who } => {
                let node = pick_node(&world, &route);
                send(&world, c, node, (request, &who), &op).await
            }
        };
        tokio::time::sleep(Duration::from_micros(delay)).await;
    }
}

/// Waits (bounded) until a node reported the bootstrap admin. Before, the access client's
/// requests would only be refused; and a node that fails at start-up would close its first
/// connections (the admin client's and the access client's) in an order no seed decides
/// (tokio's unseeded choice among tasks woken together), which the workload would then see.
async fn admin_reported(world: &Shared) {
    let deadline = tokio::time::Instant::now() + ADMIN_WAIT;
    while !lock(world).checker.user_reported(access::ADMIN)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A random node that is up (any node, if none is).
fn pick_node(world: &Shared, route: &std::sync::Mutex<ChaCha8Rng>) -> u32 {
    let up: Vec<u32> = {
        let w = lock(world);
        (0..w.nodes.len() as u32).filter(|&n| w.nodes[n as usize].up).collect()
    };
    let nodes = lock(world).nodes.len() as u32;
    let mut rng = route.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if up.is_empty() { rng.random_range(0..nodes) } else { up[rng.random_range(0..up.len())] }
}

/// Sends one request of client `c` to node `node`, as `who`; returns how long the client then
/// waits.
async fn send(
    world: &Shared,
    c: usize,
    node: u32,
    (request, who): (RequestId, &Who),
    op: &ClientOp,
) -> u64 {
    let (timeout, auth, access_client) = {
        let mut w = lock(world);
        let what = What::Request {
            request: request.0,
            op: crate::sim::world::op_name(op),
            topic: TopicTag::of(op),
        };
        w.record(node, what);
        let auth = access::credentials(who, w.admin.as_ref());
        (w.workload.timeout_micros(), auth, w.workload.is_access_client(c))
    };
    // The admin's requests are judged by the access checker too.
    let as_admin = auth.is_some() && matches!(who, Who::Principal(_));
    let delivered = std::cell::Cell::new(false);
    let connected = || {
        delivered.set(true);
        let mut w = lock(world);
        let w = &mut *w;
        w.checker.set_now(now());
        w.workload.delivered(c, request, node, &mut w.checker);
        let payer = auth.as_ref().map_or(Payer::Anonymous, |basic| Payer::User(basic.name.clone()));
        let epoch = w.nodes[node as usize].epoch;
        w.checker.quota_sent(request, (node, epoch), op, payer);
        if as_admin {
            w.checker.access_asked(request, node, access::admin_ask());
        }
    };
    // Odd clients speak HTTP/2 (a choice that draws nothing from the seed's random streams, so
    // the routes and faults of every seed stay what they were).
    let protocol = if c % 2 == 1 { http::Protocol::Http2 } else { http::Protocol::Http1 };
    let via = http::Via { protocol, auth: auth.as_ref() };
    let call = http::call(node_addr(node), op, via, connected);
    let answer = tokio::time::timeout(Duration::from_micros(timeout), call).await;
    let mut w = lock(world);
    let w = &mut *w;
    w.checker.set_now(now());
    let woken = match answer {
        Ok(Ok(reply)) => {
            let (status, count) = crate::sim::world::status_of(&reply);
            w.record(node, What::Reply { request: request.0, status, count });
            w.checker.access_answered(request, Some(&reply));
            w.checker.quota_answered(request, &reply);
            // The access client reads a 401 as what it is (its create did not happen).
            let reply =
                if as_admin && !access_client { access::admin_answer(reply) } else { reply };
            w.workload.on_reply(node, request, &reply, &mut w.checker)
        }
        Ok(Err(CallError::Refused(reason))) => {
            tracing::debug!(node, %reason, "tier-2 client: no connection");
            w.record(node, What::Refused { client: c as u32 });
            return w.workload.refused(c);
        }
        Ok(Err(CallError::Broken(reason))) if delivered.get() => {
            tracing::debug!(node, %reason, "tier-2 client: the exchange broke (ambiguous)");
            w.record(node, What::Timeout { request: request.0 });
            w.workload.on_timeout(request, &mut w.checker)
        }
        Err(_) if delivered.get() => {
            w.record(node, What::Timeout { request: request.0 });
            w.workload.on_timeout(request, &mut w.checker)
        }
        // Timed out before a connection was made: nothing was sent.
        Ok(Err(CallError::Broken(_))) | Err(_) => {
            w.record(node, What::Refused { client: c as u32 });
            return w.workload.refused(c);
        }
    };
    woken.map_or(0, |(_, delay)| delay)
}
