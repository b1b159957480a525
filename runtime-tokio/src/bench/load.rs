//! The load: `concurrency` producers on one thread, each a keep-alive connection that sends its
//! next request as soon as the previous one was answered (closed loop). Requests are built into
//! a buffer each producer reuses; latencies go into one shared histogram. Everything is bounded:
//! producers stop at the deadline (or after `max_requests`), a failed connection is retried after
//! a pause, never in a tight loop.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::histogram::Histogram;
use super::server::Endpoint;
use super::visible::Visible;

/// Pause before reconnecting after a connection failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
/// Bytes of a payload's visibility header: `@` and 16 hex digits of the request's sequence.
pub const SEQ_HEADER_BYTES: usize = 17;

/// What each request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `POST .../produce`, one message per request.
    Produce,
    /// `POST .../produce/batch` with this many messages.
    Batch(usize),
    /// `GET /healthz`: the HTTP ceiling of the same server.
    Healthz,
    /// A queue receive then its ack, per message (`queue.rs`).
    Queue,
}

/// The shape of every request of a run.
pub struct Shape {
    pub kind: Kind,
    pub endpoint: Endpoint,
    /// The topic name, percent-encoded for the path.
    pub topic_segment: String,
    pub payload_bytes: usize,
    /// Distinct keys cycled through (0: keyless).
    pub keys: usize,
}

impl Shape {
    /// Messages one successful request acknowledges.
    pub fn messages_per_request(&self) -> u64 {
        match self.kind {
            Kind::Produce | Kind::Healthz | Kind::Queue => 1,
            Kind::Batch(n) => n as u64,
        }
    }

    fn ok_status(&self) -> u16 {
        match self.kind {
            Kind::Healthz => 200,
            Kind::Queue => 204,
            Kind::Produce | Kind::Batch(_) => 202,
        }
    }

    /// Writes request number `n` (with visibility sequence `seq`) into `out`.
    fn build(&self, out: &mut Vec<u8>, body: &mut Vec<u8>, n: u64, seq: Option<u64>) {
        out.clear();
        let headers = &self.endpoint.headers;
        let topic = &self.topic_segment;
        match self.kind {
            Kind::Healthz | Kind::Queue => {
                let _ = write!(out, "GET /healthz HTTP/1.1\r\n{headers}\r\n");
            }
            Kind::Produce => {
                let _ = write!(out, "POST /v1/topics/{topic}/produce");
                if self.keys > 0 {
                    let _ = write!(out, "?key=k{}", n % self.keys as u64);
                }
                let _ = write!(
                    out,
                    " HTTP/1.1\r\n{headers}Content-Type: application/octet-stream\r\n\
                     Content-Length: {}\r\n\r\n",
                    self.payload_bytes
                );
                write_payload(out, self.payload_bytes, seq);
            }
            Kind::Batch(count) => {
                body.clear();
                body.extend_from_slice(b"{\"messages\":[");
                for i in 0..count as u64 {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(b"{\"payload\":\"");
                    write_payload(body, self.payload_bytes, seq);
                    body.push(b'"');
                    if self.keys > 0 {
                        let _ = write!(body, ",\"key\":\"k{}\"", (n + i) % self.keys as u64);
                    }
                    body.push(b'}');
                }
                body.extend_from_slice(b"]}");
                let _ = write!(
                    out,
                    "POST /v1/topics/{topic}/produce/batch HTTP/1.1\r\n{headers}\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                out.extend_from_slice(body);
            }
        }
    }
}

/// `bytes` payload bytes: the visibility header when `seq` is given, then `x`s (JSON-safe).
fn write_payload(out: &mut Vec<u8>, bytes: usize, seq: Option<u64>) {
    let mut rest = bytes;
    if let Some(seq) = seq {
        let _ = write!(out, "@{seq:016x}");
        rest -= SEQ_HEADER_BYTES;
    }
    out.resize(out.len() + rest, b'x');
}

/// Results the producers accumulate.
#[derive(Default)]
pub struct Tally {
    /// Latency of requests answered inside the measured window.
    pub latency: Histogram,
    /// Requests answered OK inside the window.
    pub requests: u64,
    /// Requests answered OK since the start (progress display).
    pub requests_total: u64,
    /// Failed requests (error status, connection failures) inside the window.
    pub errors: u64,
    pub errors_total: u64,
    pub first_error: Option<String>,
    /// Queue receives that found nothing, inside the window.
    pub empty: u64,
}

/// State shared by every task of the run (one thread, so `Cell`/`RefCell`).
pub struct Run {
    pub shape: Shape,
    pub measure_from: Instant,
    pub measure_until: Instant,
    pub stop: Cell<bool>,
    pub max_requests: u64,
    pub issued: Cell<u64>,
    pub tally: RefCell<Tally>,
    pub visible: Option<Rc<Visible>>,
}

impl Run {
    pub(super) fn on_empty(&self) {
        let now = Instant::now();
        if self.in_window(now) {
            self.tally.borrow_mut().empty += 1;
        }
    }

    /// The worker's connection, opened if it has none; `None` (the failure counted, after a
    /// pause) if it cannot be opened: the caller tries again on its next turn.
    pub(super) async fn connected<'c>(&self, conn: &'c mut Option<Conn>) -> Option<&'c mut Conn> {
        if conn.is_none() {
            match Conn::connect(&self.shape.endpoint).await {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    self.on_error(Instant::now(), || format!("connect: {e}"));
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    return None;
                }
            }
        }
        conn.as_mut()
    }

    pub(super) fn finished(&self) -> bool {
        self.stop.get() || self.issued.get() >= self.max_requests
    }

    fn in_window(&self, at: Instant) -> bool {
        at >= self.measure_from && at <= self.measure_until
    }

    pub(super) fn on_ok(&self, sent: Instant, done: Instant) {
        let mut tally = self.tally.borrow_mut();
        tally.requests_total += 1;
        if self.in_window(done) {
            tally.requests += 1;
            tally.latency.record(done.duration_since(sent).as_micros() as u64);
        }
    }

    pub(super) fn on_error(&self, at: Instant, what: impl FnOnce() -> String) {
        let mut tally = self.tally.borrow_mut();
        tally.errors_total += 1;
        if self.in_window(at) {
            tally.errors += 1;
        }
        if tally.first_error.is_none() {
            tally.first_error = Some(what());
        }
    }
}

/// One closed-loop producer.
pub async fn producer(run: Rc<Run>, worker: u64) {
    let mut conn: Option<Conn> = None;
    let mut request = Vec::with_capacity(1024);
    let mut body = Vec::new();
    let mut n = worker;
    let shape = &run.shape;
    while !run.finished() {
        let Some(c) = run.connected(&mut conn).await else { continue };
        run.issued.set(run.issued.get() + 1);
        let seq = run.visible.as_ref().map(|v| v.next_seq());
        shape.build(&mut request, &mut body, n, seq);
        n += 1;
        let sent = Instant::now();
        match c.round_trip(&request).await {
            Ok((status, _)) if status == shape.ok_status() => {
                let done = Instant::now();
                run.on_ok(sent, done);
                if let (Some(visible), Some(seq)) = (&run.visible, seq) {
                    visible.acked(seq, done);
                }
            }
            Ok((status, range)) => {
                let body = c.body(range);
                run.on_error(Instant::now(), || {
                    format!("status {status}: {}", String::from_utf8_lossy(body))
                });
            }
            Err(e) => {
                run.on_error(Instant::now(), || format!("request: {e}"));
                conn = None;
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
    }
}
