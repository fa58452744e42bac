//! The transcript file format, version 1 (docs/store.md): a 16-byte header, then records, each
//! `u32 LE length | u32 LE CRC-32 | u8 kind | payload`. Reading stops at the first record that
//! is torn, oversized or fails its checksum, and keeps everything before it: a damaged file
//! still yields its valid prefix. [`decode`] turns records back into a terminal's metadata and
//! state with the official reducers.
//!
//! Pure functions over bytes; no I/O.

use ahp::reducers::apply_action_to_terminal;
use ahp_types::actions::ActionEnvelope;
use ahp_types::state::{
    TerminalCommandPart, TerminalContentPart, TerminalState, TerminalUnclassifiedPart,
};
use serde::{Deserialize, Serialize};

/// First 8 bytes of every transcript.
pub const MAGIC: [u8; 8] = *b"AHPTYLOG";

/// The format version this build writes and reads.
pub const FORMAT: u32 = 1;

/// Header length in bytes: magic, format (u32 LE), flags (u32 LE, 0).
pub const HEADER_LEN: usize = 16;

/// Bytes before each record's payload: length, CRC-32, kind.
pub const RECORD_HEADER_LEN: usize = 9;

/// Largest payload accepted, in bytes; a length field above it counts as damage (so a flipped
/// bit in a length never makes the reader allocate or skip gigabytes).
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// Largest text in one content record a checkpoint writes (longer parts continue in
/// [`Kind::More`] records).
pub const PART_CHUNK_BYTES: usize = 1024 * 1024;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// [`Meta`] as JSON: starts every file (and every checkpoint).
    Meta = 1,
    /// One `TerminalContentPart` as JSON, appended to the content.
    Part = 2,
    /// Raw UTF-8 text continuing the last part (an unclassified part's value, a command
    /// part's output).
    More = 3,
    /// An AHP `ActionEnvelope` as JSON (the one sent to subscribers), reduced onto the state.
    Action = 4,
    /// [`Owner`] as JSON: who holds the claim, and whether a client renamed the terminal.
    Owner = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Meta,
            2 => Kind::Part,
            3 => Kind::More,
            4 => Kind::Action,
            5 => Kind::Owner,
            _ => return None,
        })
    }
}

/// The first record of a transcript: the terminal's identity, the host's own fields, and
/// its state (whose content follows in [`Kind::Part`] records).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The terminal's channel URI.
    pub uri: String,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// The `clientId` holding the claim.
    pub holder: String,
    /// A client renamed the terminal (titles from escape sequences no longer apply).
    #[serde(default)]
    pub renamed_by_client: bool,
    /// The AHP 1.0 terminal state (its content is written as separate records).
    pub state: TerminalState,
}

/// A change of the host's own fields, after a claim transfer or a client's rename.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Owner {
    /// The `clientId` holding the claim.
    pub holder: String,
    /// A client renamed the terminal.
    #[serde(default)]
    pub renamed_by_client: bool,
}

/// The 16-byte header of a version-1 file.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    h
}

/// Appends one record to `out`.
pub fn push_record(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
    out.reserve(RECORD_HEADER_LEN + payload.len());
    out.extend_from_slice(&record_header(kind, payload));
    out.extend_from_slice(payload);
}

/// Text of at most this many bytes is copied into a checkpoint's own buffer; longer text is
/// written from the state where it lies (one more `iovec` instead of a copy).
const COPY_BELOW: usize = 4096;

/// A checkpoint ready to be written: the header, `meta` (its state's content left out), then
/// each content part as a [`Kind::Part`] record whose text (an unclassified part's `value`, a
/// command part's `output`) is empty, followed by that text as [`Kind::More`] records of at
/// most [`PART_CHUNK_BYTES`], split at character boundaries. The text is raw UTF-8, so it is
/// neither escaped as JSON nor copied: the bytes are held as pieces, small buffers built here
/// and slices of the state's own strings, for one vectored write.
pub struct Checkpoint<'a> {
    pieces: Vec<Piece<'a>>,
    len: usize,
}

enum Piece<'a> {
    Built(Vec<u8>),
    Text(&'a [u8]),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Built(b) => b,
            Piece::Text(t) => t,
        }
    }
}

impl<'a> Checkpoint<'a> {
    /// The checkpoint of `meta` (its content borrowed, not copied).
    pub fn new(meta: &'a Meta) -> Checkpoint<'a> {
        let mut c = Checkpoint {
            pieces: Vec::new(),
            len: 0,
        };
        let mut out = Vec::with_capacity(1024);
        out.extend_from_slice(&header());
        let bare = MetaRef {
            uri: &meta.uri,
            created_at_ms: meta.created_at_ms,
            holder: &meta.holder,
            renamed_by_client: meta.renamed_by_client,
            state: StateWithoutContent(&meta.state),
        };
        push_json(&mut out, Kind::Meta, &bare);
        for part in &meta.state.content {
            let text = match part {
                TerminalContentPart::Unclassified(u) => &u.value,
                TerminalContentPart::Command(c) => &c.output,
                TerminalContentPart::Unknown(_) => {
                    push_json(&mut out, Kind::Part, part);
                    continue;
                }
            };
            push_json(&mut out, Kind::Part, &without_text(part));
            let mut rest = text.as_str();
            while !rest.is_empty() {
                let mut n = rest.len().min(PART_CHUNK_BYTES);
                while !rest.is_char_boundary(n) {
                    n -= 1;
                }
                let chunk = &rest.as_bytes()[..n];
                if n < COPY_BELOW {
                    push_record(&mut out, Kind::More, chunk);
                } else {
                    out.extend_from_slice(&record_header(Kind::More, chunk));
                    c.push(Piece::Built(std::mem::take(&mut out)));
                    c.push(Piece::Text(chunk));
                }
                rest = &rest[n..];
            }
        }
        c.push(Piece::Built(out));
        c
    }

    fn push(&mut self, piece: Piece<'a>) {
        let n = piece.bytes().len();
        if n > 0 {
            self.len += n;
            self.pieces.push(piece);
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: it has at least the header and the metadata).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes it all to `w` with vectored writes (the content's text straight from the
    /// state).
    pub fn write_to(&self, w: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut slices: Vec<std::io::IoSlice<'_>> = self
            .pieces
            .iter()
            .map(|p| std::io::IoSlice::new(p.bytes()))
            .collect();
        let mut left: &mut [std::io::IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            match w.write_vectored(left) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => std::io::IoSlice::advance_slices(&mut left, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Its bytes in one buffer.
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for p in &self.pieces {
            v.extend_from_slice(p.bytes());
        }
        v
    }
}

/// A checkpoint's bytes in one buffer (see [`Checkpoint`]).
#[cfg(test)]
pub fn checkpoint(meta: &Meta) -> Vec<u8> {
    Checkpoint::new(meta).to_vec()
}

/// A [`Kind::Owner`] record.
pub fn owner_record(out: &mut Vec<u8>, owner: &Owner) {
    push_json(out, Kind::Owner, owner);
}

/// The 9 bytes before a record's payload: length, CRC-32 of the kind and payload, kind.
fn record_header(kind: Kind, payload: &[u8]) -> [u8; RECORD_HEADER_LEN] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind as u8]);
    crc.update(payload);
    let mut h = [0u8; RECORD_HEADER_LEN];
    h[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    h[8] = kind as u8;
    h
}

fn push_json(out: &mut Vec<u8>, kind: Kind, value: &impl Serialize) {
    // Serializing our own types into memory cannot fail.
    let json = serde_json::to_vec(value).unwrap_or_default();
    push_record(out, kind, &json);
}

/// `part` with its text (an unclassified part's value, a command part's output) empty,
/// without copying that text.
fn without_text(part: &TerminalContentPart) -> TerminalContentPart {
    match part {
        TerminalContentPart::Unclassified(_) => {
            TerminalContentPart::Unclassified(TerminalUnclassifiedPart {
                value: String::new(),
            })
        }
        TerminalContentPart::Command(c) => TerminalContentPart::Command(TerminalCommandPart {
            command_id: c.command_id.clone(),
            command_line: c.command_line.clone(),
            output: String::new(),
            timestamp: c.timestamp,
            is_complete: c.is_complete,
            exit_code: c.exit_code,
            duration_ms: c.duration_ms,
        }),
        TerminalContentPart::Unknown(v) => TerminalContentPart::Unknown(v.clone()),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MetaRef<'a> {
    uri: &'a str,
    created_at_ms: i64,
    holder: &'a str,
    renamed_by_client: bool,
    state: StateWithoutContent<'a>,
}

/// A terminal state serialized with an empty `content`.
struct StateWithoutContent<'a>(&'a TerminalState);

impl Serialize for StateWithoutContent<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let s0 = self.0;
        let bare = TerminalState {
            title: s0.title.clone(),
            cwd: s0.cwd.clone(),
            cols: s0.cols,
            rows: s0.rows,
            content: Vec::new(),
            lifecycle: s0.lifecycle.clone(),
            claim: s0.claim.clone(),
            supports_command_detection: s0.supports_command_detection,
            is_pty: s0.is_pty,
        };
        bare.serialize(s)
    }
}

/// Why reading stopped before the end of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Not a transcript of a format this build reads (wrong magic, unknown version, too short).
    Header(String),
    /// The file ends inside the record starting at `at`.
    Torn {
        /// Offset of the record.
        at: usize,
    },
    /// The record at `at` claims a payload longer than [`MAX_RECORD_BYTES`].
    Length {
        /// Offset of the record.
        at: usize,
    },
    /// The record at `at` fails its checksum.
    Checksum {
        /// Offset of the record.
        at: usize,
    },
    /// The record at `at` has a valid checksum but cannot be understood.
    Content {
        /// Offset of the record.
        at: usize,
        /// What is wrong with it.
        why: String,
    },
}

impl Damage {
    /// Where the valid prefix ends (0 for a bad header).
    pub fn offset(&self) -> usize {
        match self {
            Damage::Header(_) => 0,
            Damage::Torn { at }
            | Damage::Length { at }
            | Damage::Checksum { at }
            | Damage::Content { at, .. } => *at,
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Header(why) => write!(f, "bad header: {why}"),
            Damage::Torn { at } => write!(f, "truncated inside the record at byte {at}"),
            Damage::Length { at } => write!(f, "impossible record length at byte {at}"),
            Damage::Checksum { at } => write!(f, "checksum mismatch in the record at byte {at}"),
            Damage::Content { at, why } => write!(f, "unreadable record at byte {at}: {why}"),
        }
    }
}

/// One record found by [`scan`].
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Offset of its header in the file.
    pub at: usize,
    /// `None` for a kind this build does not know (skipped: a later minor addition).
    pub kind: Option<Kind>,
    /// Its payload.
    pub payload: &'a [u8],
}

/// Every valid record of `bytes`, in order, and the damage that stopped the scan (if any).
/// Costs one pass and one CRC over the bytes; allocates only the record list.
pub fn scan(bytes: &[u8]) -> (Vec<Record<'_>>, Option<Damage>) {
    if bytes.len() < HEADER_LEN {
        return (
            Vec::new(),
            Some(Damage::Header(format!("{} bytes long", bytes.len()))),
        );
    }
    if bytes[..8] != MAGIC {
        return (Vec::new(), Some(Damage::Header("not a transcript".into())));
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT {
        return (
            Vec::new(),
            Some(Damage::Header(format!(
                "format {format} (this ahpty reads format {FORMAT})"
            ))),
        );
    }
    let flags = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if flags != 0 {
        return (
            Vec::new(),
            Some(Damage::Header(format!("unknown flags {flags:#x}"))),
        );
    }
    let mut records = Vec::new();
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < RECORD_HEADER_LEN {
            return (records, Some(Damage::Torn { at }));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD_BYTES {
            return (records, Some(Damage::Length { at }));
        }
        if rest.len() < RECORD_HEADER_LEN + len {
            return (records, Some(Damage::Torn { at }));
        }
        let kind = rest[8];
        let payload = &rest[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len];
        let mut h = crc32fast::Hasher::new();
        h.update(&[kind]);
        h.update(payload);
        if h.finalize() != crc {
            return (records, Some(Damage::Checksum { at }));
        }
        records.push(Record {
            at,
            kind: Kind::from_u8(kind),
            payload,
        });
        at += RECORD_HEADER_LEN + len;
    }
    (records, None)
}

/// A transcript read back: the terminal as its last valid record left it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Identity, owner and state (with its content).
    pub meta: Meta,
    /// Bytes of the file that were used (the whole file unless damaged).
    pub valid_len: usize,
}

/// Reads a transcript: the valid prefix (see [`scan`]) reduced with the official reducers.
/// Returns what could be read, `None` when not even the metadata could, and the damage that
/// ended it. A record that passes its checksum but does not parse ends it too.
pub fn decode(bytes: &[u8]) -> (Option<Transcript>, Option<Damage>) {
    let (records, mut damage) = scan(bytes);
    let mut meta: Option<Meta> = None;
    let mut valid_len = HEADER_LEN;
    for r in &records {
        let applied = match (r.kind, &mut meta) {
            (Some(Kind::Meta), None) => serde_json::from_slice::<Meta>(r.payload)
                .map(|m| meta = Some(m))
                .map_err(|e| format!("metadata: {e}")),
            (Some(Kind::Meta), Some(_)) => Err("a second metadata record".into()),
            (_, None) => Err("the file does not start with its metadata".into()),
            (Some(Kind::Part), Some(m)) => serde_json::from_slice::<TerminalContentPart>(r.payload)
                .map(|p| m.state.content.push(p))
                .map_err(|e| format!("content part: {e}")),
            (Some(Kind::More), Some(m)) => more(&mut m.state, r.payload),
            (Some(Kind::Action), Some(m)) => serde_json::from_slice::<ActionEnvelope>(r.payload)
                .map(|e| {
                    apply_action_to_terminal(&mut m.state, &e.action);
                })
                .map_err(|e| format!("action: {e}")),
            (Some(Kind::Owner), Some(m)) => serde_json::from_slice::<Owner>(r.payload)
                .map(|o| {
                    m.holder = o.holder;
                    m.renamed_by_client = o.renamed_by_client;
                })
                .map_err(|e| format!("owner: {e}")),
            (None, Some(_)) => Ok(()),
        };
        if let Err(why) = applied {
            damage = Some(Damage::Content { at: r.at, why });
            break;
        }
        valid_len = r.at + RECORD_HEADER_LEN + r.payload.len();
    }
    if meta.is_none() && damage.is_none() {
        // Only a header: the file ends where its metadata should start.
        damage = Some(Damage::Torn { at: HEADER_LEN });
    }
    let transcript = meta.map(|meta| Transcript { meta, valid_len });
    (transcript, damage)
}

/// Appends a [`Kind::More`] record's text to the last content part.
fn more(state: &mut TerminalState, payload: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(payload).map_err(|e| format!("continuation: {e}"))?;
    match state.content.last_mut() {
        Some(TerminalContentPart::Unclassified(u)) => u.value.push_str(text),
        Some(TerminalContentPart::Command(c)) => c.output.push_str(text),
        _ => return Err("a continuation without a part to continue".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
