//! A bare HTTP/1.1 keep-alive client connection for the load generator: one request written with
//! one syscall, the answer parsed in place (status line and `Content-Length` only). The read
//! buffer is reused, so a steady-state round trip allocates nothing. It understands exactly what
//! a Narad node sends (bodies framed by `Content-Length`, or none for 204); anything else is an
//! error rather than a guess. Over TLS for an https:// endpoint (the plain path stays a bare
//! `TcpStream`, no indirection).

use std::io::{self, ErrorKind};
use std::ops::Range;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::server::Endpoint;

/// Largest response head we accept.
const HEAD_LIMIT_BYTES: usize = 16 * 1024;
/// Largest response body we accept (a consume answer of 1,000 records stays far below).
const BODY_LIMIT_BYTES: usize = 64 * 1024 * 1024;
/// Read buffer kept per connection.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// One keep-alive connection.
pub struct Conn {
    stream: Stream,
    buf: BytesMut,
    /// Bytes of the previous answer still at the front of `buf`.
    consumed: usize,
}

impl Conn {
    /// Connects (with `TCP_NODELAY`: requests are small and must not wait for Nagle), and
    /// completes the TLS handshake of an https:// endpoint.
    pub async fn connect(endpoint: &Endpoint) -> io::Result<Conn> {
        let tcp = TcpStream::connect(endpoint.addr).await?;
        tcp.set_nodelay(true)?;
        let stream = match &endpoint.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let tls = tls.connector.connect(tls.server_name.clone(), tcp).await?;
                Stream::Tls(Box::new(tls))
            }
        };
        Ok(Conn { stream, buf: BytesMut::with_capacity(READ_BUFFER_BYTES), consumed: 0 })
    }

    /// Sends one complete request and reads its answer. Returns the status; the body is
    /// `self.body(range)` until the next round trip.
    pub async fn round_trip(&mut self, request: &[u8]) -> io::Result<(u16, Range<usize>)> {
        self.buf.advance(self.consumed);
        self.consumed = 0;
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.write_all(request).await?,
            Stream::Tls(tls) => {
                tls.write_all(request).await?;
                tls.flush().await?; // rustls buffers what it encrypts until flushed.
            }
        }
        let (status, head_len, body_len) = loop {
            if let Some(head) = parse_head(&self.buf)? {
                break head;
            }
            if self.buf.len() > HEAD_LIMIT_BYTES {
                return Err(invalid("response head too large"));
            }
            self.fill().await?;
        };
        if body_len > BODY_LIMIT_BYTES {
            return Err(invalid("response body too large"));
        }
        while self.buf.len() < head_len + body_len {
            self.buf.reserve(head_len + body_len - self.buf.len());
            self.fill().await?;
        }
        self.consumed = head_len + body_len;
        Ok((status, head_len..head_len + body_len))
    }

    /// The body of the last answer.
    pub fn body(&self, range: Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    async fn fill(&mut self) -> io::Result<()> {
        if self.buf.capacity() - self.buf.len() < 1_024 {
            self.buf.reserve(READ_BUFFER_BYTES);
        }
        let read = match &mut self.stream {
            Stream::Plain(tcp) => tcp.read_buf(&mut self.buf).await?,
            Stream::Tls(tls) => tls.read_buf(&mut self.buf).await?,
        };
        match read {
            0 => Err(io::Error::new(ErrorKind::UnexpectedEof, "server closed the connection")),
            _ => Ok(()),
        }
    }
}

/// A connection's byte stream: plain, or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Parses a complete response head at the start of `buf`: (status, head length, body length).
/// `None` while the head is incomplete.
fn parse_head(buf: &[u8]) -> io::Result<Option<(u16, usize, usize)>> {
    let Some(end) = find_head_end(buf) else {
        return Ok(None);
    };
    let head = &buf[..end];
    if head.len() < 12 || !head.starts_with(b"HTTP/1.") {
        return Err(invalid("not an HTTP/1.x response"));
    }
    let status = std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let mut length = None;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            let value = std::str::from_utf8(value).map_err(|_| invalid("bad content-length"))?;
            length =
                Some(value.trim().parse::<usize>().map_err(|_| invalid("bad content-length"))?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err(invalid("chunked responses are not supported by the bench client"));
        }
    }
    let body = match (status, length) {
        (204 | 304 | 100..=199, _) => 0,
        (_, Some(length)) => length,
        (_, None) => return Err(invalid("response without content-length")),
    };
    Ok(Some((status, end + 4, body)))
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse() {
        let ok = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(parse_head(ok).expect("valid"), Some((202, ok.len(), 0)));
        let body = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
        assert_eq!(parse_head(body).expect("valid"), Some((200, body.len() - 3, 3)));
        let empty = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse_head(empty).expect("valid"), Some((204, empty.len(), 0)));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\n").expect("partial"), None);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
    }
}
