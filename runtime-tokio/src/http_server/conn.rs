//! One accepted connection: an optional TLS handshake (bounded by the header timeout), then
//! hyper's HTTP/1 connection with the head bounds (`max_header_size`, `header_read_timeout`),
//! graceful shutdown on the server's stop, and a lingering close.
//!
//! The lingering close: a connection that ends with request bytes still unread (hyper refused a
//! head with 431, or a response was sent before its request body was read) is closed by first
//! sending our FIN, then reading and discarding what the client still sends, for a short bounded
//! while. Closing a socket with unread bytes makes the kernel send a reset, which may destroy our
//! answer before the client reads it.

use std::future::poll_fn;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::HttpLimits;
use super::budget::Bounded;

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
    stop: watch::Receiver<bool>,
}

impl Shared {
    pub(super) fn new(service: Bounded, limits: &HttpLimits, stop: watch::Receiver<bool>) -> Self {
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(limits.max_header_bytes)
            .max_buf_size(READ_BUFFER_BYTES.max(limits.max_header_bytes))
            .keep_alive(true);
        Shared { builder, service, header_timeout: limits.header_timeout, stop }
    }

    /// Serves a plain-text connection until it closes.
    pub(super) async fn serve<I>(&self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = self.http(io).await;
        close(io, self.stop.clone()).await;
    }

    /// Completes a TLS handshake on `io` (within the header timeout) and serves the connection.
    pub(super) async fn serve_tls<I>(&self, acceptor: TlsAcceptor, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handshake = tokio::time::timeout(self.header_timeout, acceptor.accept(io));
        let io = match handshake.await {
            Ok(Ok(io)) => io,
            Ok(Err(error)) => return tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => return tracing::debug!("TLS handshake timed out"),
        };
        let io = self.http(io).await;
        close(io, self.stop.clone()).await;
    }

    /// Runs hyper's connection until it is done (or, on the server's stop, until the request in
    /// hand is answered) and hands the socket back.
    async fn http<I>(&self, io: I) -> I
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut conn = self.builder.serve_connection(TokioIo::new(io), self.service.clone());
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let result = loop {
            tokio::select! {
                result = poll_fn(|cx| conn.poll_without_shutdown(cx)) => break result,
                _ = stop.wait_for(|stop| *stop), if !stopping => {
                    stopping = true;
                    Pin::new(&mut conn).graceful_shutdown();
                }
            }
        };
        if let Err(error) = result {
            tracing::debug!(%error, "HTTP connection ended with an error");
        }
        conn.into_parts().io.into_inner()
    }
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
