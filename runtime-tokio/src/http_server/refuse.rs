//! Refusing a connection beyond `--max-connections`: a minimal 503 written straight to the socket
//! (hyper is never started for it), then a lingering close so the client can read it; and a log
//! line, at most one per `LOG_EVERY`, counting the refusals since the last.
//!
//! Refusing costs a task and a socket for up to the linger time, so refusals in progress are
//! bounded too (`MAX_REFUSING`): past that, a connection is just closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::conn;

/// The answer to a connection beyond the cap.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 80\r\n\
\r\n\
{\"error\":\"too many connections to this node: retry shortly or use another node\"}";
/// Refusals in progress at once (each holds a socket for up to the linger time).
const MAX_REFUSING: usize = 256;
/// How long writing the refusal may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// At most one log line about refused connections per this long.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Refuses connections beyond the cap.
pub(super) struct Refusals {
    max_connections: usize,
    refusing: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    /// Refused since the last log line.
    count: AtomicU64,
    last_log: Mutex<Option<Instant>>,
}

impl Refusals {
    pub(super) fn new(max_connections: usize, stop: watch::Receiver<bool>) -> Refusals {
        Refusals {
            max_connections,
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
            stop,
            count: AtomicU64::new(0),
            last_log: Mutex::new(None),
        }
    }

    /// Answers `io` 503 and closes it (in a task of its own), and logs now and then.
    pub(super) fn refuse<I>(&self, mut io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.log();
        let Ok(permit) = self.refusing.clone().try_acquire_owned() else { return };
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let write = tokio::time::timeout(WRITE_TIMEOUT, io.write_all(REFUSAL)).await;
            if matches!(write, Ok(Ok(()))) {
                conn::close(io, stop).await;
            }
            drop(permit);
        });
    }

    fn log(&self) {
        let now = Instant::now();
        let mut last = self.last_log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|last| now.duration_since(last) < LOG_EVERY) {
            return;
        }
        *last = Some(now);
        let refused = self.count.swap(0, Ordering::Relaxed);
        tracing::warn!(
            refused,
            max_connections = self.max_connections,
            "refusing connections: {refused} answered 503 since the last report, the node \
             holds --max-connections={} open",
            self.max_connections
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_one_well_formed_answer() {
        let text = std::str::from_utf8(REFUSAL).expect("ASCII");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length: "))
            .and_then(|len| len.parse().ok())
            .expect("a content-length");
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert!(json["error"].as_str().is_some_and(|e| e.starts_with("too many connections")));
    }
}
