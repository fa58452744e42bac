//! `ahpty send TERMINAL TEXT [--enter]`: type TEXT into a terminal (`terminal/input`), with a
//! carriage return after it with `--enter`, and wait until the daemon accepted it; a
//! rejection (the terminal has exited, its input queue is full…) is the one-line error.

use super::{remote, Conn, Failure, Outcome, Target};

/// `ahpty send`.
pub async fn send(
    target: &Target,
    token: Option<&str>,
    query: &str,
    text: &str,
    enter: bool,
) -> Outcome {
    let mut conn = Conn::open(target, token, &[]).await?;
    let (t, _) = remote::find(&mut conn, query).await?;
    let mut data = text.to_string();
    if enter {
        data.push('\r');
    }
    if data.is_empty() {
        return Ok(0);
    }
    let verdict = remote::dispatch_checked(&mut conn, &t.resource, remote::input(data)).await?;
    conn.close().await;
    match verdict {
        Ok(()) => Ok(0),
        Err(reason) => Err(Failure::failed(format!(
            "{}: input rejected: {reason}",
            t.resource
        ))),
    }
}
