//! Pre-authentication slots: the sockets between accept and a completed WebSocket upgrade.
//!
//! Nobody is authenticated yet, so nothing here may let one peer lock others out:
//! - at most [`MAX_PENDING_HANDSHAKES`] sockets at once, and at most
//!   [`MAX_PENDING_PER_ADDRESS`] from one IP address (all Unix-socket peers count as one);
//! - a socket that has sent nothing within [`FIRST_BYTE_TIMEOUT`] is closed;
//! - when a new socket finds no free slot (overall, or for its address), the oldest pending
//!   socket *that has sent nothing* is evicted (closed) to make room; if every candidate has
//!   sent something, the oldest one pending for at least [`EVICTABLE_AFTER`] is evicted;
//! - only when every candidate is a young handshake in progress is the new socket refused,
//!   with HTTP 503 ([`refuse`]).
//!
//! A legitimate client sends its request as soon as it is connected and completes its
//! upgrade in milliseconds, so a flood of idle (or slow) sockets only ever evicts itself. On
//! TCP listeners the kernel also holds back connections that have sent nothing
//! ([`defer_accept`]), so idle sockets do not even reach this table for a while.
//! Touches only sockets; knows nothing of AHP.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{Notify, Semaphore};

/// Most sockets at once between accept and a completed upgrade.
pub const MAX_PENDING_HANDSHAKES: usize = 128;

/// Most of those from one IP address (Unix-socket peers count as one address).
pub const MAX_PENDING_PER_ADDRESS: usize = 32;

/// A socket that has sent no byte this long after accept is closed (or sooner, with a
/// shorter `--handshake-timeout`).
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(2);

/// A handshake that has sent bytes may be evicted for a newcomer once it has been pending
/// this long (a real upgrade takes milliseconds).
pub const EVICTABLE_AFTER: Duration = Duration::from_secs(2);

/// Refused sockets (HTTP 503) answered in the background, lingering for the peer to read
/// the answer ([`REFUSAL_LINGER`]); beyond it a refused socket is answered without waiting
/// ([`refuse_at_once`]).
const MAX_REFUSALS_IN_FLIGHT: usize = 64;

/// Most request bytes [`refuse_at_once`] reads (and discards) before closing, so that the
/// close sends a FIN after the answer instead of a reset that would destroy it.
const AT_ONCE_DRAIN_BYTES: usize = 64 * 1024;

/// The answer to a refused handshake: HTTP 503, retry in a second.
const BUSY_BODY: &str = "too many handshakes in progress; try again later\n";

/// How long a refused socket is read (and discarded) after the 503, so that closing it does
/// not reset the connection before the client has read the answer.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);

/// How long the kernel holds back a TCP connection that has sent nothing (see
/// [`defer_accept`]), in seconds.
pub const DEFER_ACCEPT_SECS: libc::c_int = 1;

/// Asks the kernel to hand a TCP connection to `accept` only once it has sent data, or after
/// about [`DEFER_ACCEPT_SECS`] (`TCP_DEFER_ACCEPT`): every real client speaks first (an HTTP
/// request or a TLS ClientHello) and is accepted at once, while idle sockets wait in the
/// kernel's queue and reach the pending table only slowly. A failure only costs that first
/// line of defence.
pub fn defer_accept(listener: &tokio::net::TcpListener) {
    use std::os::fd::AsRawFd;
    let seconds = DEFER_ACCEPT_SECS;
    // SAFETY: setsockopt reads one c_int from a valid pointer.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&seconds as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "TCP_DEFER_ACCEPT not set");
    }
}

/// Who a pending socket belongs to, for the per-address bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKey {
    /// A TCP peer's IP address.
    Ip(IpAddr),
    /// Any Unix-socket peer.
    Unix,
}

struct Entry {
    key: PeerKey,
    since: Instant,
    heard: Arc<AtomicBool>,
    evict: Arc<Notify>,
    /// The socket, to see whether bytes are waiting that its task has not read yet.
    fd: Option<RawFd>,
}

impl Entry {
    /// Whether the socket has sent anything, read or still waiting in the kernel.
    fn heard(&self) -> bool {
        if self.heard.load(Ordering::Acquire) {
            return true;
        }
        let Some(fd) = self.fd else { return false };
        let mut waiting: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int. The descriptor belongs to the pending socket, which
        // lives as long as its slot; should it already be closed (and its number reused), the
        // answer only affects which socket is evicted.
        let ok = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) } == 0;
        ok && waiting > 0
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    entries: BTreeMap<u64, Entry>,
    per_key: HashMap<PeerKey, usize>,
}

impl Table {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let e = self.entries.remove(&id)?;
        if let Some(n) = self.per_key.get_mut(&e.key) {
            *n -= 1;
            if *n == 0 {
                self.per_key.remove(&e.key);
            }
        }
        Some(e)
    }

    /// The entry to evict among those matching `key` (all if `None`): the oldest silent one,
    /// else the oldest pending for at least [`EVICTABLE_AFTER`].
    fn victim(&self, key: Option<PeerKey>, now: Instant) -> Option<u64> {
        let candidates = || {
            self.entries
                .iter()
                .filter(move |(_, e)| key.is_none_or(|k| e.key == k))
        };
        candidates()
            .find(|(_, e)| !e.heard())
            .or_else(|| candidates().find(|(_, e)| now.duration_since(e.since) >= EVICTABLE_AFTER))
            .map(|(id, _)| *id)
    }
}

/// The pending-handshake table of a server.
pub struct Pending {
    table: Mutex<Table>,
    refusals: Arc<Semaphore>,
}

/// No slot could be made for a new socket: answer it with [`refuse`].
#[derive(Debug)]
pub struct Full;

/// One pending socket's slot; freed on drop.
pub struct Slot {
    pending: Arc<Pending>,
    id: u64,
    heard: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

impl Slot {
    /// Wraps the socket so that its first byte read marks this slot as heard from.
    pub fn watch<S>(&self, stream: S) -> Heard<S> {
        Heard {
            inner: stream,
            heard: self.heard.clone(),
        }
    }

    /// Completes when this slot is evicted for a newcomer.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }

    /// Completes if the socket has sent nothing by `deadline`; never completes otherwise.
    pub async fn silent_at(&self, deadline: tokio::time::Instant) {
        tokio::time::sleep_until(deadline).await;
        if self.heard.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pending.lock().remove(self.id);
    }
}

impl Pending {
    /// An empty table.
    pub fn new() -> Arc<Pending> {
        Arc::new(Pending {
            table: Mutex::new(Table::default()),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// A slot for a new socket from `key` (whose descriptor is `fd`), evicting another pending
    /// socket if needed (see the module documentation); [`Full`] when every candidate is a
    /// young handshake in progress.
    pub fn admit(self: &Arc<Self>, key: PeerKey, fd: Option<RawFd>) -> Result<Slot, Full> {
        let now = Instant::now();
        let mut t = self.lock();
        let crowded = t.per_key.get(&key).copied().unwrap_or(0) >= MAX_PENDING_PER_ADDRESS;
        let full = t.entries.len() >= MAX_PENDING_HANDSHAKES;
        if crowded || full {
            let victim = t.victim(crowded.then_some(key), now).ok_or(Full)?;
            if let Some(e) = t.remove(victim) {
                // The permit is stored if the task is not waiting yet.
                e.evict.notify_one();
            }
        }
        t.next += 1;
        let id = t.next;
        let heard = Arc::new(AtomicBool::new(false));
        let evict = Arc::new(Notify::new());
        t.entries.insert(
            id,
            Entry {
                key,
                since: now,
                heard: heard.clone(),
                evict: evict.clone(),
                fd,
            },
        );
        *t.per_key.entry(key).or_insert(0) += 1;
        Ok(Slot {
            pending: self.clone(),
            id,
            heard,
            evict,
        })
    }

    /// Sockets pending now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no socket is pending.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answers a refused plain (not TLS) socket with HTTP 503: in the background (lingering
    /// up to [`REFUSAL_LINGER`] for the peer to read it) while fewer than
    /// [`MAX_REFUSALS_IN_FLIGHT`] are, else at once ([`refuse_at_once`]). Every refused
    /// socket gets the answer: a client can tell "busy, retry" from a crash.
    pub fn refuse<S: Refusable>(&self, stream: S) {
        let Ok(permit) = self.refusals.clone().try_acquire_owned() else {
            refuse_at_once(&stream);
            return;
        };
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(REFUSAL_LINGER, refuse(stream)).await;
        });
    }
}

/// Writes an HTTP 503 answer, then reads and discards what the peer sent (a bounded amount)
/// until it closes, so the answer is not lost to a connection reset.
async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> io::Result<()> {
    stream.write_all(busy_answer().as_bytes()).await?;
    stream.shutdown().await?;
    let mut buf = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    while left > 0 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        left = left.saturating_sub(n);
    }
    Ok(())
}

/// The HTTP 503 answer with its headers and [`BUSY_BODY`].
fn busy_answer() -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{BUSY_BODY}",
        BUSY_BODY.len()
    )
}

/// A freshly accepted plain socket (TCP or Unix) that can be refused without waiting.
pub trait Refusable: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static {
    /// A read that does not wait (`WouldBlock` when nothing is there).
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// A write that does not wait.
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
}

impl Refusable for tokio::net::TcpStream {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        tokio::net::TcpStream::try_read(self, buf)
    }
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        tokio::net::TcpStream::try_write(self, buf)
    }
}

impl Refusable for tokio::net::UnixStream {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        tokio::net::UnixStream::try_read(self, buf)
    }
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        tokio::net::UnixStream::try_write(self, buf)
    }
}

/// Answers a refused socket with HTTP 503 without waiting, before the caller closes it: reads
/// (and discards) the request bytes already received (at most [`AT_ONCE_DRAIN_BYTES`]),
/// writes the answer (a new socket's send buffer is empty, so it fits) and shuts the write
/// side down. Closing a socket with unread received bytes makes the kernel send a reset
/// instead of the answer and a FIN, and a reset destroys the answer before the client reads
/// it; a client sends its whole request at once (the kernel holds TCP connections back until
/// it has spoken, [`defer_accept`]), so after the drain the close is graceful.
pub fn refuse_at_once<S: Refusable>(stream: &S) {
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < AT_ONCE_DRAIN_BYTES {
        match stream.try_read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    let _ = stream.try_write(busy_answer().as_bytes());
    // SAFETY: shutdown(2) on a descriptor the stream owns; no memory is passed.
    unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_WR) };
}

/// A stream that records whether anything was ever read from it.
pub struct Heard<S> {
    inner: S,
    heard: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before && !self.heard.load(Ordering::Relaxed) {
            self.heard.store(true, Ordering::Release);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> PeerKey {
        PeerKey::Ip(IpAddr::from([127, 0, 0, last]))
    }

    #[test]
    fn silent_sockets_are_evicted_first_and_per_address() {
        let p = Pending::new();
        let mut slots: Vec<Slot> = (0..MAX_PENDING_PER_ADDRESS)
            .map(|_| p.admit(ip(1), None).unwrap())
            .collect();
        // The second socket has sent something: the first silent one goes instead.
        slots[0].heard.store(true, Ordering::Release);
        let newcomer = p.admit(ip(1), None).unwrap();
        assert_eq!(p.len(), MAX_PENDING_PER_ADDRESS);
        assert!(p.lock().entries.contains_key(&slots[0].id));
        assert!(!p.lock().entries.contains_key(&slots[1].id));
        // Another address is not affected by the first one's crowding.
        let other = p.admit(ip(2), None).unwrap();
        assert_eq!(p.len(), MAX_PENDING_PER_ADDRESS + 1);
        // Every socket of the address heard from and young: the newcomer is refused.
        for s in &slots {
            s.heard.store(true, Ordering::Release);
        }
        newcomer.heard.store(true, Ordering::Release);
        assert!(p.admit(ip(1), None).is_err());
        drop(other);
        slots.clear();
        drop(newcomer);
        assert!(p.is_empty());
    }

    #[test]
    fn a_full_table_evicts_across_addresses() {
        let p = Pending::new();
        let slots: Vec<Slot> = (0..MAX_PENDING_HANDSHAKES)
            .map(|i| {
                p.admit(ip(10 + (i / MAX_PENDING_PER_ADDRESS) as u8), None)
                    .unwrap()
            })
            .collect();
        assert_eq!(p.len(), MAX_PENDING_HANDSHAKES);
        let _new = p.admit(PeerKey::Unix, None).unwrap();
        assert_eq!(p.len(), MAX_PENDING_HANDSHAKES);
        assert!(!p.lock().entries.contains_key(&slots[0].id));
    }
}
