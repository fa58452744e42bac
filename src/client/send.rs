//! `ahpty send TERMINAL TEXT [--enter]`: type TEXT into a terminal (`terminal/input`), with a
//! carriage return after it with `--enter`, and wait until the daemon accepted it; a
//! rejection (the terminal has exited, its input queue is full…) is the one-line error.
//! TEXT `-` reads the text from stdin (UTF-8, any size), sent in pieces of at most 32 KiB,
//! each accepted before the next is sent.
//!
//! May touch: its one daemon connection and, for `-`, stdin.

use super::{remote, Conn, Failure, Outcome, Target};

/// `ahpty send`.
pub async fn send(
    target: &Target,
    token: Option<&str>,
    query: &str,
    text: &str,
    enter: bool,
) -> Outcome {
    let mut data = if text == "-" {
        let mut bytes = Vec::new();
        use std::io::Read;
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::failed(format!("cannot read stdin: {e}")))?;
        String::from_utf8(bytes)
            .map_err(|_| Failure::failed("stdin is not UTF-8 text: AHP input is text"))?
    } else {
        text.to_string()
    };
    if enter {
        data.push('\r');
    }
    let mut conn = Conn::open(target, token, &[]).await?;
    let (t, _) = remote::find(&mut conn, query).await?;
    let mut rest = data.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(CHUNK_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let piece = remote::input(rest[..cut].to_string());
        rest = &rest[cut..];
        let verdict = remote::dispatch_checked(&mut conn, &t.resource, piece).await?;
        if let Err(reason) = verdict {
            conn.close().await;
            return Err(Failure::failed(format!(
                "{}: input rejected: {reason}",
                t.resource
            )));
        }
    }
    conn.close().await;
    Ok(0)
}

/// Largest piece of text in one `terminal/input` (every daemon accepts 64 KiB messages).
const CHUNK_BYTES: usize = 32 * 1024;
