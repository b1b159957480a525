//! The time bounds of one connection outside its requests: a request head must arrive within
//! `--header-timeout` of its first byte (the first one within that time of the connect, TLS
//! handshake included), and a keep-alive connection may sit idle — nothing read, nothing written
//! — for `--idle-timeout` between requests. While a request is in hand there is no deadline here
//! (its body has its own, `budget`; a long-poll may wait its full `wait`).
//!
//! hyper's own `header_read_timeout` cannot tell the two apart: it starts when hyper begins
//! waiting for a head, so it would close idle keep-alive connections after the header timeout.
//! Instead the connection's socket is wrapped (`Watched`) to see bytes come and go, and its
//! service marks where requests begin and end; the connection loop (`conn`) sleeps until
//! `deadline()`.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Where a connection is between its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A head is arriving (or the first one is awaited): it must be complete by then.
    Head(Instant),
    /// This many requests are in hand (more than one only on an HTTP/2 connection).
    Busy(u32),
    /// Between requests: closed at this instant unless something is read or written.
    Idle(Instant),
}

/// One connection's phase, shared by its socket, its service and its loop.
#[derive(Debug)]
pub(super) struct Deadline {
    phase: Mutex<Phase>,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl Deadline {
    /// A connection accepted now: its first head is due within the header timeout.
    pub(super) fn new(header_timeout: Duration, idle_timeout: Duration) -> Arc<Deadline> {
        let phase = Mutex::new(Phase::Head(Instant::now() + header_timeout));
        Arc::new(Deadline { phase, header_timeout, idle_timeout })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request head was parsed: no deadline until every request in hand is answered.
    pub(super) fn request_started(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n.saturating_add(1)),
            Phase::Head(_) | Phase::Idle(_) => Phase::Busy(1),
        };
    }

    /// A request's answer is ready (or its stream was dropped): with none left in hand, the
    /// connection is idle from now.
    pub(super) fn request_done(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now() + self.idle_timeout),
        };
    }

    /// Bytes arrived: on an idle connection, the next head has begun.
    fn read(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now() + self.header_timeout);
        }
    }

    /// Bytes left: an idle connection (still writing its last answer) is not idle.
    fn wrote(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Idle(Instant::now() + self.idle_timeout);
        }
    }

    /// When the connection is to be closed, if nothing changes; `None` while a request is in
    /// hand.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match *self.phase() {
            Phase::Head(at) | Phase::Idle(at) => Some(at),
            Phase::Busy(_) => None,
        }
    }

    /// Whether the connection timed out while a head was arriving (rather than idle).
    pub(super) fn in_head(&self) -> bool {
        matches!(*self.phase(), Phase::Head(_))
    }
}

/// A connection's socket, telling its `Deadline` when bytes come and go.
pub(super) struct Watched<I> {
    inner: I,
    deadline: Arc<Deadline>,
}

impl<I> Watched<I> {
    pub(super) fn new(inner: I, deadline: Arc<Deadline>) -> Watched<I> {
        Watched { inner, deadline }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.deadline.read();
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        if written > 0 {
            self.deadline.wrote();
        }
        Poll::Ready(Ok(written))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.inner).poll_write_vectored(cx, bufs))?;
        if written > 0 {
            self.deadline.wrote();
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_head_deadlines_follow_the_connection() {
        let (head, idle) = (Duration::from_secs(10), Duration::from_secs(60));
        // Whether `d`'s deadline is `timeout` after some instant between `since` and now.
        let due = |d: &Deadline, since: Instant, timeout: Duration| {
            d.deadline().is_some_and(|at| at >= since + timeout && at <= Instant::now() + timeout)
        };
        let start = Instant::now();
        let d = Deadline::new(head, idle);
        assert!(due(&d, start, head), "the first head is due");
        let first = d.deadline();
        d.read(); // Bytes of the first head do not extend it.
        assert_eq!(d.deadline(), first);
        d.request_started();
        assert_eq!(d.deadline(), None, "no deadline while a request is in hand");
        let done = Instant::now();
        d.request_done();
        assert!(due(&d, done, idle) && !d.in_head(), "idle");
        let writing = Instant::now();
        d.wrote(); // Still sending the last answer.
        assert!(due(&d, writing, idle), "writing extends idleness");
        let next = Instant::now();
        d.read(); // The next head begins.
        assert!(due(&d, next, head) && d.in_head(), "the next head is due");
    }

    #[test]
    fn an_http2_connection_is_idle_only_once_every_stream_is_answered() {
        let d = Deadline::new(Duration::from_secs(10), Duration::from_secs(60));
        d.request_started();
        d.request_started();
        d.request_done();
        assert_eq!(d.deadline(), None, "one stream still in hand");
        d.request_done();
        assert!(d.deadline().is_some() && !d.in_head(), "idle");
    }
}
