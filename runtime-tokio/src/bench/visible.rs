//! Produce → visible latency. Each produce request carries a sequence number in its payload
//! (`@` + 16 hex digits); one consumer per partition tails the partition from its high watermark
//! at the start and stamps the first time it reads each sequence. The latency of a request is
//! (first read) − (202 received), clamped at 0 (a record may become readable a moment before our
//! single thread processes its 202). A consumer that is caught up polls again after 1 ms, so
//! figures carry up to that much polling delay.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::histogram::Histogram;
use super::server::Endpoint;

/// Records one consume asks for.
const CONSUME_MAX: u32 = 1_000;
/// Pause of a caught-up consumer before it polls again.
const CAUGHT_UP_PAUSE: Duration = Duration::from_millis(1);
/// Pause after a failed consume.
const ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Acknowledgement and first-read times per request sequence (µs since `t0`, plus one; 0: not
/// yet).
pub struct Visible {
    t0: Instant,
    next: Cell<u64>,
    acked_us: RefCell<Vec<u32>>,
    seen_us: RefCell<Vec<u32>>,
    pub stop: Cell<bool>,
    pub errors: Cell<u64>,
    pub first_error: RefCell<Option<String>>,
}

/// What the consumers measured.
pub struct VisibleResult {
    pub latency: Histogram,
    /// Requests acknowledged in the window that were never read.
    pub missing: u64,
}

impl Visible {
    pub fn new(t0: Instant) -> Visible {
        Visible {
            t0,
            next: Cell::new(0),
            acked_us: RefCell::new(Vec::with_capacity(1 << 20)),
            seen_us: RefCell::new(Vec::with_capacity(1 << 20)),
            stop: Cell::new(false),
            errors: Cell::new(0),
            first_error: RefCell::new(None),
        }
    }

    /// The sequence for the next request.
    pub fn next_seq(&self) -> u64 {
        let seq = self.next.get();
        self.next.set(seq + 1);
        seq
    }

    /// The request with `seq` was answered 202 at `at`.
    pub fn acked(&self, seq: u64, at: Instant) {
        stamp(&mut self.acked_us.borrow_mut(), seq, self.micros(at));
    }

    fn seen(&self, seq: u64, at: Instant) {
        if seq < self.next.get() {
            stamp(&mut self.seen_us.borrow_mut(), seq, self.micros(at));
        }
    }

    fn micros(&self, at: Instant) -> u32 {
        let micros = at.duration_since(self.t0).as_micros();
        u32::try_from(micros).unwrap_or(u32::MAX - 1) + 1
    }

    /// Requests acknowledged in `[from, until]` that no consumer has read yet.
    pub fn unseen(&self, from: Instant, until: Instant) -> u64 {
        self.measure(from, until).missing
    }

    /// Latencies of the requests acknowledged in `[from, until]`.
    pub fn measure(&self, from: Instant, until: Instant) -> VisibleResult {
        let (from, until) = (self.micros(from), self.micros(until));
        let acked = self.acked_us.borrow();
        let seen = self.seen_us.borrow();
        let mut latency = Histogram::default();
        let mut missing = 0;
        for (seq, &ack) in acked.iter().enumerate() {
            if ack == 0 || ack < from || ack > until {
                continue;
            }
            match seen.get(seq).copied().unwrap_or(0) {
                0 => missing += 1,
                read => latency.record(u64::from(read.saturating_sub(ack))),
            }
        }
        VisibleResult { latency, missing }
    }

    fn error(&self, what: String) {
        self.errors.set(self.errors.get() + 1);
        self.first_error.borrow_mut().get_or_insert(what);
    }
}

/// Sets `table[seq]` once (the first stamp wins), growing the table as needed.
fn stamp(table: &mut Vec<u32>, seq: u64, value: u32) {
    let index = usize::try_from(seq).expect("invariant: sequences fit in memory");
    if index >= table.len() {
        let len = (index + 1).max(table.len() * 2);
        table.resize(len, 0);
    }
    if table[index] == 0 {
        table[index] = value;
    }
}

/// Tails one partition from `offset` until `visible.stop`.
pub async fn consumer(
    visible: Rc<Visible>,
    endpoint: Endpoint,
    topic_segment: String,
    partition: u32,
    mut offset: u64,
) {
    let mut conn: Option<Conn> = None;
    let mut request = Vec::with_capacity(256);
    while !visible.stop.get() {
        let c = match &mut conn {
            Some(c) => c,
            None => match Conn::connect(&endpoint).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    visible.error(format!("consumer connect: {e}"));
                    tokio::time::sleep(ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        request.clear();
        let _ = write!(
            request,
            "GET /v1/topics/{topic_segment}/consume?partition={partition}&offset={offset}\
             &max={CONSUME_MAX} HTTP/1.1\r\n{}\r\n",
            endpoint.headers
        );
        match c.round_trip(&request).await {
            Ok((200, range)) => {
                let now = Instant::now();
                let next = scan(c.body(range), |seq| visible.seen(seq, now));
                offset = offset.max(next.unwrap_or(offset));
            }
            Ok((204, _)) => tokio::time::sleep(CAUGHT_UP_PAUSE).await,
            Ok((status, _)) => {
                visible.error(format!("consume partition {partition}: status {status}"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
            Err(e) => {
                visible.error(format!("consume partition {partition}: {e}"));
                conn = None;
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// Calls `seen` with the sequence of every record in a consume answer; returns the offset after
/// the last record.
fn scan(body: &[u8], mut seen: impl FnMut(u64)) -> Option<u64> {
    const OFFSET: &[u8] = b"\"offset\":";
    const PAYLOAD: &[u8] = b"\"payload\":\"@";
    let mut pos = 0;
    let mut next = None;
    while let Some(at) = find(body, OFFSET, pos) {
        pos = at + OFFSET.len();
        let digits = body[pos..].iter().take_while(|b| b.is_ascii_digit()).count();
        let offset =
            std::str::from_utf8(&body[pos..pos + digits]).ok().and_then(|d| d.parse::<u64>().ok());
        next = offset.map(|o| o + 1).or(next);
        let Some(at) = find(body, PAYLOAD, pos) else {
            continue;
        };
        let hex = body.get(at + PAYLOAD.len()..at + PAYLOAD.len() + 16);
        let seq = hex
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        if let Some(seq) = seq {
            seen(seq);
        }
        pos = at + PAYLOAD.len();
    }
    next
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|i| i + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_answers_scan() {
        let body = br#"{"messages":[{"topic":"b","partition":0,"offset":7,"payload":"@000000000000000axx","timestamp":1},{"topic":"b","partition":0,"offset":8,"key":"k","payload":"@00000000000000ffxx","timestamp":2}]}"#;
        let mut seqs = Vec::new();
        assert_eq!(scan(body, |s| seqs.push(s)), Some(9));
        assert_eq!(seqs, [10, 255]);
        assert_eq!(scan(b"{}", |_| {}), None);
    }

    #[test]
    fn latencies_pair_acks_and_reads() {
        let t0 = Instant::now();
        let v = Visible::new(t0);
        for _ in 0..3 {
            v.next_seq();
        }
        let at = |ms| t0 + Duration::from_millis(ms);
        v.acked(0, at(10));
        v.seen(0, at(14));
        v.acked(1, at(10));
        v.seen(1, at(9)); // read before the 202 was processed: 0
        v.acked(2, at(11)); // never read
        let result = v.measure(at(0), at(20));
        assert_eq!(result.latency.len(), 2);
        assert_eq!(result.missing, 1);
        assert!((3.99..=4.01).contains(&result.latency.max_ms()));
    }
}
