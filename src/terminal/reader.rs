//! A terminal's reader task: pty output → [`OutputPipeline`] → the terminal's event hand-off.
//!
//! One task per terminal in the async runtime, woken by the runtime's epoll when the pty has
//! output ([`PtyReader`], `pty_io.rs`): 256 terminals that each print a line are served by the
//! worker threads the runtime already has, not by 256 threads that each wake, read and wake
//! the runtime in turn. Each read goes through the pipeline (UTF-8 assembly,
//! shell-integration marks, terminal queries) into the hand-off
//! ([`channel`](super::output::channel)); when the hand-off is full the task waits for room
//! and reads nothing meanwhile, so the program blocks in `write` as on a real terminal.
//!
//! **Floods.** [`FLOOD_READS`] reads in a row of at least [`FLOOD_READ_BYTES`] each mean the
//! program writes faster than the terminal is read (a line, a prompt, an echo, or one redraw
//! of a small screen is one smaller read). Such a terminal is then read on a thread of its own
//! (at most [`MAX_FLOOD_THREADS`] at once, at a lower priority, [`FLOOD_NICE`]), in a loop of
//! `read(2)`, parse and hand-off, with `poll(2)` only when the pty runs dry — as a plain
//! blocking reader reads a pty. There the hand-off may hold up to
//! [`FLOOD_PENDING_OUTPUT_BYTES`], so that the thread reads on while the pump takes a merged
//! update; otherwise it holds
//! [`PENDING_OUTPUT_BYTES`](super::output::PENDING_OUTPUT_BYTES). On the runtime, that loop
//! shared its worker with the pump, the socket writers and the model, and every `read` waited
//! its turn behind them; the kernel's tty worker, which refills the pty's 4 KiB
//! line-discipline buffer after each read, then waited for the next read, and the program for
//! both (docs/performance.md, "Floods read on a thread of their own"). The
//! thread hands the terminal back to the runtime once no output came for [`FLOOD_IDLE`], when
//! the hand-off is full (the wait for room, which a kill must be able to end, happens on the
//! runtime), and at a stop or end of file.
//!
//! Beyond those threads a flooding terminal is read on the runtime one read per turn of its
//! worker (it yields after each), so with hundreds of floods a request or a new connection
//! waits behind one read of each, not behind a coop budget's worth of reads of each.
//!
//! A stop ends the task even while the pty never runs dry: a kill (dispose) lets go of the
//! pty at once (a flood thread sees it before its next read, or within
//! [`STOP_CHECK`](super::pty_io::STOP_CHECK) while it waits for output); a suspension for a
//! live upgrade ends with [`TerminalEvent::Suspended`] carrying what the pipeline holds back.
//! After end of file the task stays (asleep) until the terminal is stopped, so that a
//! suspension still gets its answer.
//!
//! May touch: its terminal's pty (through [`PtyReader`]) and its hand-off; nothing else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;

use super::output::{EventSender, OutputPipeline};
use super::pty_io::{BlockingRead, PtyReader, Read};
use super::{ReaderCarry, TerminalEvent};

/// [`FLOOD_READS`] reads in a row of at least this many bytes move the terminal's reading to
/// a thread of its own (see the module docs, "Floods"). A line, a prompt or a keystroke's
/// echo is far smaller; a pty read is at most about 4 KiB.
pub const FLOOD_READ_BYTES: usize = 2048;

/// How many reads in a row of at least [`FLOOD_READ_BYTES`] make a flood.
pub const FLOOD_READS: usize = 2;

/// Output bytes that may wait in the hand-off while the terminal is read on a flood thread,
/// before the thread hands the terminal back to wait for room.
pub const FLOOD_PENDING_OUTPUT_BYTES: usize = 512 * 1024;

/// Most terminals read on threads of their own at once; beyond it, a flooding terminal is read
/// on the runtime as any other.
pub const MAX_FLOOD_THREADS: usize = 8;

/// How long a flood thread waits for more output before it hands the terminal back to the
/// runtime (so a program that redraws now and then holds no thread between redraws).
pub const FLOOD_IDLE: Duration = Duration::from_millis(20);

/// The places for flood threads: at most `max` terminals are read on threads of their own at
/// once ([`MAX_FLOOD_THREADS`] for the process).
struct FloodSlots {
    used: AtomicUsize,
    max: usize,
}

/// The process's flood threads. A unit-test binary runs many flooding terminals at once, in
/// parallel tests that each expect a flood thread; it gets more places.
static FLOOD_SLOTS: FloodSlots = FloodSlots::new(if cfg!(test) { 64 } else { MAX_FLOOD_THREADS });

impl FloodSlots {
    const fn new(max: usize) -> FloodSlots {
        FloodSlots {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// A place, if one is free; it is given back when the permit is dropped.
    fn take(&self) -> Option<FloodPermit<'_>> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| FloodPermit(self))
    }
}

/// One place of [`FloodSlots`], held by a flood thread.
struct FloodPermit<'a>(&'a FloodSlots);

impl Drop for FloodPermit<'_> {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How reading ended.
enum End {
    /// The pty reported end of file (or `EIO`: every process holding the slave is gone).
    Eof,
    /// The terminal was stopped (killed, or suspended).
    Stopped,
    /// The receiver is gone, or the terminal was killed while output waited for room.
    Gone,
}

/// Runs the reader of one terminal until it is stopped or its
/// [`EventReceiver`](super::EventReceiver) is gone (see the module docs). `eof`: the pty
/// already reported end of file (a terminal handed over by a live upgrade after its EOF).
pub(crate) async fn run(reader: PtyReader, pipeline: OutputPipeline, tx: EventSender, eof: bool) {
    let (mut reader, pipeline) = if eof {
        (reader, pipeline)
    } else {
        let Some((mut reader, mut pipeline, end)) = read_until_end(reader, pipeline, &tx).await
        else {
            return;
        };
        match end {
            End::Gone => return,
            End::Eof | End::Stopped => {}
        }
        if reader.is_suspending() {
            suspended(&tx, &pipeline, false).await;
            return;
        }
        let events = pipeline.finish();
        if !events.is_empty() && !send(&mut reader, &tx, TerminalEvent::Output(events)).await {
            return;
        }
        let _ = tx.send(TerminalEvent::Eof).await;
        (reader, pipeline)
    };
    reader.stopped().await;
    if reader.is_suspending() {
        suspended(&tx, &pipeline, true).await;
    }
}

/// Hands over what the pipeline holds back: the last event of a suspended reader.
async fn suspended(tx: &EventSender, pipeline: &OutputPipeline, eof: bool) {
    let carry = ReaderCarry {
        pipeline: pipeline.suspend(),
        eof,
    };
    // Not output: never waits for room.
    let _ = tx.send(TerminalEvent::Suspended(Box::new(carry))).await;
}

/// Reads and parses until end of file, a stop or a gone receiver, on the runtime and, while
/// the terminal floods, on a thread of its own. Hands the reader and the pipeline back with
/// how it ended; `None` if a flood thread panicked, or was cancelled as the runtime shut
/// down (and they went with it).
async fn read_until_end(
    mut reader: PtyReader,
    mut pipeline: OutputPipeline,
    tx: &EventSender,
) -> Option<(PtyReader, OutputPipeline, End)> {
    // Reads in a row of at least FLOOD_READ_BYTES.
    let mut large = 0;
    loop {
        let read = reader
            .read_with(|bytes| (bytes.len(), pipeline.feed(bytes)))
            .await;
        let (read_bytes, events) = match read {
            Ok(Read::Parsed(r)) => r,
            Ok(Read::Eof) => return Some((reader, pipeline, End::Eof)),
            Ok(Read::Stopped) => return Some((reader, pipeline, End::Stopped)),
            // EIO is how Linux reports that the last process holding the pty slave is gone.
            Err(_) => return Some((reader, pipeline, End::Eof)),
        };
        if !events.is_empty() && !send(&mut reader, tx, TerminalEvent::Output(events)).await {
            return Some((reader, pipeline, End::Gone));
        }
        large = if read_bytes >= FLOOD_READ_BYTES {
            large + 1
        } else {
            0
        };
        if large >= FLOOD_READS {
            if let Some(permit) = FLOOD_SLOTS.take() {
                large = 0;
                reader.count_flood();
                let (back, back_pipeline, how) =
                    match flood_thread(reader, pipeline, tx.clone(), permit) {
                        Ok(done) => done.await.ok()?,
                        Err(back) => {
                            // No thread to be had: read on here.
                            (reader, pipeline) = *back;
                            tokio::task::yield_now().await;
                            continue;
                        }
                    };
                tracing::trace!(how = how.name(), "a flood thread handed its terminal back");
                (reader, pipeline) = (back, back_pipeline);
                match how {
                    Flood::Idle => {}
                    Flood::Full(event) => {
                        if !send(&mut reader, tx, event).await {
                            return Some((reader, pipeline, End::Gone));
                        }
                    }
                    Flood::End(end) => return Some((reader, pipeline, end)),
                }
                continue;
            }
        }
        if large >= FLOOD_READS {
            // A flood that found no thread of its own (more than MAX_FLOOD_THREADS flood):
            // one read per turn, so that what waits behind it on the worker (a request, a
            // new connection, another terminal) waits for one read's parsing of each such
            // flood, not for a whole budget of reads.
            tokio::task::yield_now().await;
        } else {
            // A terminal that never runs dry (and a hand-off that always has room) must still
            // let the worker's other tasks run now and then.
            tokio::task::consume_budget().await;
        }
    }
}

/// Hands `event` to the host, waiting for room in the hand-off; false if the receiver is
/// gone or the terminal was killed meanwhile.
async fn send(reader: &mut PtyReader, tx: &EventSender, event: TerminalEvent) -> bool {
    matches!(reader.until_killed(tx.send(event)).await, Some(Ok(())))
}

/// How a flood thread handed its terminal back.
enum Flood {
    /// No output came for [`FLOOD_IDLE`].
    Idle,
    /// The hand-off is full: this event waits for room (on the runtime).
    Full(TerminalEvent),
    /// Reading ended.
    End(End),
}

impl Flood {
    /// For the log (an event would carry terminal output).
    fn name(&self) -> &'static str {
        match self {
            Flood::Idle => "idle",
            Flood::Full(_) => "hand-off full",
            Flood::End(End::Eof) => "end of file",
            Flood::End(End::Stopped) => "stopped",
            Flood::End(End::Gone) => "receiver gone",
        }
    }
}

/// A flooding terminal's reading, finished: the reader and the pipeline back, and how.
type FloodDone = (PtyReader, OutputPipeline, Flood);

/// Starts [`flood`] on a thread of its own, at [`FLOOD_NICE`]; the receiver gets the reader
/// and the pipeline back (it errs if the thread panicked). When no thread can be started
/// (the process's thread limit) they come back at once, as `Err`.
fn flood_thread(
    reader: PtyReader,
    pipeline: OutputPipeline,
    tx: EventSender,
    permit: FloodPermit<'static>,
) -> Result<tokio::sync::oneshot::Receiver<FloodDone>, Box<(PtyReader, OutputPipeline)>> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    // The thread takes the reader from here; if it cannot be started, this task takes it back.
    let held = std::sync::Arc::new(parking_lot::Mutex::new(Some((reader, pipeline))));
    let theirs = held.clone();
    let started = std::thread::Builder::new()
        .name("ahpty-flood".into())
        .spawn(move || {
            let _permit = permit;
            let Some((mut reader, mut pipeline)) = theirs.lock().take() else {
                return;
            };
            lower_priority(FLOOD_NICE);
            let how = flood(&mut reader, &mut pipeline, &tx);
            let _ = done_tx.send((reader, pipeline, how));
        });
    match started {
        Ok(_) => Ok(done_rx),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a flood thread; reading on the runtime");
            // The closure, and its sender with it, is gone: `done_rx` errs, should the reader
            // not be here (std does not start a closure it reports as not started).
            held.lock()
                .take()
                .map_or(Ok(done_rx), |back| Err(Box::new(back)))
        }
    }
}

/// How much lower than the daemon's other threads a flood thread runs (a nice increment,
/// setpriority(2)). A thread that reads a flood is always ready to run; at the same priority
/// 8 of them beside the runtime's workers left a request or a new connection waiting for a
/// core for hundreds of ms (docs/performance.md, "Memory per flooding terminal"). A lower
/// priority only counts when the cores are busy: a flood alone still gets a whole core.
pub const FLOOD_NICE: i32 = 10;

/// Lowers the calling thread's priority by `by` (a nice increment, at most to 19). Without
/// privilege it can never be raised again, so this is for threads of their own, never a
/// pooled one; a failure (none is expected: lowering needs no privilege) leaves the priority
/// as it was.
pub(crate) fn lower_priority(by: i32) {
    // SAFETY: gettid and getpriority/setpriority on the calling thread's id touch no memory.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            return;
        }
        libc::setpriority(libc::PRIO_PROCESS, tid, (now + by).min(19));
    }
}

/// The flood thread's loop (see the module docs, "Floods"). Blocking: runs on a thread of its
/// own ([`flood_thread`]).
fn flood(reader: &mut PtyReader, pipeline: &mut OutputPipeline, tx: &EventSender) -> Flood {
    loop {
        let events = match reader.read_blocking_with(FLOOD_IDLE, |bytes| pipeline.feed(bytes)) {
            Ok(BlockingRead::Read(events)) => events,
            Ok(BlockingRead::Idle) => return Flood::Idle,
            Ok(BlockingRead::Stopped) => return Flood::End(End::Stopped),
            Ok(BlockingRead::Eof) | Err(_) => return Flood::End(End::Eof),
        };
        if events.is_empty() {
            continue;
        }
        match tx.try_send_within(TerminalEvent::Output(events), FLOOD_PENDING_OUTPUT_BYTES) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => return Flood::Full(event),
            Err(TrySendError::Closed(_)) => return Flood::End(End::Gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::terminal::output;
    use crate::terminal::{
        EventReceiver, OutputItem, OutputPipeline, Pty, PtyProcess, SpawnRequest, TerminalEvent,
    };

    /// A terminal running `sh -c SCRIPT`, started as the host starts one.
    async fn start(script: &str) -> (Arc<PtyProcess>, EventReceiver) {
        let request = SpawnRequest {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: "/".into(),
            cols: 80,
            rows: 24,
            env: Vec::new(),
            env_remove: Vec::new(),
        };
        let pipeline = OutputPipeline::new("n".into(), None, false);
        tokio::task::spawn_blocking(move || crate::terminal::start(request, pipeline))
            .await
            .unwrap()
            .unwrap()
    }

    /// The next event, within 10 s (a test failure otherwise).
    async fn next(events: &mut EventReceiver) -> Option<TerminalEvent> {
        tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("no event within 10 s")
    }

    /// Every `Data` text until end of file, within 30 s.
    async fn all_text(events: &mut EventReceiver) -> String {
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => panic!("no end of file within 30 s ({} bytes)", text.len()),
                Ok(Some(TerminalEvent::Output(batch))) => {
                    for item in batch {
                        if let OutputItem::Data(d) = item {
                            text.push_str(&d);
                        }
                    }
                }
                Ok(Some(TerminalEvent::Eof)) | Ok(None) => return text,
                Ok(Some(_)) => {}
            }
        }
    }

    /// Runs `sh -c script` to its end and checks that its output was read on a flood thread
    /// and arrived exactly as `expected`.
    async fn read_whole_on_a_flood_thread(script: &str, expected: &str) {
        let (process, mut events) = start(script).await;
        let text = all_text(&mut events).await;
        assert!(
            text == expected,
            "{} bytes, expected {}",
            text.len(),
            expected.len()
        );
        assert!(process.floods() >= 1, "never read on a flood thread");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_is_read_on_a_thread_of_its_own_and_arrives_whole_and_in_order() {
        // 2.4 MB of numbered lines (written in blocks: `cat`) with a two-byte and a four-byte
        // character on each, so reads end inside characters; then quiet for longer than
        // FLOOD_IDLE, then more.
        let script = "seq 1 200000 | sed 's/$/ é 🙂/' | cat; sleep 0.3; echo after-quiet";
        let mut expected: String = (1..=200000).map(|i| format!("{i} é 🙂\r\n")).collect();
        expected.push_str("after-quiet\r\n");
        read_whole_on_a_flood_thread(script, &expected).await;
    }

    #[test]
    fn flood_threads_are_bounded() {
        let slots = super::FloodSlots::new(2);
        let a = slots.take().expect("a first place");
        let b = slots.take().expect("a second place");
        assert!(slots.take().is_none(), "a third place of two");
        drop(a);
        let c = slots.take().expect("the place given back");
        drop((b, c));
        assert_eq!(slots.used.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_flood_on_a_current_thread_runtime_is_read_whole() {
        // Tests and tools run the host on a current-thread runtime: the flood thread comes from
        // its blocking pool there too, and the one thread runs the rest meanwhile.
        let expected: String = (1..=300000).map(|i| format!("{i}\r\n")).collect();
        read_whole_on_a_flood_thread("seq 1 300000 | cat", &expected).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_suspension_ends_the_reader_of_a_pty_that_never_runs_dry() {
        let (process, mut events) = start("exec yes").await;
        let mut bytes = 0;
        while bytes < 1 << 20 {
            if let Some(TerminalEvent::Output(batch)) = next(&mut events).await {
                bytes += crate::terminal::output::batch_bytes(&batch);
            }
        }
        // Keep draining (so the reader never waits for room) while the terminal is suspended.
        let suspending = process.clone();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let suspend = tokio::task::spawn_blocking(move || suspending.suspend(until));
        loop {
            match next(&mut events).await {
                Some(TerminalEvent::Suspended(carry)) => {
                    assert!(!carry.eof);
                    break;
                }
                Some(TerminalEvent::Output(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let (fd, left) = suspend.await.unwrap().unwrap();
        assert!(left.is_empty());
        drop(fd);
        let killed = process.clone();
        tokio::task::spawn_blocking(move || killed.kill_session(Duration::ZERO))
            .await
            .unwrap();
    }

    /// Kills the process `0` when dropped (a test that fails leaves no flood behind).
    struct KillOnDrop(i32);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kill_ends_a_reader_waiting_for_room_even_if_the_pty_stays_open() {
        // The escapee leaves the session (out of reach of the kill) and keeps writing.
        let (process, mut events) = start("setsid sh -c 'echo $$; exec yes' & wait").await;
        let first = match next(&mut events).await {
            Some(TerminalEvent::Output(batch)) => match batch.first() {
                Some(OutputItem::Data(d)) => d.clone(),
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        };
        let escapee: i32 = first
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("the escapee's pid");
        let _guard = KillOnDrop(escapee);
        // Nothing is taken: the hand-off fills and the reader waits for room.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while events.waiting_bytes() < output::PENDING_OUTPUT_BYTES {
            assert!(
                std::time::Instant::now() < deadline,
                "the hand-off never filled"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let killed = process.clone();
        tokio::task::spawn_blocking(move || killed.kill_session(Duration::from_millis(100)))
            .await
            .unwrap();
        drop(process);
        // Every sender goes: the reader (stopped while waiting for room) and the waiter. What
        // was read before the kill may still be taken; at most the hand-off's worth.
        let mut taken = 0;
        loop {
            match next(&mut events).await {
                None => break,
                Some(TerminalEvent::Output(batch)) => {
                    taken += output::batch_bytes(&batch);
                    assert!(
                        taken <= 2 * super::FLOOD_PENDING_OUTPUT_BYTES,
                        "the reader kept reading after the kill"
                    );
                }
                Some(_) => {}
            }
        }
    }
}
