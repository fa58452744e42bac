//! Leniency for one common client mistake: a URL like `ws://127.0.0.1:8765?tkn=TOKEN` (the
//! form VS Code prints and scrapes, with no `/` before `?`) makes tungstenite-based clients
//! (the Rust SDK, many scripts) send the request line `GET ?tkn=TOKEN HTTP/1.1`, which is not a
//! valid request target. Browsers send `GET /?tkn=…`. [`fix_request_line`] reads the first
//! bytes of the request and, for `GET ?`, hands the upgrade `GET /?` instead.
//!
//! Touches only the socket it is given; the bytes read are put back with tokio's
//! [`AsyncReadExt::chain`] in front of the rest of the stream.

use std::io::{self, Cursor};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, Join, ReadHalf, WriteHalf};

/// A stream whose first bytes were read and put back in front of the rest.
pub type Fixed<S> = Join<tokio::io::Chain<Cursor<Vec<u8>>, ReadHalf<S>>, WriteHalf<S>>;

/// Reads up to 5 bytes of the request and returns the stream with them put back, with `GET ?`
/// turned into `GET /?`.
pub async fn fix_request_line<S>(mut inner: S) -> io::Result<Fixed<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
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
    let (read, write) = tokio::io::split(inner);
    Ok(tokio::io::join(Cursor::new(prefix).chain(read), write))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fixed(input: &[u8]) -> Vec<u8> {
        let stream = tokio::io::join(input, tokio::io::sink());
        let mut s = fix_request_line(stream).await.unwrap();
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
