//! [`Gated`]: the transport wrapper that lets at most [`MAX_UNREAD_EVENTS`] action
//! notifications be read off the socket ahead of the subcommand consuming them; past that the
//! socket is not read, so the daemon's flow control slows the terminal instead of the client
//! dropping output.
//!
//! May touch: nothing but the transport it wraps.

use super::*;

/// Wraps a transport so that every notification the `ahp` client fans out to its event
/// streams takes a credit from `credits` when read; [`Conn::next_event`] returns one per event
/// consumed. With no credit left, `recv` waits before reading the socket (cancel-safe: a
/// credit is only kept once a message was read).
pub struct Gated<T> {
    inner: T,
    credits: Arc<Semaphore>,
}

impl<T> Gated<T> {
    /// Wraps `inner`.
    pub fn new(inner: T, credits: Arc<Semaphore>) -> Gated<T> {
        Gated { inner, credits }
    }
}

/// The notification methods `ahp::Client` delivers to its event streams.
pub(crate) const FANNED_OUT: &[&str] = &[
    "action",
    "root/sessionAdded",
    "root/sessionRemoved",
    "root/sessionSummaryChanged",
    "auth/required",
];

pub(crate) fn is_event(msg: &TransportMessage) -> bool {
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        id: Option<serde::de::IgnoredAny>,
    }
    let probe = match msg {
        TransportMessage::Text(s) => serde_json::from_str::<Probe>(s).ok(),
        TransportMessage::Binary(b) => serde_json::from_slice::<Probe>(b).ok(),
        TransportMessage::Parsed(_) => None,
    };
    probe.is_some_and(|p| p.id.is_none() && p.method.is_some_and(|m| FANNED_OUT.contains(&&*m)))
}

impl<T: Transport> Transport for Gated<T> {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        self.inner.send(msg).await
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        let permit = self
            .credits
            .acquire()
            .await
            .map_err(|_| TransportError::Closed)?;
        let msg = self.inner.recv().await?;
        if msg.as_ref().is_some_and(is_event) {
            permit.forget();
        }
        Ok(msg)
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_recognised() {
        let text = |s: &str| TransportMessage::Text(s.into());
        assert!(is_event(&text(
            r#"{"jsonrpc":"2.0","method":"action","params":{"channel":"x"}}"#
        )));
        assert!(!is_event(&text(
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#
        )));
        assert!(!is_event(&text(
            r#"{"jsonrpc":"2.0","id":1,"method":"resourceRead","params":{}}"#
        )));
        assert!(!is_event(&text(r#"{"jsonrpc":"2.0","method":"other"}"#)));
    }
}
