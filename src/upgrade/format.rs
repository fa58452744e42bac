//! The hand-over file (docs/upgrade.md#the-hand-over-format): written as a stream into an
//! in-memory file by the old image, read as a stream by the new one.
//!
//! Neither side ever holds the whole encoded document: the writer serializes the
//! [`Handover`] straight into the file through a [`WRITE_BUFFER`]-sized buffer, and the reader
//! parses it through a [`READ_BUFFER`]-sized one. The bulky texts — the histories' envelopes
//! (format 2), the terminals' retained content and their models' text (format 3), nearly all
//! of the retained state — are not in the JSON: they follow it as raw bytes, written from the
//! image's own buffers (the histories' are shared with the store, not copied:
//! `host::history`) and read into buffers of their exact size. So the JSON is small whatever
//! the output retained, the encoding costs the file itself plus two fixed buffers, and the
//! texts move without escaping or parsing.
//!
//! May touch: the in-memory file it creates or is given (by `pwrite`/`pread` at explicit
//! offsets: the file offset is shared with the other image).

use std::io::{self, BufWriter, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use super::sys;
use crate::codec::Frame;
use crate::host::handover::HostImage;
use crate::host::history::EntryImage;
use crate::server::handover::ServerImage;

/// The hand-over format this version writes (docs/upgrade.md).
pub const FORMAT: u32 = 3;

/// The hand-over formats this version reads: 1 (every text in the JSON), 2 (the histories'
/// texts raw) and 3 (the terminals' contents and models raw too).
pub const READABLE_FORMATS: &[u32] = &[1, 2, 3];

/// First bytes of a hand-over file.
const MAGIC: &[u8; 8] = b"AHPTYHO\0";

/// Bytes before the JSON: magic, format (u32 LE), flags (u32 LE), JSON length (u64 LE).
const HEADER: usize = 24;

/// Largest JSON part read, in bytes (twice the largest retained state that makes sense:
/// 512 terminals with 4 MiB of history each, escaped).
pub const MAX_HANDOVER_BYTES: u64 = 1 << 33;

/// The writer's buffer between the serializer and the file, in bytes.
pub const WRITE_BUFFER: usize = 1 << 20;

/// The reader's buffer between the file and the parser, in bytes.
pub const READ_BUFFER: usize = 1 << 20;

/// Everything the old image hands to the new one (the JSON part of the hand-over file).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    /// The version of the image that wrote it.
    pub from_version: String,
    /// Upgrade attempts of this daemon so far, this one included.
    pub attempt: u64,
    /// When SIGUSR2 arrived and when the host was quiesced (`CLOCK_MONOTONIC`, ns).
    pub signalled_at_ns: u64,
    pub quiesced_at_ns: u64,
    /// The path executed for an upgrade (the daemon's executable at its first start).
    pub install_path: PathBuf,
    /// The inherited descriptors, by number; listeners and ptys name them by index.
    pub fds: Vec<RawFd>,
    /// How long the new image may take to commit before the old one is executed again, ms
    /// (the old image's `--upgrade-timeout`; absent from older versions' hand-overs).
    #[serde(default)]
    pub adopt_timeout_ms: Option<u64>,
    /// Listeners and token.
    pub server: ServerImage,
    /// Terminals, histories, serverSeq, known clients.
    pub host: HostImage,
}

/// A fault to inject while writing (tests only, see `super::TEST_FAULT_ENV`): fail once this
/// many bytes of JSON were written, as a full memory would.
#[derive(Debug, Clone, Copy)]
pub struct WriteFault(pub u64);

/// Writes `h` into a new in-memory file (close-on-exec), format [`FORMAT`]: the header, the
/// JSON streamed through a [`WRITE_BUFFER`] buffer, the JSON's length into the header, then
/// every history text as raw bytes. The texts are moved out of `h` (each entry keeps its
/// length). Returns the file and its length in bytes. Errors: the file cannot be created or
/// written (no memory, `ENOSPC` in a memory-limited cgroup, a [`WriteFault`]): the file is
/// dropped with what was written.
pub fn write(h: &mut Handover, fault: Option<WriteFault>) -> io::Result<(OwnedFd, u64)> {
    let texts: Vec<Frame> = entries(&mut h.host)
        .map(|e| {
            e.bytes = Some(e.text.len() as u64);
            std::mem::replace(&mut e.text, Frame::from(""))
        })
        .collect();
    // The terminals' texts are moved out for the JSON and back in afterwards, whatever the
    // outcome: a failed write is followed by another one (without the histories).
    let mut bulk: Vec<String> = Vec::new();
    for t in &mut h.host.terminals {
        let mut lens = Vec::new();
        for text in t.texts_mut() {
            lens.push(text.len() as u64);
            bulk.push(std::mem::take(text));
        }
        t.raw_texts = Some(lens);
    }
    let written = write_parts(h, &texts, &bulk, fault);
    let mut back = bulk.into_iter();
    for t in &mut h.host.terminals {
        t.raw_texts = None;
        for text in t.texts_mut() {
            *text = back.next().unwrap_or_default();
        }
    }
    written
}

/// [`write`] once the texts are out of `h`: the header, the JSON, the histories' `texts`,
/// then the terminals' `bulk`.
fn write_parts(
    h: &Handover,
    texts: &[Frame],
    bulk: &[String],
    fault: Option<WriteFault>,
) -> io::Result<(OwnedFd, u64)> {
    let fd = sys::memfd()?;
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    sys::pwrite_all(fd.as_raw_fd(), &header, 0)?;
    let mut sink = BufWriter::with_capacity(
        WRITE_BUFFER,
        FileAt {
            fd: fd.as_raw_fd(),
            at: HEADER as u64,
            fail_at: fault.map(|f| HEADER as u64 + f.0),
        },
    );
    serde_json::to_writer(&mut sink, h).map_err(io::Error::from)?;
    sink.flush()?;
    let mut file = sink.into_inner().map_err(|e| e.into_error())?;
    let len = file.at - HEADER as u64;
    sys::pwrite_all(fd.as_raw_fd(), &len.to_le_bytes(), 16)?;
    for text in texts {
        file.write_all(text.as_str().as_bytes())?;
    }
    for text in bulk {
        file.write_all(text.as_bytes())?;
    }
    Ok((fd, file.at))
}

/// Every history entry of `host`, in file order: the root channel's, then each terminal's.
fn entries(host: &mut HostImage) -> impl Iterator<Item = &mut EntryImage> {
    host.root_history.entries.iter_mut().chain(
        host.terminals
            .iter_mut()
            .flat_map(|t| t.history.entries.iter_mut()),
    )
}

/// Reads a hand-over written by [`write`] (of any format in [`READABLE_FORMATS`]) from `fd`,
/// parsing the JSON as it is read, then reading each history text that follows it into a
/// buffer of its size. Errors name what is wrong: not a hand-over, an unknown format, too
/// large, truncated, bad JSON, a text that is not UTF-8.
pub fn read(fd: RawFd) -> Result<Handover, String> {
    let mut header = [0u8; HEADER];
    let got = sys::pread_full(fd, &mut header, 0).map_err(|e| format!("cannot read it: {e}"))?;
    if got < HEADER || &header[..8] != MAGIC {
        return Err("not an ahpty hand-over".into());
    }
    let word = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let format = word(8);
    if !READABLE_FORMATS.contains(&format) {
        return Err(format!(
            "hand-over format {format}; this version reads {READABLE_FORMATS:?}"
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[16..24]);
    let len = u64::from_le_bytes(len);
    let size = sys::file_size(fd).map_err(|e| format!("cannot read it: {e}"))?;
    if len > MAX_HANDOVER_BYTES || size > MAX_HANDOVER_BYTES {
        return Err(format!(
            "hand-over of {} bytes, more than the {MAX_HANDOVER_BYTES} this version reads",
            len.max(size)
        ));
    }
    let mut source = io::BufReader::with_capacity(
        READ_BUFFER,
        FileAt {
            fd,
            at: HEADER as u64,
            fail_at: None,
        }
        .take(len),
    );
    let mut h: Handover = serde_json::from_reader(&mut source).map_err(|e| {
        if e.is_eof() {
            format!("hand-over truncated: the JSON ends before its {len} bytes")
        } else {
            format!("hand-over: {e}")
        }
    })?;
    drop(source);
    let mut at = HEADER as u64 + len;
    for e in entries(&mut h.host) {
        let Some(n) = e.bytes.take() else { continue };
        e.text = Frame::from(raw_text(fd, &mut at, n, size, "history")?);
    }
    for t in &mut h.host.terminals {
        let Some(lens) = t.raw_texts.take() else {
            continue;
        };
        let uri = t.uri.clone();
        let mut slots: Vec<&mut String> = t.texts_mut().collect();
        if slots.len() != lens.len() {
            return Err(format!(
                "hand-over: terminal {uri} names {} raw texts for {} places",
                lens.len(),
                slots.len()
            ));
        }
        for (slot, n) in slots.iter_mut().zip(lens) {
            **slot = raw_text(fd, &mut at, n, size, "terminal")?;
        }
    }
    Ok(h)
}

/// The raw text of `n` bytes at `*at` in the hand-over file of `size` bytes; advances `*at`.
/// Errors: it ends past the file, cannot be read, or is not UTF-8 (`what` names it).
fn raw_text(fd: RawFd, at: &mut u64, n: u64, size: u64, what: &str) -> Result<String, String> {
    let end = at
        .checked_add(n)
        .filter(|&end| end <= size)
        .ok_or_else(|| {
            format!("hand-over truncated: {size} bytes, a {what} text ends past them")
        })?;
    // Bounded by the file's size, checked above.
    let mut buf = vec![0u8; n as usize];
    let got = sys::pread_full(fd, &mut buf, *at).map_err(|e| format!("cannot read it: {e}"))?;
    if got < buf.len() {
        return Err(format!("hand-over truncated at byte {}", *at + got as u64));
    }
    let text = String::from_utf8(buf)
        .map_err(|_| format!("hand-over: the {what} text at byte {} is not UTF-8", *at))?;
    *at = end;
    Ok(text)
}

/// A file read and written at an explicit, advancing offset (`pread`/`pwrite`), never
/// through the file offset it shares with the other image.
struct FileAt {
    fd: RawFd,
    at: u64,
    /// Fail writes from this offset on (a [`WriteFault`]).
    fail_at: Option<u64>,
}

impl Write for FileAt {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut len = buf.len();
        if let Some(limit) = self.fail_at {
            if self.at >= limit {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            len = len.min((limit - self.at) as usize);
        }
        let n = sys::pwrite(self.fd, &buf[..len], self.at)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for FileAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = sys::pread(self.fd, buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample() -> Handover {
        Handover {
            from_version: "0.1.0".into(),
            attempt: 3,
            signalled_at_ns: 1,
            quiesced_at_ns: 2,
            install_path: "/usr/bin/ahpty".into(),
            fds: vec![5, 6],
            adopt_timeout_ms: Some(5000),
            server: ServerImage {
                listeners: Vec::new(),
                token: None,
                token_generated: false,
            },
            host: HostImage {
                instance_id: "x".into(),
                server_seq: 42,
                next_terminal: 2,
                root: serde_json::from_value(serde_json::json!({"agents": [], "terminals": []}))
                    .unwrap(),
                root_history: serde_json::from_value(serde_json::json!({
                    "cap": 10, "floor": 0,
                    "entries": [{"serverSeq": 41, "text": "{\"a\":\"\\u001b[0m\"}"}]
                }))
                .unwrap(),
                seen_clients: vec![("c".into(), 5, 3)],
                terminals: Vec::new(),
                script_dir: None,
            },
        }
    }

    /// The bytes of a hand-over file.
    fn bytes_of(fd: &OwnedFd) -> Vec<u8> {
        let mut out = Vec::new();
        let mut f = FileAt {
            fd: fd.as_raw_fd(),
            at: 0,
            fail_at: None,
        };
        f.read_to_end(&mut out).unwrap();
        out
    }

    /// A hand-over file holding `bytes`.
    fn file_of(bytes: &[u8]) -> OwnedFd {
        let fd = sys::memfd().unwrap();
        sys::pwrite_all(fd.as_raw_fd(), bytes, 0).unwrap();
        fd
    }

    #[test]
    fn a_hand_over_round_trips_and_damage_is_named() {
        let (fd, len) = write(&mut sample(), None).unwrap();
        let bytes = bytes_of(&fd);
        assert_eq!(bytes.len() as u64, len);
        let back = read(fd.as_raw_fd()).unwrap();
        assert_eq!(back.attempt, 3);
        assert_eq!(back.host.server_seq, 42);
        assert_eq!(
            serde_json::to_value(&back.host.root_history).unwrap()["entries"][0]["text"],
            serde_json::json!("{\"a\":\"\\u001b[0m\"}")
        );
        let read_bytes = |b: &[u8]| read(file_of(b).as_raw_fd());
        assert_eq!(
            read_bytes(b"nonsense").unwrap_err(),
            "not an ahpty hand-over"
        );
        let mut v4 = bytes.clone();
        v4[8] = 4;
        assert!(read_bytes(&v4).unwrap_err().contains("format 4"));
        let err = read_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.contains("truncated"), "{err}");
        let mut huge = bytes.clone();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_bytes(&huge).unwrap_err().contains("more than"));
        // The texts follow the JSON: one cut short, or not UTF-8, is named.
        let err = read_bytes(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(err.contains("truncated"), "{err}");
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert!(read_bytes(&bad).unwrap_err().contains("not UTF-8"));
    }

    /// A terminal of the image, with two content parts.
    fn terminal(uri: &str, texts: [&str; 2]) -> crate::host::handover::TerminalImage {
        use ahp_types::state::*;
        let state = TerminalState {
            title: "t".into(),
            cwd: None,
            cols: Some(80),
            rows: Some(24),
            content: vec![
                TerminalContentPart::Unclassified(TerminalUnclassifiedPart {
                    value: texts[0].into(),
                }),
                TerminalContentPart::Command(TerminalCommandPart {
                    command_id: "c1".into(),
                    command_line: "ls".into(),
                    output: texts[1].into(),
                    timestamp: 0,
                    is_complete: true,
                    exit_code: Some(0),
                    duration_ms: Some(1),
                }),
            ],
            lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
            claim: TerminalClaim::Client(TerminalClientClaim {
                client_id: "c".into(),
            }),
            supports_command_detection: Some(true),
            is_pty: Some(true),
        };
        serde_json::from_value(serde_json::json!({
            "uri": uri, "id": 1, "state": state, "holder": "c", "renamedByClient": false,
            "contentBytes": texts[0].len() + texts[1].len(),
            "history": {"cap": 10, "floor": 0, "entries": []},
            "createdMs": 0,
            "reader": crate::terminal::ReaderCarry::default(),
            "pump": {},
        }))
        .unwrap()
    }

    fn content(t: &crate::host::handover::TerminalImage) -> Vec<String> {
        let mut t = t.clone();
        t.texts_mut().map(|s| s.clone()).collect()
    }

    /// Format 3: the terminals' contents follow the JSON as raw bytes (the JSON holds none
    /// of them, escaped or not), come back in place, and stay in the image that was written;
    /// a count that does not match the image is named.
    #[test]
    fn terminal_texts_travel_raw() {
        let mut h = sample();
        let texts = ["pr\u{1b}[1mompt $ \"q\"\r\n", "y\r\ny\r\n"];
        h.host.terminals.push(terminal("ahp-terminal:/a", texts));
        h.host
            .terminals
            .push(terminal("ahp-terminal:/b", ["", "é"]));
        let (fd, _) = write(&mut h, None).unwrap();
        assert_eq!(content(&h.host.terminals[0]), texts, "the writer kept them");
        let bytes = bytes_of(&fd);
        let json_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
        let json = std::str::from_utf8(&bytes[HEADER..HEADER + json_len]).unwrap();
        assert!(
            !json.contains("ompt") && !json.contains("y\\r\\n"),
            "{json}"
        );
        assert!(bytes[HEADER + json_len..].ends_with("y\r\ny\r\né".as_bytes()));
        let back = read(fd.as_raw_fd()).unwrap();
        assert_eq!(content(&back.host.terminals[0]), texts);
        assert_eq!(content(&back.host.terminals[1]), ["", "é"]);
        assert_eq!(back.host.terminals[0].raw_texts, None);

        // One text more in the JSON than the image has places for.
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["host"]["terminals"][1]["rawTexts"] = serde_json::json!([0, 2, 0]);
        let json = serde_json::to_vec(&v).unwrap();
        let mut damaged = bytes[..16].to_vec();
        damaged.extend_from_slice(&(json.len() as u64).to_le_bytes());
        damaged.extend_from_slice(&json);
        damaged.extend_from_slice(&bytes[HEADER + json_len..]);
        let err = read(file_of(&damaged).as_raw_fd()).unwrap_err();
        assert!(err.contains("names 3 raw texts for 2 places"), "{err}");
    }

    /// Format 1 (every text in the JSON, what the version before wrote) is still read.
    #[test]
    fn a_format_1_hand_over_is_read() {
        let json = serde_json::to_vec(&sample()).unwrap();
        let mut bytes = Vec::from(&MAGIC[..]);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&json);
        let back = read(file_of(&bytes).as_raw_fd()).unwrap();
        assert_eq!(
            back.host.root_history.entries[0].text.as_str(),
            "{\"a\":\"\\u001b[0m\"}"
        );
    }

    /// A write that fails part-way (as a full memory makes it) is an error, not a panic or
    /// an abort, and what the file holds then is not taken for a hand-over.
    #[test]
    fn a_failing_write_is_an_error() {
        let err = write(&mut sample(), Some(WriteFault(100))).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM), "{err}");
    }

    #[test]
    fn a_hand_over_of_an_older_version_has_no_adopt_timeout() {
        let mut v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["adoptTimeoutMs"], serde_json::json!(5000));
        v.as_object_mut().unwrap().remove("adoptTimeoutMs");
        v["host"].as_object_mut().unwrap().remove("scriptDir");
        let h: Handover = serde_json::from_value(v).unwrap();
        assert_eq!(h.adopt_timeout_ms, None);
        assert_eq!(h.host.script_dir, None);
        assert_eq!(super::super::seconds(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let mut v = serde_json::to_value(sample()).unwrap();
        v["futureField"] = serde_json::json!({"a": 1});
        v["host"]["futureToo"] = serde_json::json!(true);
        let h: Handover = serde_json::from_value(v).unwrap();
        assert_eq!(h.install_path, PathBuf::from("/usr/bin/ahpty"));
    }
}
