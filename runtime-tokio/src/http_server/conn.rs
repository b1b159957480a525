//! One accepted connection: an optional TLS handshake (bounded by the header timeout), then
//! hyper's HTTP/1 connection with its head size bound (`max_header_size`), the head and idle
//! deadlines (`deadline`), graceful shutdown on the server's stop, and a lingering close.
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

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;

use super::HttpLimits;
use super::budget::Bounded;
use super::deadline::{Deadline, Watched};

/// How long a closing connection reads and discards what its client still sends.
pub(super) const LINGER_TIME: Duration = Duration::from_secs(2);
/// How many bytes a closing connection reads and discards at most.
pub(super) const LINGER_BYTES: usize = 256 * 1024;
/// hyper's read buffer per connection (it grows to this while a read fills it): a request head
/// must fit (`--max-header-bytes`), bodies stream through it.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// What every connection of one server shares.
pub(super) struct Shared {
    builder: http1::Builder,
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
        let (header_timeout, idle_timeout) = (limits.header_timeout, limits.idle_timeout);
        Shared { builder, service, header_timeout, idle_timeout, stop }
    }

    /// Serves a plain-text connection until it closes.
    pub(super) async fn serve<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadline = Deadline::new(self.header_timeout, self.idle_timeout);
        let (io, ended) = self.http(Watched::new(io, deadline.clone()), deadline).await;
        self.close(io, ended).await;
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
        let mut sleep = Box::pin(tokio::time::sleep(self.header_timeout));
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let ended = loop {
            tokio::select! {
                ended = poll_fn(|cx| poll_conn(&mut conn, &deadline, sleep.as_mut(), cx)) => {
                    break ended;
                }
                _ = stop.wait_for(|stop| *stop), if !stopping => {
                    stopping = true;
                    Pin::new(&mut conn).graceful_shutdown();
                }
            }
        };
        match &ended {
            Ended::Done(Err(error)) => {
                tracing::debug!(%error, "HTTP connection ended with an error")
            }
            Ended::TimedOut if deadline.in_head() => tracing::debug!("request head not in time"),
            _ => {}
        }
        (conn.into_parts().io.into_inner(), ended)
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

/// Polls hyper's connection, then sleeps until the connection's current deadline (re-armed
/// whenever the connection moved it).
fn poll_conn<I>(
    conn: &mut http1::Connection<TokioIo<I>, Bounded>,
    deadline: &Deadline,
    mut sleep: Pin<&mut Sleep>,
    cx: &mut Context<'_>,
) -> Poll<Ended>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if let Poll::Ready(result) = conn.poll_without_shutdown(cx) {
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
