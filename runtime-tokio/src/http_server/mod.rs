//! The HTTP server's accept loop, in place of `axum::serve`: the same router, served by hyper's
//! HTTP/1 connection with the bounds a server on an open network needs (docs/design.md §2.1). A
//! client that sends a huge request head gets 431, one that trickles its head or body is cut off,
//! the number of open connections and the bytes of request bodies held in memory at once are
//! capped, and what is refused beyond a cap is told so (503 and `Retry-After`), never left
//! hanging. Optionally TLS (`tls`), with the certificate re-read on SIGHUP.
//!
//! Generic over axum's `Listener`, so that the tier-2 simulator serves through this same loop.

mod budget;
mod conn;
mod deadline;
mod preface;
mod refuse;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use tokio::sync::{Semaphore, watch};

use budget::Bounded;
pub use tls::Tls;

/// Largest request head (request line and headers) accepted; a larger one is answered 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// How long a client may take to send a request head, from its first byte (the first head: from
/// the connect, TLS handshake included).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a keep-alive connection may sit idle (nothing read or written) between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a client may take to send a request body, from its head on; a slower one is answered
/// 408.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Open connections (TLS handshakes included) per node; one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 4096;
/// Request-body bytes held in memory at once, over every connection; a request that does not fit
/// is answered 503 with `Retry-After` before its body is read.
pub const MAX_INFLIGHT_BYTES: usize = 64 * 1024 * 1024;
/// The smallest `--max-inflight-bytes`: one body of the largest kind (a batch) must fit.
pub const MIN_INFLIGHT_BYTES: usize = narad_core::constants::MAX_BATCH_BYTES;

/// Connections the kernel completes and queues for `accept` (std's `bind` asks for 128): a burst
/// of connects beyond the queue is not refused but has its handshakes dropped and retried by the
/// clients a second or more later, so the queue is made deep enough for a burst (the kernel
/// caps it at `net.core.somaxconn`).
const ACCEPT_BACKLOG: i32 = 4096;

/// Deepens a listening socket's accept queue to `ACCEPT_BACKLOG` (listening again changes it).
pub fn deepen_backlog(listener: &std::net::TcpListener) -> std::io::Result<()> {
    rustix::net::listen(listener, ACCEPT_BACKLOG).map_err(std::io::Error::from)
}

/// File descriptors kept beyond `--max-connections` for everything else the node opens (WAL and
/// segment files, the cluster socket, refusals in progress).
const SPARE_FDS: u64 = 1024;

/// Raises the soft limit on open files so that `max_connections` connections fit (up to the hard
/// limit): past it, `accept` fails and new connections would wait in the backlog unanswered
/// rather than be refused. Logs what it could not get.
pub fn raise_fd_limit(max_connections: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let want = max_connections as u64 + SPARE_FDS;
    let limit = getrlimit(Resource::Nofile);
    let (soft, hard) = (limit.current.unwrap_or(u64::MAX), limit.maximum.unwrap_or(u64::MAX));
    if soft >= want {
        return;
    }
    let new = want.min(hard);
    let raised = setrlimit(Resource::Nofile, Rlimit { current: Some(new), maximum: limit.maximum });
    if raised.is_err() || new < want {
        tracing::warn!(
            soft,
            hard,
            wanted = want,
            "the open-files limit is below --max-connections plus {SPARE_FDS}: connections past \
             it wait unanswered; raise the hard limit (ulimit -Hn, LimitNOFILE) or lower \
             --max-connections"
        );
    }
}

/// The bounds the server enforces (the `narad serve` flags of the same names).
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub max_inflight_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_header_bytes: MAX_HEADER_BYTES,
            header_timeout: HEADER_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_inflight_bytes: MAX_INFLIGHT_BYTES,
        }
    }
}

/// Serves `router` on `listener` until `stop` turns true, then stops accepting, asks every open
/// connection to finish its request in hand and close, and resolves once all have closed.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: HttpLimits,
    tls: Option<Tls>,
    mut stop: watch::Receiver<bool>,
) where
    L: Listener,
{
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let shared = Arc::new(conn::Shared::new(Bounded::new(router, &limits), &limits, stop.clone()));
    let refusals = refuse::Refusals::new(limits.max_connections, stop.clone());
    loop {
        let (io, _addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refusals.refuse(io);
            continue;
        };
        let shared = shared.clone();
        let tls = tls.as_ref().map(Tls::acceptor);
        tokio::spawn(async move {
            match tls {
                None => shared.serve(io).await,
                Some(acceptor) => shared.serve_tls(acceptor, io).await,
            }
            drop(permit);
        });
    }
    drop(listener); // Refuse new connections at the socket rather than leave them queued.
    // Every connection holds a permit until it closes: all of them back means all closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = open.acquire_many(all).await;
}
