//! One accepted connection: an optional TLS handshake (bounded by the header timeout), then
//! hyper's HTTP/1 connection with its head size bound (`max_header_size`), the head and idle
//! deadlines (`deadline`), graceful shutdown on the server's stop, and a lingering close. A
//! plain-text connection that opens with the HTTP/2 preface (`preface`) is served by hyper's
//! HTTP/2 connection instead (h2c with prior knowledge: many requests in flight on one
//! connection, their answers written together), under the same deadlines and body bounds; it
//! ends with HTTP/2's own GOAWAY rather than a lingering close. Over TLS, HTTP/2 is chosen by
//! ALPN (`h2`).
//!
//! The lingering close: a connection that ends with request bytes still unread (hyper refused a
//! head with 431, or a response was sent before its request body was read) is closed by first
//! sending our FIN, then reading and discarding what the client still sends, for a short bounded
//! while. Closing a socket with unread bytes makes the kernel send a reset, which may destroy our
//! answer before the client reads it.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;

use super::HttpLimits;
use super::budget::Bounded;
use super::deadline::{Deadline, Watched};
use super::preface::sniff;

/// How long a closing connection reads and discards what its client still sends.
pub(super) const LINGER_TIME: Duration = Duration::from_secs(2);
/// How many bytes a closing connection reads and discards at most.
pub(super) const LINGER_BYTES: usize = 256 * 1024;
/// hyper's read buffer per connection (it grows to this while a read fills it): a request head
/// must fit (`--max-header-bytes`), bodies stream through it.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Requests in flight at once on one HTTP/2 connection.
pub(super) const HTTP2_MAX_STREAMS: u32 = 256;
/// HTTP/2 flow-control windows: a stream may have this much of its body in flight unread, a
/// connection this much over all its streams (the in-flight byte budget still caps what is
/// held).
const HTTP2_STREAM_WINDOW: u32 = 1024 * 1024;
const HTTP2_CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// What every connection of one server shares.
pub(super) struct Shared {
    builder: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    service: Bounded,
    header_timeout: Duration,
    idle_timeout: Duration,
    stop: watch::Receiver<bool>,
}

/// How hyper's connection ended.
enum Ended {
    /// It closed (the client closed, asked to, or sent what hyper refuses).
    Done(hyper::Result<()>),
    /// A head did not arrive in time, or the connection sat idle too long (`deadline`).
    TimedOut,
}

impl Shared {
    pub(super) fn new(service: Bounded, limits: &HttpLimits, stop: watch::Receiver<bool>) -> Self {
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(None) // `deadline` bounds heads, and idleness apart.
            .max_header_size(limits.max_header_bytes)
            .max_buf_size(READ_BUFFER_BYTES.max(limits.max_header_bytes))
            .keep_alive(true);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .max_concurrent_streams(HTTP2_MAX_STREAMS)
            .initial_stream_window_size(HTTP2_STREAM_WINDOW)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW);
        let (header_timeout, idle_timeout) = (limits.header_timeout, limits.idle_timeout);
        Shared { builder, h2, service, header_timeout, idle_timeout, stop }
    }

    /// Serves a plain-text connection until it closes: HTTP/2 if it opens with the preface,
    /// else HTTP/1.
    pub(super) async fn serve<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadline = Deadline::new(self.header_timeout, self.idle_timeout);
        let io = Watched::new(io, deadline.clone());
        let mut stop = self.stop.clone();
        let sniffed = tokio::select! {
            sniffed = tokio::time::timeout(self.header_timeout, sniff(io)) => sniffed,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        match sniffed {
            Ok(Ok((true, io))) => self.http2(io, deadline).await,
            Ok(Ok((false, io))) => {
                let (io, ended) = self.http(io, deadline).await;
                self.close(io, ended).await;
            }
            Ok(Err(error)) => tracing::debug!(%error, "connection failed before its first request"),
            Err(_) => tracing::debug!("request head not in time"),
        }
    }

    /// Runs hyper's HTTP/2 connection until it is done or times out (`deadline`: idle once no
    /// stream is in hand); on the server's stop, sends GOAWAY and finishes the streams in hand.
    async fn http2<I>(&self, io: I, deadline: Arc<Deadline>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = self.service.for_connection(deadline.clone());
        let mut conn = self.h2.serve_connection(TokioIo::new(io), service);
        let ended = self.run(&mut conn, &deadline).await;
        match ended {
            Ended::Done(Err(error)) => {
                tracing::debug!(%error, "HTTP/2 connection ended with an error")
            }
            Ended::TimedOut => tracing::debug!("HTTP/2 connection idle or a head not in time"),
            Ended::Done(Ok(())) => {}
        }
    }

    /// Completes a TLS handshake on `io` (within the header timeout) and serves the connection.
    pub(super) async fn serve_tls<I>(&self, acceptor: TlsAcceptor, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadline = Deadline::new(self.header_timeout, self.idle_timeout);
        let io = Watched::new(io, deadline.clone());
        let handshake = tokio::time::timeout(self.header_timeout, acceptor.accept(io));
        let mut stop = self.stop.clone();
        let io = tokio::select! {
            result = handshake => match result {
                Ok(Ok(io)) => io,
                Ok(Err(error)) => return tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => return tracing::debug!("TLS handshake timed out"),
            },
            _ = stop.wait_for(|stop| *stop) => return, // Shutting down: no new sessions.
        };
        if io.get_ref().1.alpn_protocol() == Some(super::tls::ALPN_HTTP2) {
            return self.http2(io, deadline).await;
        }
        let (io, ended) = self.http(io, deadline).await;
        self.close(io, ended).await;
    }

    /// Runs hyper's connection until it is done, times out (`deadline`), or, on the server's
    /// stop, has answered the request in hand; hands the socket back.
    async fn http<I>(&self, io: I, deadline: Arc<Deadline>) -> (I, Ended)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = self.service.for_connection(deadline.clone());
        let mut conn = self.builder.serve_connection(TokioIo::new(io), service);
        let ended = self.run(&mut conn, &deadline).await;
        match &ended {
            Ended::Done(Err(error)) => {
                tracing::debug!(%error, "HTTP connection ended with an error")
            }
            Ended::TimedOut if deadline.in_head() => tracing::debug!("request head not in time"),
            _ => {}
        }
        (conn.into_parts().io.into_inner(), ended)
    }

    /// Drives hyper's connection until it is done or times out (`deadline`); on the server's stop,
    /// asks it to finish what it has in hand and end.
    async fn run<C: Served>(&self, conn: &mut C, deadline: &Deadline) -> Ended {
        let mut sleep = Box::pin(tokio::time::sleep(self.header_timeout));
        let mut stop = self.stop.clone();
        let mut stopping = false;
        loop {
            tokio::select! {
                ended = poll_fn(|cx| {
                    poll_deadline(conn.poll_served(cx), deadline, sleep.as_mut(), cx)
                }) => return ended,
                _ = stop.wait_for(|stop| *stop), if !stopping => {
                    stopping = true;
                    conn.shut_down();
                }
            }
        }
    }

    /// Closes a finished connection with a lingering close; a timed-out one (nothing was
    /// answered, nothing is owed) just with our FIN.
    async fn close<I>(&self, mut io: I, ended: Ended)
    where
        I: AsyncRead + AsyncWrite + Unpin,
    {
        match ended {
            Ended::Done(_) => close(io, self.stop.clone()).await,
            Ended::TimedOut => {
                let _ = tokio::time::timeout(LINGER_TIME, io.shutdown()).await;
            }
        }
    }
}

/// What the connection loop needs of hyper's HTTP/1 and HTTP/2 connections alike.
trait Served {
    /// Serves until the connection is done (HTTP/1: leaving the socket to be taken back).
    fn poll_served(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>>;
    /// Starts a graceful shutdown: finish what is in hand, take nothing new.
    fn shut_down(&mut self);
}

impl<I> Served for http1::Connection<TokioIo<I>, Bounded>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn poll_served(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        self.poll_without_shutdown(cx)
    }

    fn shut_down(&mut self) {
        Pin::new(self).graceful_shutdown();
    }
}

impl<I> Served for http2::Connection<TokioIo<I>, Bounded, TokioExecutor>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn poll_served(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        Pin::new(self).poll(cx)
    }

    fn shut_down(&mut self) {
        Pin::new(self).graceful_shutdown();
    }
}

/// A connection's poll result, else a sleep until its current deadline (re-armed whenever the
/// connection moved it).
fn poll_deadline(
    polled: Poll<hyper::Result<()>>,
    deadline: &Deadline,
    mut sleep: Pin<&mut Sleep>,
    cx: &mut Context<'_>,
) -> Poll<Ended> {
    if let Poll::Ready(result) = polled {
        return Poll::Ready(Ended::Done(result));
    }
    let Some(at) = deadline.deadline() else { return Poll::Pending };
    if sleep.deadline() != at {
        sleep.as_mut().reset(at);
    }
    ready!(sleep.poll(cx));
    Poll::Ready(Ended::TimedOut)
}

/// Closes a connection without a reset: our FIN first, then what the client still sends is read
/// and dropped (bounded in bytes and time, and cut short by the server's stop), then the socket
/// is dropped.
pub(super) async fn close<I>(mut io: I, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let linger = async {
        if io.shutdown().await.is_err() {
            return;
        }
        let mut buf = [0u8; 4096];
        let mut read = 0;
        while read < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(LINGER_TIME, linger) => {}
        _ = stop.wait_for(|stop| *stop) => {}
    }
}
