//! Telling HTTP/2 from HTTP/1 on a plain-text connection: a client that speaks HTTP/2 with prior
//! knowledge (h2c) opens with a fixed 24-byte preface, which no HTTP/1 request line can start
//! with. The bytes read to decide are handed back in front of the socket (`Prefixed`), so the
//! protocol chosen reads the connection from its first byte.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
pub(super) const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads from `io` until its first bytes either are the HTTP/2 preface or cannot be; true for
/// HTTP/2. The bytes read are kept in the returned socket. A client that closes early is HTTP/1
/// (hyper then sees what it sent and the end).
pub(super) async fn sniff<I>(mut io: I) -> io::Result<(bool, Prefixed<I>)>
where
    I: AsyncRead + Unpin,
{
    let mut head = Vec::with_capacity(HTTP2_PREFACE.len());
    let mut buf = [0u8; HTTP2_PREFACE.len()];
    while head.len() < HTTP2_PREFACE.len() && HTTP2_PREFACE.starts_with(&head) {
        let n = io.read(&mut buf[..HTTP2_PREFACE.len() - head.len()]).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let http2 = head.as_slice() == HTTP2_PREFACE;
    Ok((http2, Prefixed { head, at: 0, inner: io }))
}

/// A socket with bytes already read from it put back in front.
pub(super) struct Prefixed<I> {
    head: Vec<u8>,
    at: usize,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            if self.at == self.head.len() {
                self.head = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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
    use tokio::io::AsyncWriteExt;

    async fn sniffed(sent: &[u8]) -> (bool, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(1024);
        client.write_all(sent).await.unwrap();
        drop(client);
        let (http2, mut io) = sniff(server).await.unwrap();
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        (http2, all)
    }

    #[tokio::test]
    async fn the_preface_is_http2_and_every_byte_is_still_read() {
        let mut sent = HTTP2_PREFACE.to_vec();
        sent.extend_from_slice(b"\0\0\0\x04\0\0\0\0\0");
        assert_eq!(sniffed(&sent).await, (true, sent));
    }

    #[tokio::test]
    async fn an_http1_request_is_decided_at_its_first_byte() {
        let sent = b"POST /v1/topics/t/produce HTTP/1.1\r\n\r\n".to_vec();
        assert_eq!(sniffed(&sent).await, (false, sent));
    }

    #[tokio::test]
    async fn a_cut_preface_and_an_empty_connection_are_http1() {
        assert_eq!(sniffed(b"PRI * HT").await, (false, b"PRI * HT".to_vec()));
        assert_eq!(sniffed(b"").await, (false, Vec::new()));
    }
}
