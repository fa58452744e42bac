//! Leniency for one common client mistake: a URL like `ws://127.0.0.1:8765?tkn=TOKEN` (the
//! form VS Code prints and scrapes, with no `/` before `?`) makes tungstenite-based clients
//! (the Rust SDK, many scripts) send the request line `GET ?tkn=TOKEN HTTP/1.1`, which is not a
//! valid request target. Browsers send `GET /?tkn=…`. [`fix_request_line`] reads the first
//! bytes of the request and, for `GET ?`, hands the upgrade `GET /?` instead.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// A stream that yields `prefix` before the rest of `inner`.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

/// Reads up to 5 bytes of the request and returns the stream with them put back, with `GET ?`
/// turned into `GET /?`.
pub async fn fix_request_line<S: AsyncRead + Unpin>(mut inner: S) -> io::Result<Prefixed<S>> {
    let mut head = [0u8; 5];
    let mut n = 0;
    while n < head.len() {
        let got = inner.read(&mut head[n..]).await?;
        if got == 0 {
            break;
        }
        n += got;
        if !b"GET ?"[..n].eq(&head[..n]) {
            break;
        }
    }
    let mut prefix = head[..n].to_vec();
    if prefix == b"GET ?" {
        prefix.insert(4, b'/');
    }
    Ok(Prefixed {
        prefix,
        pos: 0,
        inner,
    })
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pos < self.prefix.len() {
            let rest = &self.prefix[self.pos..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

delegate_async_write!(Prefixed);

#[cfg(test)]
mod tests {
    use super::*;

    async fn fixed(input: &[u8]) -> Vec<u8> {
        let mut s = fix_request_line(input).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn request_lines() {
        assert_eq!(
            fixed(b"GET ?tkn=x HTTP/1.1\r\n").await,
            b"GET /?tkn=x HTTP/1.1\r\n"
        );
        assert_eq!(
            fixed(b"GET /?tkn=x HTTP/1.1\r\n").await,
            b"GET /?tkn=x HTTP/1.1\r\n"
        );
        assert_eq!(fixed(b"POST / HTTP/1.1\r\n").await, b"POST / HTTP/1.1\r\n");
        assert_eq!(fixed(b"GE").await, b"GE");
        assert_eq!(fixed(b"").await, b"");
    }
}
