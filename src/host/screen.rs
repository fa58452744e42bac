//! Each terminal's screen as a client would draw it: the bookkeeping that lets a snapshot
//! rebuild the live screen and a cursor position report be answered, with the terminal model
//! ([`crate::terminal::model`]) doing the emulation off the host lock.
//!
//! Positions are offsets into the terminal's *text stream*: every byte of client-visible
//! output (the `value` of unclassified parts and the `output` of command parts, never a
//! `commandLine`) since the terminal started. The model lags behind the live stream: its
//! state is kept (frozen, a few KiB) at `base_at`, which a per-terminal worker moves to where
//! the content a snapshot retains begins, once that is [`ADVANCE_BYTES`] ahead (and at most
//! once per [`ADVANCE_INTERVAL`]). Text trimmed off the content before the model has reached
//! it is kept here until it has.
//!
//! A snapshot is then: one unclassified part, the *synthesized prefix* — a preamble that
//! resets the client's emulator, the model's state at `base_at`, then the text from `base_at`
//! to where the retained content begins — followed by exactly the parts a trim to
//! `--scrollback-bytes` keeps. When the pty was resized after `base_at`, a repaint (preamble
//! plus the model's state just after the resize) sits at the point of the last resize,
//! because text written before it was laid out for another size. A terminal whose snapshot
//! starts at the beginning of its stream (or of its last `terminal/cleared`) needs no prefix
//! and gets its content as it is.
//!
//! Cursor position reports are answered from a model advanced to the query's point (from the
//! latest frozen state before it, so a program that asks at every prompt costs only the text
//! in between). Replies to later queries wait behind an unanswered cursor report, so every
//! program gets its replies in the order it asked. A program that does not read its input
//! gets no replies ([`MAX_ANSWER_BACKLOG`]), and at most [`MAX_WAITING_REPLIES`] wait.
//!
//! Everything here runs under the host lock and is bounded (copies of at most the retained
//! content); the emulation runs in [`run`], on the model's threads (`model_threads.rs`, at a
//! lower priority), [`MODEL_JOBS`] terminals at a time.
//!
//! May touch: its terminal's entry under the host lock and the terminal's `Pty` (query replies).

use std::collections::VecDeque;
use std::sync::Arc;

use ahp_types::state::{TerminalContentPart, TerminalState, TerminalUnclassifiedPart};
use tokio::sync::Notify;

use super::{scrollback, Host};
use crate::terminal::model::{self, Frozen, Model, Reply};
use crate::terminal::process::MAX_PENDING_INPUT_BYTES;
use crate::terminal::Pty;

/// The model moves up once the content a snapshot retains starts this many bytes past it, or
/// a quarter of `--scrollback-bytes` if that is less (so a snapshot carries at most that much
/// more raw text than `--scrollback-bytes`, plus what the terminal printed in the last
/// [`ADVANCE_INTERVAL`], while the model keeps up).
pub const ADVANCE_BYTES: u64 = 64 * 1024;

fn advance_bytes(cap: usize) -> u64 {
    (cap as u64 / 4).clamp(1, ADVANCE_BYTES)
}

/// Least time between two advances of a terminal's model, so that a terminal that floods
/// makes at most about 100 jobs a second, each over all the output since the last, instead of
/// one per [`ADVANCE_BYTES`] (each job also emulates the last screenful and freezes the
/// state, whatever its length). A cursor report is answered without waiting for it. While a
/// terminal floods, a snapshot therefore carries, besides `--scrollback-bytes`, up to
/// [`ADVANCE_BYTES`] plus what the terminal printed in this time.
pub const ADVANCE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Text trimmed off the content that the model has not reached, above which the terminal's
/// output waits for the model (bytes). It is part of what a flooding terminal may hold
/// (docs/performance.md, "Memory per flooding terminal"): at 8 MiB, 40 terminals flooding
/// side by side while 2 model jobs served them each held most of it, beside their scrollback
/// and history.
pub const MAX_PENDING_BYTES: usize = 1024 * 1024;

/// Model jobs that run at once in the daemon, each on a model thread (`model_threads.rs`): as many
/// as there are cores on the machines ahpty is measured on. More would not finish sooner, and
/// each extra thread keeps a stack and an allocator arena of its own. A cursor report whose
/// job waits for a permit is answered that much later (jobs take milliseconds; one that
/// catches up on megabytes of output that cannot be skipped takes up to about a second).
pub const MODEL_JOBS: usize = 2;

/// Input waiting to be written to a terminal's pty (answers and client input alike), in bytes,
/// above which the daemon stops answering the program's queries: a program that asks and
/// does not read gets no more answers until it reads (they are dropped, not queued), so its
/// unread answers never grow past this (plus what the pty itself buffers) and are not typed
/// into whatever reads the terminal next. Answers are input: they count against
/// [`MAX_PENDING_INPUT_BYTES`] like a client's.
pub const MAX_ANSWER_BACKLOG: usize = 4096;

/// Queries whose answers may wait for the model (cursor reports, and the answers queued
/// behind them to keep their order); answers to further queries are dropped meanwhile.
pub const MAX_WAITING_REPLIES: usize = 256;

/// Whether an answer of `len` bytes is written to `process`: at most [`MAX_ANSWER_BACKLOG`]
/// bytes of input are waiting, with it.
fn answer_fits(process: &dyn Pty, len: usize) -> bool {
    process.input_fits((MAX_PENDING_INPUT_BYTES - MAX_ANSWER_BACKLOG).saturating_add(len))
}

/// Most resizes remembered between the model and the live stream (older ones are applied to
/// the model at the first remembered one's point).
const MAX_RESIZES: usize = 256;

/// A resize of the pty at a point of the stream the model has not reached.
#[derive(Debug, Clone, Copy)]
struct Resize {
    at: u64,
    cols: u16,
    rows: u16,
}

/// One terminal's screen bookkeeping (see the module docs).
pub(super) struct Screen {
    /// Offset of the first byte of the in-memory content.
    head: u64,
    /// Offset after its last byte.
    tail: u64,
    /// Offset of the last `terminal/cleared`: nothing before it is shown to a late subscriber.
    floor: u64,
    /// The model's state at `base_at`.
    base: Arc<Frozen>,
    base_at: u64,
    /// The model's state at the last answered cursor report (a starting point for the next).
    probe: Option<(u64, Arc<Frozen>)>,
    /// Text trimmed or cleared off the content from `base_at` on: (offset, text), contiguous.
    pending: VecDeque<(u64, String)>,
    pending_bytes: usize,
    /// Resizes after `base_at`, in order.
    resizes: VecDeque<Resize>,
    /// The repaint at the last resize (preamble + the model's state there), once computed.
    repaint: Option<(u64, Arc<String>)>,
    /// Replies waiting behind an unanswered cursor report, in query order, with the offset
    /// each query was at.
    replies: VecDeque<(u64, Reply)>,
    /// The current size.
    cols: u16,
    rows: u16,
    /// Wakes the terminal's model task; also signalled when the model caught up.
    wake: Arc<Notify>,
    /// Signalled when pending text went below [`MAX_PENDING_BYTES`].
    caught_up: Arc<Notify>,
}

impl Drop for Screen {
    fn drop(&mut self) {
        // Lets the model task see that its terminal is gone.
        self.wake.notify_one();
    }
}

/// What the model task is to do next ([`Screen::job`]).
enum Next {
    /// Run this job.
    Job(Job),
    /// Nothing now, but an advance is due once [`ADVANCE_INTERVAL`] has passed.
    HeldBack,
    /// Nothing until more output, a trim, a resize or a query.
    Idle,
}

/// What the model task is asked to compute, taken under the lock.
struct Job {
    start_at: u64,
    start: Arc<Frozen>,
    text: String,
    resizes: Vec<Resize>,
    /// Move the base here.
    advance: Option<u64>,
    /// Answer the first waiting cursor report, at this offset.
    cursor: Option<(u64, bool)>,
    /// Compute the repaint at the last resize.
    repaint: Option<u64>,
    cols: u16,
}

/// What a job computed.
struct Done {
    base: Option<(u64, Arc<Frozen>)>,
    cursor: Option<(u64, Vec<u8>, Arc<Frozen>)>,
    repaint: Option<(u64, Arc<String>)>,
}

/// Bytes of client-visible text in a part.
fn text_of(part: &TerminalContentPart) -> &str {
    match part {
        TerminalContentPart::Unclassified(u) => &u.value,
        TerminalContentPart::Command(c) => &c.output,
        TerminalContentPart::Unknown(_) => "",
    }
}

/// A [`Screen`] as data, for a live upgrade's hand-over (docs/upgrade.md). Not carried: the
/// last cursor report's state and the repaint at the last resize (both are recomputed).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScreenImage {
    head: u64,
    tail: u64,
    floor: u64,
    base: Frozen,
    base_at: u64,
    pending: Vec<(u64, String)>,
    /// `(at, cols, rows)`.
    resizes: Vec<(u64, u16, u16)>,
    replies: Vec<(u64, Reply)>,
    cols: u16,
    rows: u16,
}

impl ScreenImage {
    /// Its texts (the model's base and the output not yet applied to it), which a live
    /// upgrade's hand-over carries as raw bytes rather than in its JSON.
    pub(super) fn texts_mut(&mut self) -> impl Iterator<Item = &mut String> {
        self.base
            .texts_mut()
            .into_iter()
            .chain(self.pending.iter_mut().map(|(_, text)| text))
    }
}

impl Screen {
    /// This screen as data.
    pub(super) fn image(&self) -> ScreenImage {
        ScreenImage {
            head: self.head,
            tail: self.tail,
            floor: self.floor,
            base: (*self.base).clone(),
            base_at: self.base_at,
            pending: self.pending.iter().cloned().collect(),
            resizes: self
                .resizes
                .iter()
                .map(|r| (r.at, r.cols, r.rows))
                .collect(),
            replies: self.replies.iter().cloned().collect(),
            cols: self.cols,
            rows: self.rows,
        }
    }

    /// The screen an [`image`](Self::image) describes.
    pub(super) fn from_image(image: ScreenImage) -> Screen {
        let mut s = Screen::new(image.cols, image.rows);
        s.head = image.head;
        s.tail = image.tail;
        s.floor = image.floor;
        s.base = Arc::new(image.base);
        s.base_at = image.base_at;
        s.pending_bytes = image.pending.iter().map(|(_, t)| t.len()).sum();
        s.pending = image.pending.into();
        s.resizes = image
            .resizes
            .into_iter()
            .map(|(at, cols, rows)| Resize { at, cols, rows })
            .collect();
        s.replies = image.replies.into();
        s
    }

    pub(super) fn new(cols: u16, rows: u16) -> Screen {
        Screen {
            head: 0,
            tail: 0,
            floor: 0,
            base: Arc::new(Frozen::fresh(cols, rows)),
            base_at: 0,
            probe: None,
            pending: VecDeque::new(),
            pending_bytes: 0,
            resizes: VecDeque::new(),
            repaint: None,
            replies: VecDeque::new(),
            cols,
            rows,
            wake: Arc::new(Notify::new()),
            caught_up: Arc::new(Notify::new()),
        }
    }

    /// Offset after the last byte of output.
    pub(super) fn tail(&self) -> u64 {
        self.tail
    }

    /// The model task's wake-up.
    pub(super) fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// `bytes` of output text were appended to the content (`cap` is `--scrollback-bytes`).
    pub(super) fn appended(&mut self, bytes: usize, cap: usize) {
        self.tail += bytes as u64;
        if self.tail - self.base_at >= cap as u64 + advance_bytes(cap) {
            self.wake.notify_one();
        }
    }

    /// Text offset of content position (`parts` whole leading parts, then `cut` bytes).
    fn offset_of(&self, state: &TerminalState, parts: usize, cut: usize) -> u64 {
        let whole: usize = state.content[..parts]
            .iter()
            .map(|p| text_of(p).len())
            .sum();
        self.head + (whole + cut) as u64
    }

    /// Called before the content is trimmed to `cap`: keeps what the trim removes and the
    /// model has not reached.
    pub(super) fn before_trim(&mut self, state: &TerminalState, cap: usize) {
        let (parts, cut) = scrollback::retained_start(state, cap);
        let new_head = self.offset_of(state, parts, cut);
        self.keep(state, new_head);
    }

    /// Called before the content is cleared (`terminal/cleared`).
    pub(super) fn before_clear(&mut self, state: &TerminalState) {
        self.keep(state, self.tail);
        self.floor = self.tail;
    }

    /// Moves the head to `new_head`, keeping the removed text the model still needs.
    fn keep(&mut self, state: &TerminalState, new_head: u64) {
        if self.base_at < new_head {
            let from = self.base_at.max(self.head);
            let text = self.copy_content(state, from, new_head);
            if !text.is_empty() {
                self.pending_bytes += text.len();
                self.pending.push_back((from, text));
            }
            self.wake.notify_one();
        }
        self.head = new_head;
    }

    /// The content's text between two offsets within it.
    fn copy_content(&self, state: &TerminalState, from: u64, to: u64) -> String {
        let mut out = String::with_capacity(to.saturating_sub(from) as usize);
        let mut at = self.head;
        for part in &state.content {
            let text = text_of(part);
            let end = at + text.len() as u64;
            if end > from && at < to {
                let a = from.saturating_sub(at) as usize;
                let b = (to.min(end) - at) as usize;
                out.push_str(text.get(a..b).unwrap_or_default());
            }
            at = end;
            if at >= to {
                break;
            }
        }
        out
    }

    /// Pending text from `from` on.
    fn copy_pending(&self, from: u64, to: u64) -> String {
        let mut out = String::new();
        for (at, text) in &self.pending {
            let end = at + text.len() as u64;
            if end > from && *at < to {
                let a = from.saturating_sub(*at) as usize;
                let b = (to.min(end) - at) as usize;
                out.push_str(text.get(a..b).unwrap_or_default());
            }
        }
        out
    }

    /// The pty was resized (after all output appended so far).
    pub(super) fn resized(&mut self, cols: u16, rows: u16) {
        if (cols, rows) == (self.cols, self.rows) {
            return;
        }
        self.cols = cols;
        self.rows = rows;
        if self.resizes.back().is_some_and(|r| r.at == self.tail) {
            self.resizes.pop_back();
        }
        if self.resizes.len() >= MAX_RESIZES {
            self.resizes.pop_front();
        }
        self.resizes.push_back(Resize {
            at: self.tail,
            cols,
            rows,
        });
        self.repaint = None;
        self.wake.notify_one();
    }

    /// Handles the replies to queries found in output just appended: `at` is each query's
    /// offset. Replies that need no model are written at once unless a cursor report is
    /// still being computed (then they wait their turn).
    /// A program that does not read its input gets no answers (see [`MAX_ANSWER_BACKLOG`]),
    /// and at most [`MAX_WAITING_REPLIES`] wait for the model; others are dropped.
    pub(super) fn queries(&mut self, replies: Vec<(u64, Reply)>, process: Option<&dyn Pty>) {
        for (at, reply) in replies {
            if process.is_some_and(|p| !answer_fits(p, 0)) {
                continue;
            }
            if self.replies.is_empty() && !matches!(reply, Reply::CursorPosition { .. }) {
                self.write_reply(&reply, process);
            } else if self.replies.len() < MAX_WAITING_REPLIES {
                self.replies.push_back((at, reply));
                self.wake.notify_one();
            }
        }
    }

    fn write_reply(&self, reply: &Reply, process: Option<&dyn Pty>) {
        let bytes = match reply {
            Reply::Bytes(b) => b.clone(),
            Reply::WindowSize { op } => {
                format!("\x1b[{};{};{}t", op - 10, self.rows, self.cols).into_bytes()
            }
            // Answered by the model task.
            Reply::CursorPosition { .. } => return,
        };
        // Only the pty vanishing can fail, and then nobody waits for the answer (nor does a
        // terminal without a process).
        if let Some(process) = process.filter(|p| answer_fits(*p, bytes.len())) {
            let _ = process.write(bytes);
        }
    }

    /// The waiting pending text's wake-up when the terminal's output must wait for the model
    /// to catch up (see [`MAX_PENDING_BYTES`]).
    pub(super) fn backlog(&self) -> Option<Arc<Notify>> {
        (self.pending_bytes > MAX_PENDING_BYTES).then(|| self.caught_up.clone())
    }

    /// The content of a snapshot of `state` (`cap` is `--scrollback-bytes`): see the module
    /// docs. The parts after the synthesized one are exactly what a trim to `cap` keeps (or
    /// less, when the model has moved past the start of that).
    pub(super) fn snapshot_content(
        &self,
        state: &TerminalState,
        cap: usize,
    ) -> Vec<TerminalContentPart> {
        let (parts, cut) = scrollback::retained_start(state, cap);
        // The synthesized part rebuilds the state at `from`, then replays the text up to
        // `start`, where the retained parts begin.
        let from = self.base_at.max(self.floor);
        let start = self.offset_of(state, parts, cut).max(from).max(self.head);
        if start == self.floor {
            // Everything since the stream's start (or the last clear) is retained.
            return state.content.clone();
        }
        let mut lead = model::preamble(self.cols);
        if self.base_at > self.floor {
            lead.push_str(self.base.client());
        }
        let mut gap = self.copy_pending(from, self.head.min(start));
        gap.push_str(&self.copy_content(state, from.max(self.head), start));
        let repaint = self.repaint.as_ref().filter(|(at, _)| *at >= from);
        if let Some((r, text)) = repaint {
            if *r < start {
                insert_at(&mut gap, (*r - from) as usize, text);
            }
        }
        lead.push_str(&gap);
        let mut out = Vec::with_capacity(state.content.len() + 1 - parts.min(state.content.len()));
        let mut at = self.head;
        let last = state.content.len().saturating_sub(1);
        for (i, part) in state.content.iter().enumerate() {
            let text = text_of(part);
            let end = at + text.len() as u64;
            let running = matches!(part, TerminalContentPart::Command(c) if !c.is_complete);
            // Parts wholly before the start are left out, except a running command (later
            // output and its end refer to it).
            if (end < start || (at < start && end == start)) && !running {
                at = end;
                continue;
            }
            let from_here = at.max(start);
            let mut kept = text
                .get((from_here - at) as usize..)
                .unwrap_or_default()
                .to_string();
            if let Some((r, text)) = repaint {
                // At a part boundary the repaint goes with the text that follows it, or into
                // the last part when nothing follows.
                if *r >= from_here && (*r < end || (*r == end && i == last)) {
                    insert_at(&mut kept, (*r - from_here) as usize, text);
                }
            }
            out.push(with_text(part, kept));
            at = end;
        }
        if let Some((r, text)) = repaint {
            if out.is_empty() && *r >= start {
                lead.push_str(text);
            }
        }
        out.insert(
            0,
            TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value: lead }),
        );
        out
    }

    /// The waiting cursor report that is first in line, if any: its offset and whether it is
    /// the extended form (`CSI ? 6 n`).
    fn cursor_query(&self) -> Option<(u64, bool)> {
        match self.replies.front() {
            Some((at, Reply::CursorPosition { extended })) => Some((*at, *extended)),
            _ => None,
        }
    }

    /// Where the base is due to move (`cap` is `--scrollback-bytes`): to where the retained
    /// content begins (never past a cursor report still to answer), once that is
    /// [`advance_bytes`] ahead or text the model has not reached was trimmed off or a resize
    /// lies before it.
    fn advance_target(&self, state: &TerminalState, cap: usize) -> Option<u64> {
        let (parts, cut) = scrollback::retained_start(state, cap);
        let mut target = self.offset_of(state, parts, cut).max(self.head);
        if let Some((q, _)) = self.cursor_query() {
            // Never past a query still to answer: its starting point must stay behind it.
            target = target.min(q);
        }
        (target > self.base_at
            && (target - self.base_at >= advance_bytes(cap)
                || !self.pending.is_empty()
                || self.resizes.front().is_some_and(|r| r.at <= target)))
        .then_some(target)
    }

    /// Takes the next job, if there is one (under the lock), or says why there is none.
    /// `may_advance`: false within [`ADVANCE_INTERVAL`] of the last advance; the base then
    /// moves only with a job that a cursor report makes anyway, or once the text waiting for
    /// the model reaches half of [`MAX_PENDING_BYTES`]. A repaint still makes a job of its own.
    fn job(&mut self, state: &TerminalState, cap: usize, may_advance: bool) -> Next {
        let cursor = self.cursor_query();
        let urgent = cursor.is_some() || self.pending_bytes >= MAX_PENDING_BYTES / 2;
        let due = self.advance_target(state, cap);
        let advance = due.filter(|_| may_advance || urgent);
        let repaint = match (self.resizes.back(), &self.repaint) {
            (Some(r), None) if r.at > advance.unwrap_or(self.base_at) => Some(r.at),
            _ => None,
        };
        if advance.is_none() && cursor.is_none() && repaint.is_none() {
            return if due.is_some() {
                Next::HeldBack
            } else {
                Next::Idle
            };
        }
        let first = [advance, cursor.map(|c| c.0), repaint]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.base_at);
        let last = [advance, cursor.map(|c| c.0), repaint]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(self.base_at);
        let (start_at, start) = match &self.probe {
            Some((at, f)) if *at <= first && *at >= self.base_at => (*at, f.clone()),
            _ => (self.base_at, self.base.clone()),
        };
        let mut text = self.copy_pending(start_at, self.head.min(last));
        text.push_str(&self.copy_content(state, start_at.max(self.head), last));
        Next::Job(Job {
            start_at,
            start,
            text,
            resizes: self
                .resizes
                .iter()
                // One at `start_at` too: a resize before the base's first advance (made
                // before any output, say) is not in its state. The starting state already has
                // the others at `start_at`, and a resize to the size a model has is nothing.
                .filter(|r| r.at >= start_at && r.at <= last)
                .copied()
                .collect(),
            advance,
            cursor,
            repaint,
            cols: self.cols,
        })
    }

    /// Publishes a job's results (under the lock). Offsets only grow, so a result computed
    /// while more output arrived is still right for the point it was computed at.
    fn publish(&mut self, done: Done, process: Option<&dyn Pty>) {
        if let Some((at, frozen)) = done.base.clone() {
            self.advance_to(at, frozen);
        }
        self.publish_rest(done, process);
    }

    /// Moves the model to `at`, in the state `frozen`, and lets go of what it no longer needs.
    fn advance_to(&mut self, at: u64, frozen: Arc<Frozen>) {
        self.base = frozen;
        self.base_at = at;
        while let Some((start, text)) = self.pending.front_mut() {
            let end = *start + text.len() as u64;
            if end <= at {
                self.pending_bytes -= text.len();
                self.pending.pop_front();
            } else {
                if *start < at {
                    let cut = (at - *start) as usize;
                    if text.is_char_boundary(cut) {
                        self.pending_bytes -= cut;
                        text.drain(..cut);
                        *start = at;
                    }
                }
                break;
            }
        }
        while self.resizes.front().is_some_and(|r| r.at <= at) {
            self.resizes.pop_front();
        }
        if self.probe.as_ref().is_some_and(|(p, _)| *p < at) {
            self.probe = None;
        }
        if self.resizes.is_empty() {
            self.repaint = None;
        }
        if self.pending_bytes <= MAX_PENDING_BYTES {
            self.caught_up.notify_waiters();
        }
    }

    /// Publishes a job's repaint and cursor report.
    fn publish_rest(&mut self, done: Done, process: Option<&dyn Pty>) {
        if let Some(repaint) = done.repaint {
            if self.resizes.back().is_some_and(|r| r.at == repaint.0) {
                self.repaint = Some(repaint);
            }
        }
        if let Some((at, bytes, frozen)) = done.cursor {
            if matches!(self.replies.front(), Some((q, Reply::CursorPosition { .. })) if *q == at) {
                self.replies.pop_front();
                if let Some(process) = process.filter(|p| answer_fits(*p, bytes.len())) {
                    let _ = process.write(bytes);
                }
                if at >= self.base_at {
                    self.probe = Some((at, frozen));
                }
                while let Some((_, reply)) = self.replies.front() {
                    if matches!(reply, Reply::CursorPosition { .. }) {
                        break;
                    }
                    if let Some((_, reply)) = self.replies.pop_front() {
                        self.write_reply(&reply, process);
                    }
                }
            }
        }
    }
}

/// Inserts `text` into `s` at byte `i` (where every offset the host records lies: on a
/// character boundary).
fn insert_at(s: &mut String, i: usize, text: &str) {
    if s.is_char_boundary(i) {
        s.insert_str(i, text);
    }
}

/// The part `part` with its text replaced by `text`.
fn with_text(part: &TerminalContentPart, text: String) -> TerminalContentPart {
    match part {
        TerminalContentPart::Unclassified(_) => {
            TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value: text })
        }
        TerminalContentPart::Command(c) => {
            let mut c = c.clone();
            c.output = text;
            TerminalContentPart::Command(c)
        }
        other => other.clone(),
    }
}

/// A model left exactly in the state its last job froze as the base, kept by the model task
/// while jobs follow one another (for at most [`KEEP_LIVE`] between them) so that the next job,
/// which starts from that base, does not thaw it again. Kept only where a thaw of that base
/// would behave the same ([`Model::thaws_exactly`]: not inside a sequence). Bounded: avt keeps
/// no scrollback, so this is one screen's cells.
type Live = Option<(Arc<Frozen>, Model)>;

/// How long after a job the model task keeps the [`Live`] model it left, if no other job
/// comes: a flooding terminal's jobs come every few milliseconds; a terminal that stops (or
/// only trickles) keeps only its frozen state (a few KiB), and the live model is gone before
/// the allocator's purge ([`MEMORY_TRIM_DELAY`]).
const KEEP_LIVE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs a job (off the lock), from `live` if that is the job's starting state (else from the
/// frozen state, thawed). Returns what it computed and the model if it ended at the new base.
fn compute(job: Job, live: Live) -> (Done, Live) {
    let mut m = match live {
        Some((frozen, m)) if Arc::ptr_eq(&frozen, &job.start) => m,
        _ => Model::thaw(&job.start),
    };
    let mut pos = job.start_at;
    let mut done = Done {
        base: None,
        cursor: None,
        repaint: None,
    };
    // Points of interest in stream order; at one offset a resize comes first (it was applied
    // after the output before it, and queries found later are answered after it).
    enum Step {
        Resize(u16, u16),
        Advance,
        Cursor(bool),
        Repaint,
    }
    let mut steps: Vec<(u64, u8, Step)> = job
        .resizes
        .iter()
        .map(|r| (r.at, 0, Step::Resize(r.cols, r.rows)))
        .collect();
    if let Some(a) = job.advance {
        steps.push((a, 1, Step::Advance));
    }
    if let Some((q, ext)) = job.cursor {
        steps.push((q, 2, Step::Cursor(ext)));
    }
    if let Some(r) = job.repaint {
        steps.push((r, 3, Step::Repaint));
    }
    steps.sort_by_key(|(at, order, _)| (*at, *order));
    for (at, _, step) in steps {
        let a = (pos - job.start_at) as usize;
        let b = (at - job.start_at) as usize;
        if let Some(text) = job.text.get(a..b) {
            m.feed(text);
        }
        pos = at;
        match step {
            Step::Resize(cols, rows) => m.resize(cols, rows),
            Step::Advance => done.base = Some((at, Arc::new(m.freeze()))),
            Step::Cursor(ext) => {
                done.cursor = Some((at, m.cursor_report(ext), Arc::new(m.freeze())));
            }
            Step::Repaint => {
                let mut text = model::preamble(job.cols);
                text.push_str(m.freeze().client());
                done.repaint = Some((at, Arc::new(text)));
            }
        }
    }
    // Steps at the base's offset after it (a cursor report, a repaint) only read the model.
    // A base inside a sequence is thawed next time, as it would be after [`KEEP_LIVE`].
    let live = match &done.base {
        Some((at, frozen)) if *at == pos && m.thaws_exactly() => Some((frozen.clone(), m)),
        _ => None,
    };
    (done, live)
}

/// The model task of the terminal at `uri` numbered `serial`: runs jobs as they come, until
/// the terminal is gone.
pub(super) async fn run(host: Arc<Host>, uri: String, serial: u64, wake: Arc<Notify>) {
    host.trimmer
        .call_once(|| drop(tokio::spawn(give_back_memory(Arc::downgrade(&host)))));
    let mut live: Live = None;
    // When a kept model goes: `KEEP_LIVE` after the job that left it (wake-ups without a job,
    // such as every line of output once the content is due for a trim, do not extend it).
    let mut keep_until = tokio::time::Instant::now();
    // No advance before this (see [`ADVANCE_INTERVAL`]).
    let mut next_advance = tokio::time::Instant::now();
    loop {
        // The permit first, so a job's copy of the text is made only when it can run.
        let Ok(permit) = host.model_jobs.acquire().await else {
            return;
        };
        let may_advance = tokio::time::Instant::now() >= next_advance;
        let (job, deferred) = {
            let mut inner = host.lock();
            let cap = inner.scrollback_bytes;
            let Some(t) = inner.terminals.get_mut(&uri).filter(|t| t.serial == serial) else {
                return;
            };
            match t.screen.job(&t.state, cap, may_advance) {
                Next::Job(job) => (Some(job), false),
                Next::HeldBack => (None, true),
                Next::Idle => (None, false),
            }
        };
        let Some(job) = job else {
            drop(permit);
            // Until the held-back advance is due, the kept model is to go, or a wake-up.
            let until = if deferred {
                Some(next_advance)
            } else {
                live.is_some().then_some(keep_until)
            };
            match until {
                Some(at) => {
                    if tokio::time::timeout_at(at, wake.notified()).await.is_err() && !deferred {
                        live = None;
                    }
                }
                None => wake.notified().await,
            }
            continue;
        };
        if job.advance.is_some() {
            next_advance = tokio::time::Instant::now() + ADVANCE_INTERVAL;
        }
        let kept = live.take();
        let Some((done, next)) = super::model_threads::run(move || compute(job, kept)).await else {
            return;
        };
        live = next;
        keep_until = tokio::time::Instant::now() + KEEP_LIVE;
        drop(permit);
        host.memory_trim.notify_one();
        let mut inner = host.lock();
        let Some(t) = inner.terminals.get_mut(&uri).filter(|t| t.serial == serial) else {
            return;
        };
        let process = t.process.clone();
        t.screen.publish(done, process.as_deref());
    }
}

/// How long after the last model job the allocator's free memory is given back.
pub const MEMORY_TRIM_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The daemon's allocator-trimming task: [`MEMORY_TRIM_DELAY`] after model jobs stop (at most
/// once per that delay while they go on), asks jemalloc, the daemon's allocator, to return the
/// free pages of every arena to the OS at once (`arena.<MALLCTL_ARENAS_ALL>.purge`). jemalloc
/// returns pages older than its decay time (`src/main.rs`) only while it allocates or frees, so
/// a daemon that goes idle after a burst would keep them: the content's growth, the envelopes,
/// a job's copy of the text, avt's grids. Without this an idle terminal that once printed a
/// screenful of full-screen output kept about twice the resident memory (293 KiB against
/// 116–150 KiB in `cargo bench --bench flow -- model`). In a process whose allocator is not
/// jemalloc (the library's own unit tests) this purges an unused jemalloc and changes nothing.
/// Returns at its first wake-up after the host is gone.
async fn give_back_memory(host: std::sync::Weak<Host>) {
    loop {
        let Some(trim) = host.upgrade().map(|h| h.memory_trim.clone()) else {
            return;
        };
        trim.notified().await;
        drop(trim);
        tokio::time::sleep(MEMORY_TRIM_DELAY).await;
        if host.strong_count() == 0 {
            return;
        }
        let _ = tokio::task::spawn_blocking(purge_free_pages).await;
    }
}

/// The jemalloc control that purges every arena (4096 is `MALLCTL_ARENAS_ALL`).
const PURGE_ALL_ARENAS: &std::ffi::CStr = c"arena.4096.purge";

fn purge_free_pages() {
    // SAFETY: `arena.<i>.purge` reads and writes nothing (all four pointers null, length 0)
    // and only releases pages that hold no allocation; it may be called from any thread at any
    // time. Its result (0, or an errno if the control is unknown) needs no handling: purging is
    // an optimisation.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::*;

    const CAP: usize = 1000;

    fn state() -> TerminalState {
        TerminalState {
            title: "t".into(),
            cwd: None,
            cols: Some(40),
            rows: Some(10),
            content: Vec::new(),
            lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
            claim: TerminalClaim::Client(TerminalClientClaim {
                client_id: "c".into(),
            }),
            supports_command_detection: None,
            is_pty: Some(true),
        }
    }

    /// A terminal's content and screen bookkeeping, fed as the host feeds them.
    struct Term {
        state: TerminalState,
        screen: Screen,
        /// Every byte of output text so far.
        stream: String,
        /// Whether [`Term::settle`] hands each job the model the last one left, as the model
        /// task does, or thaws every job's starting state.
        reuse: bool,
        live: Live,
    }

    impl Term {
        fn new() -> Term {
            Term {
                state: state(),
                screen: Screen::new(40, 10),
                stream: String::new(),
                reuse: true,
                live: None,
            }
        }

        /// Output `text`, into a new command part when `command` is given, else into the
        /// running command or the last unclassified part; trims as the host does.
        fn output(&mut self, command: Option<&str>, text: &str) {
            match command {
                Some(line) => {
                    self.state
                        .content
                        .push(TerminalContentPart::Command(TerminalCommandPart {
                            command_id: line.into(),
                            command_line: line.into(),
                            output: String::new(),
                            timestamp: 0,
                            is_complete: false,
                            exit_code: None,
                            duration_ms: None,
                        }))
                }
                None if !matches!(
                    self.state.content.last(),
                    Some(TerminalContentPart::Unclassified(_))
                        | Some(TerminalContentPart::Command(TerminalCommandPart {
                            is_complete: false,
                            ..
                        }))
                ) =>
                {
                    self.state.content.push(TerminalContentPart::Unclassified(
                        TerminalUnclassifiedPart {
                            value: String::new(),
                        },
                    ))
                }
                None => {}
            }
            match self.state.content.last_mut() {
                Some(TerminalContentPart::Unclassified(u)) => u.value.push_str(text),
                Some(TerminalContentPart::Command(c)) => c.output.push_str(text),
                _ => unreachable!(),
            }
            self.stream.push_str(text);
            self.screen.appended(text.len(), CAP);
            if scrollback::content_bytes(&self.state) > scrollback::trim_threshold(CAP) {
                self.screen.before_trim(&self.state, CAP);
                scrollback::trim(&mut self.state, CAP);
            }
        }

        fn finish_command(&mut self) {
            if let Some(TerminalContentPart::Command(c)) = self.state.content.last_mut() {
                c.is_complete = true;
            }
        }

        /// Runs the model task's jobs until it has nothing to do.
        fn settle(&mut self) {
            while let Next::Job(job) = self.screen.job(&self.state, CAP, true) {
                let (from, to) = (job.start_at as usize, job.advance.map(|a| a as usize));
                // The model is fed exactly the stream's bytes, trimmed or not.
                if let Some(to) = to {
                    assert_eq!(job.text, self.stream[from..to]);
                }
                let live = if self.reuse { self.live.take() } else { None };
                let (done, live) = compute(job, live);
                self.live = live;
                let Some((at, frozen)) = done.base else {
                    break;
                };
                self.screen.advance_to(at, frozen);
            }
        }

        /// A snapshot's parts: the synthesized one (if any) and the text of the others.
        fn snapshot(&self) -> (Option<String>, String) {
            let mut parts = self.screen.snapshot_content(&self.state, CAP);
            let lead = parts
                .first()
                .is_some_and(|p| text_of(p).starts_with(&model::preamble(40)))
                .then(|| text_of(&parts.remove(0)).to_string());
            (lead, parts.iter().map(text_of).collect())
        }
    }

    #[test]
    fn the_model_is_fed_exactly_the_trimmed_text() {
        let mut t = Term::new();
        t.output(None, "$ ");
        // Nothing trimmed: the snapshot is the content as it is.
        assert_eq!(t.snapshot(), (None, "$ ".to_string()));
        // One command far beyond the cap, then a prompt, then small commands; the model
        // task runs now and then (and not at all during the big one).
        t.output(Some("seq"), "");
        for i in 0..3000 {
            t.output(None, &format!("\x1b[3{}m{i} é\x1b[0m\r\n", i % 8));
        }
        t.finish_command();
        t.output(None, "$ ");
        let (lead, rest) = t.snapshot();
        let lead = lead.expect("a synthesized prefix");
        // The model has not moved: the prefix replays the stream up to the retained parts.
        assert_eq!(
            lead,
            model::preamble(40) + &t.stream[..t.stream.len() - rest.len()]
        );
        assert!(
            rest.len() > CAP / 2 && rest.ends_with("2999 é\x1b[0m\r\n$ "),
            "{rest:?}"
        );
        t.settle();
        assert!(t.screen.base_at > 0 && t.screen.pending.is_empty());
        for round in 0..200 {
            t.output(Some("echo"), &format!("line {round}\r\n"));
            t.finish_command();
            t.output(None, "$ ");
            if round % 7 == 0 {
                t.settle();
            }
            let (lead, rest) = t.snapshot();
            let lead = lead.expect("a synthesized prefix");
            let base = model::preamble(40) + t.screen.base.client();
            let gap = lead
                .strip_prefix(&base)
                .expect("preamble and model state first");
            let start = t.stream.len() - rest.len();
            assert_eq!(gap, &t.stream[t.screen.base_at as usize..start]);
            let retained: String = scrollback::retained(&t.state, CAP)
                .content
                .iter()
                .map(text_of)
                .collect();
            assert_eq!(
                rest, retained,
                "the parts after the prefix are what a trim keeps"
            );
            assert!(
                rest.len() <= CAP && rest.len() > CAP / 2,
                "{round}: {}",
                rest.len()
            );
        }
        // The model's state is the live one: a fresh model fed the whole stream agrees.
        t.settle();
        let mut full = Model::thaw(&Frozen::fresh(40, 10));
        full.feed(&t.stream[..t.screen.base_at as usize]);
        assert_eq!(full.freeze().client(), t.screen.base.client());
    }

    #[test]
    fn within_the_advance_interval_only_a_cursor_report_or_a_long_backlog_moves_the_model() {
        let mut t = Term::new();
        for i in 0..200 {
            t.output(None, &format!("line {i}\r\n"));
        }
        // An advance is due, but held back.
        assert!(matches!(t.screen.job(&t.state, CAP, false), Next::HeldBack));
        // A cursor report makes a job at once, and the base moves with it (up to the query).
        let q = t.stream.len() as u64;
        t.screen
            .queries(vec![(q, Reply::CursorPosition { extended: false })], None);
        t.output(None, &"x".repeat(3 * CAP));
        let Next::Job(job) = t.screen.job(&t.state, CAP, false) else {
            panic!("no job for the report");
        };
        assert_eq!((job.cursor, job.advance), (Some((q, false)), Some(q)));
        let (done, _) = compute(job, None);
        t.screen.publish(done, None);
        assert_eq!(t.screen.base_at, q);
        assert!(t.screen.replies.is_empty());
        // Past the query, held back again until the text waiting for the model is long.
        assert!(matches!(t.screen.job(&t.state, CAP, false), Next::HeldBack));
        for _ in 0..64 {
            if t.screen.pending_bytes >= MAX_PENDING_BYTES / 2 {
                break;
            }
            t.output(None, &"y\r\n".repeat(64 * 1024));
        }
        assert!(
            t.screen.pending_bytes >= MAX_PENDING_BYTES / 2,
            "the trimmed output left {} bytes for the model",
            t.screen.pending_bytes
        );
        let Next::Job(job) = t.screen.job(&t.state, CAP, false) else {
            panic!("no job for the backlog");
        };
        assert!(job.advance.is_some() && job.cursor.is_none());
        // After the interval, any due advance makes a job.
        t.output(None, &"z".repeat(CAP));
        t.settle();
        assert!(t.screen.pending.is_empty());
    }

    #[test]
    fn a_kept_model_and_a_thawed_one_freeze_the_same_base() {
        let (mut kept, mut thawed) = (Term::new(), Term::new());
        thawed.reuse = false;
        let mut jobs = 0;
        for i in 0..4000 {
            // A full-screen program's frames (alternate screen, scroll region, colours, wide
            // characters, a saved cursor) between lines of a shell.
            let text = if i % 500 < 250 {
                format!(
                    "\x1b[?1049h\x1b[2;9r\x1b[{};{}H\x1b[1;3{}m中{i}\x1b7\x1b[K\x1b8\x1b[m",
                    i % 10 + 1,
                    i % 37 + 1,
                    i % 8
                )
            } else {
                format!("\x1b[r\x1b[?1049l\x1b[4{}mline {i}\x1b[0m é\r\n", i % 8)
            };
            for t in [&mut kept, &mut thawed] {
                t.output(None, &text);
            }
            if i % 40 == 39 {
                kept.settle();
                thawed.settle();
                assert_eq!(kept.screen.base_at, thawed.screen.base_at);
                assert_eq!(
                    kept.screen.base.client(),
                    thawed.screen.base.client(),
                    "at {i}"
                );
                jobs += usize::from(kept.live.is_some());
            }
        }
        assert!(jobs > 10, "the kept model was used: {jobs}");
    }

    #[test]
    fn a_resize_before_any_output_reaches_the_model() {
        let mut t = Term::new();
        t.screen.resized(20, 5);
        for i in 0..3000 {
            t.output(
                None,
                &format!("line {i} of text that is wider than twenty\r\n"),
            );
        }
        t.settle();
        assert!(t.screen.base_at > 0);
        let mut full = Model::thaw(&Frozen::fresh(40, 10));
        full.resize(20, 5);
        full.feed(&t.stream[..t.screen.base_at as usize]);
        assert_eq!(full.freeze().client(), t.screen.base.client());
    }

    /// A job from `start` (at `start_at`) over `text` that moves the base to its end.
    fn advance_job(start_at: u64, start: Arc<Frozen>, text: &str) -> Job {
        Job {
            start_at,
            start,
            text: text.to_string(),
            resizes: Vec::new(),
            advance: Some(start_at + text.len() as u64),
            cursor: None,
            repaint: None,
            cols: 40,
        }
    }

    #[test]
    fn a_base_inside_a_control_sequence_freezes_the_same_kept_or_thawed() {
        // A base can fall inside a CSI: an integration OSC that ends a command's output cut
        // it short (the framer releases the CSI's bytes as text and removes the OSC), and the
        // next part, where the trim puts the base, starts with what reads as its final byte.
        let fresh = Arc::new(Frozen::fresh(40, 10));
        let (done, live) = compute(advance_job(0, fresh, "out\x1b[?2004"), None);
        let Some((at, base)) = done.base else {
            panic!("no base");
        };
        let next = |live: Live| {
            let (done, _) = compute(advance_job(at, base.clone(), "h$ "), live);
            done.base.map(|(_, f)| f.client().to_string())
        };
        assert_eq!(next(live), next(None));
    }
}
