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
//! A stop ends the task even while the pty never runs dry: a kill (dispose) lets go of the
//! pty at once; a suspension for a live upgrade ends with [`TerminalEvent::Suspended`]
//! carrying what the pipeline holds back. After end of file the task stays (asleep) until the
//! terminal is stopped, so that a suspension still gets its answer.
//!
//! May touch: its terminal's pty (through [`PtyReader`]) and its hand-off; nothing else.

use super::output::{EventSender, OutputPipeline};
use super::pty_io::PtyReader;
use super::{ReaderCarry, TerminalEvent};

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
pub(crate) async fn run(
    mut reader: PtyReader,
    mut pipeline: OutputPipeline,
    tx: EventSender,
    eof: bool,
) {
    if !eof {
        match read_until_end(&mut reader, &mut pipeline, &tx).await {
            End::Gone => return,
            End::Eof | End::Stopped => {}
        }
        if reader.is_suspending() {
            suspended(&tx, &pipeline, false).await;
            return;
        }
        let events = pipeline.finish();
        if !events.is_empty() {
            let sent = reader.until_killed(tx.send(TerminalEvent::Output(events)));
            if !matches!(sent.await, Some(Ok(()))) {
                return;
            }
        }
        let _ = tx.send(TerminalEvent::Eof).await;
    }
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

/// Reads and parses until end of file, a stop or a gone receiver.
async fn read_until_end(
    reader: &mut PtyReader,
    pipeline: &mut OutputPipeline,
    tx: &EventSender,
) -> End {
    loop {
        let read = reader.read_with(|bytes| pipeline.feed(bytes)).await;
        let events = match read {
            Ok(Some(Some(events))) => events,
            Ok(Some(None)) => return End::Eof,
            Ok(None) => return End::Stopped,
            // EIO is how Linux reports that the last process holding the pty slave is gone.
            Err(_) => return End::Eof,
        };
        if events.is_empty() {
            continue;
        }
        match reader
            .until_killed(tx.send(TerminalEvent::Output(events)))
            .await
        {
            Some(Ok(())) => {}
            Some(Err(_)) | None => return End::Gone,
        }
        // A terminal that never runs dry (and a hand-off that always has room) must still let
        // the worker's other tasks run now and then.
        tokio::task::consume_budget().await;
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
        let suspend = tokio::task::spawn_blocking(move || suspending.suspend());
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
                        taken <= 2 * output::PENDING_OUTPUT_BYTES,
                        "the reader kept reading after the kill"
                    );
                }
                Some(_) => {}
            }
        }
    }
}
