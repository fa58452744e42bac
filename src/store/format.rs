//! The transcript file format, version 1 (docs/store.md): a 16-byte header, then records, each
//! `u32 LE length | u32 LE CRC-32 | u8 kind | payload`. Reading stops at the first record that
//! is torn, oversized or fails its checksum, and keeps everything before it: a damaged file
//! still yields its valid prefix. [`decode`] turns records back into a terminal's metadata and
//! state with the official reducers.
//!
//! Pure functions over bytes; no I/O.

use ahp::reducers::apply_action_to_terminal;
use ahp_types::actions::ActionEnvelope;
use ahp_types::state::{TerminalContentPart, TerminalState};
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
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind as u8]);
    crc.update(payload);
    out.reserve(RECORD_HEADER_LEN + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(payload);
}

/// A checkpoint: the header, `meta` (its state's content left out) and the content as
/// [`Kind::Part`] and [`Kind::More`] records of at most [`PART_CHUNK_BYTES`] of text.
pub fn checkpoint(meta: &Meta) -> Vec<u8> {
    let content = &meta.state.content;
    let mut out = Vec::with_capacity(HEADER_LEN + 1024 + content_len(content) * 11 / 10);
    out.extend_from_slice(&header());
    let bare = MetaRef {
        uri: &meta.uri,
        created_at_ms: meta.created_at_ms,
        holder: &meta.holder,
        renamed_by_client: meta.renamed_by_client,
        state: StateWithoutContent(&meta.state),
    };
    push_json(&mut out, Kind::Meta, &bare);
    for part in content {
        push_part(&mut out, part);
    }
    out
}

/// A [`Kind::Owner`] record.
pub fn owner_record(out: &mut Vec<u8>, owner: &Owner) {
    push_json(out, Kind::Owner, owner);
}

fn push_json(out: &mut Vec<u8>, kind: Kind, value: &impl Serialize) {
    // Serializing our own types into memory cannot fail.
    let json = serde_json::to_vec(value).unwrap_or_default();
    push_record(out, kind, &json);
}

/// One content part: its JSON with at most [`PART_CHUNK_BYTES`] of text, then the rest of
/// the text in [`Kind::More`] records.
fn push_part(out: &mut Vec<u8>, part: &TerminalContentPart) {
    let text = match part {
        TerminalContentPart::Unclassified(u) => &u.value,
        TerminalContentPart::Command(c) => &c.output,
        TerminalContentPart::Unknown(_) => {
            push_json(out, Kind::Part, part);
            return;
        }
    };
    let mut cut = text.len().min(PART_CHUNK_BYTES);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    if cut == text.len() {
        push_json(out, Kind::Part, part);
        return;
    }
    let mut head = part.clone();
    match &mut head {
        TerminalContentPart::Unclassified(u) => u.value.truncate(cut),
        TerminalContentPart::Command(c) => c.output.truncate(cut),
        TerminalContentPart::Unknown(_) => {}
    }
    push_json(out, Kind::Part, &head);
    let mut rest = &text[cut..];
    while !rest.is_empty() {
        let mut n = rest.len().min(PART_CHUNK_BYTES);
        while !rest.is_char_boundary(n) {
            n -= 1;
        }
        push_record(out, Kind::More, &rest.as_bytes()[..n]);
        rest = &rest[n..];
    }
}

fn content_len(content: &[TerminalContentPart]) -> usize {
    content
        .iter()
        .map(|p| match p {
            TerminalContentPart::Unclassified(u) => u.value.len(),
            TerminalContentPart::Command(c) => c.output.len() + c.command_line.len(),
            TerminalContentPart::Unknown(_) => 64,
        })
        .sum()
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
mod tests {
    use super::*;
    use ahp_types::actions::{
        StateAction, TerminalClaimedAction, TerminalDataAction, TerminalExitedAction,
    };
    use ahp_types::state::{
        TerminalClaim, TerminalClientClaim, TerminalLifecycleState, TerminalRunningLifecycleState,
        TerminalUnclassifiedPart,
    };

    fn claim(id: &str) -> TerminalClaim {
        TerminalClaim::Client(TerminalClientClaim {
            client_id: id.into(),
        })
    }

    fn meta(text: &str) -> Meta {
        Meta {
            uri: "ahp-terminal:/t1".into(),
            created_at_ms: 1_700_000_000_000,
            holder: "c1".into(),
            renamed_by_client: false,
            state: TerminalState {
                title: "bash".into(),
                cwd: Some("file:///tmp".into()),
                cols: Some(80),
                rows: Some(24),
                content: if text.is_empty() {
                    Vec::new()
                } else {
                    vec![TerminalContentPart::Unclassified(
                        TerminalUnclassifiedPart { value: text.into() },
                    )]
                },
                lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
                claim: claim("c1"),
                supports_command_detection: None,
                is_pty: Some(true),
            },
        }
    }

    fn envelope(seq: u64, action: StateAction) -> Vec<u8> {
        serde_json::to_vec(&ActionEnvelope {
            channel: "ahp-terminal:/t1".into(),
            action,
            server_seq: seq,
            origin: None,
            rejection_reason: None,
        })
        .unwrap()
    }

    fn data(seq: u64, s: &str) -> Vec<u8> {
        envelope(
            seq,
            StateAction::TerminalData(TerminalDataAction { data: s.into() }),
        )
    }

    fn text_of(t: &Transcript) -> String {
        t.meta
            .state
            .content
            .iter()
            .map(|p| match p {
                TerminalContentPart::Unclassified(u) => u.value.clone(),
                TerminalContentPart::Command(c) => c.output.clone(),
                TerminalContentPart::Unknown(_) => String::new(),
            })
            .collect()
    }

    /// A file with a checkpoint holding "seed\n", then lines 0..n as actions, an owner change
    /// and an exit.
    fn sample(n: usize) -> (Vec<u8>, Vec<usize>) {
        let mut f = checkpoint(&meta("seed\n"));
        let mut ends = vec![f.len()];
        for i in 0..n {
            push_record(
                &mut f,
                Kind::Action,
                &data(i as u64 + 10, &format!("line {i}\n")),
            );
            ends.push(f.len());
        }
        push_record(
            &mut f,
            Kind::Action,
            &envelope(
                99,
                StateAction::TerminalClaimed(TerminalClaimedAction { claim: claim("c2") }),
            ),
        );
        owner_record(
            &mut f,
            &Owner {
                holder: "c2".into(),
                renamed_by_client: true,
            },
        );
        push_record(
            &mut f,
            Kind::Action,
            &envelope(
                100,
                StateAction::TerminalExited(TerminalExitedAction { exit_code: Some(3) }),
            ),
        );
        ends.push(f.len());
        (f, ends)
    }

    #[test]
    fn a_whole_file_reads_back() {
        let (f, _) = sample(3);
        let (t, damage) = decode(&f);
        assert_eq!(damage, None);
        let t = t.unwrap();
        assert_eq!(t.valid_len, f.len());
        assert_eq!(text_of(&t), "seed\nline 0\nline 1\nline 2\n");
        assert_eq!(t.meta.holder, "c2");
        assert!(t.meta.renamed_by_client);
        assert_eq!(t.meta.state.claim, claim("c2"));
        assert_eq!(
            t.meta.state.lifecycle,
            TerminalLifecycleState::Exited(ahp_types::state::TerminalExitedLifecycleState {
                exit_code: Some(3)
            })
        );
        assert_eq!(t.meta.state.cols, Some(80));
    }

    #[test]
    fn a_large_part_is_split_and_joined() {
        let big: String = "é".repeat(PART_CHUNK_BYTES) + "x";
        let f = checkpoint(&meta(&big));
        let (records, damage) = scan(&f);
        assert!(damage.is_none());
        assert!(
            records
                .iter()
                .filter(|r| r.kind == Some(Kind::More))
                .count()
                >= 1
        );
        assert!(records
            .iter()
            .all(|r| r.payload.len() <= PART_CHUNK_BYTES + 200));
        let (t, _) = decode(&f);
        assert_eq!(text_of(&t.unwrap()), big);
    }

    /// Truncated at every offset: never a panic, the result is always a prefix of the whole
    /// output, it never shrinks as the cut moves on, and exactly the complete records are kept.
    #[test]
    fn truncation_at_every_offset_keeps_the_valid_prefix() {
        let (f, ends) = sample(20);
        let full = text_of(&decode(&f).0.unwrap());
        let mut last = 0;
        for cut in 0..=f.len() {
            let (t, damage) = decode(&f[..cut]);
            let Some(t) = t else {
                assert!(cut < ends[0], "metadata lost at {cut}");
                assert!(damage.is_some());
                continue;
            };
            if cut < ends[0] {
                // The metadata is complete, the checkpoint's content part is not.
                assert_eq!(text_of(&t), "", "cut {cut}");
                continue;
            }
            let text = text_of(&t);
            assert!(full.starts_with(&text), "cut {cut}: {text:?}");
            assert!(text.len() >= last, "cut {cut} shrank the prefix");
            last = text.len();
            assert!(t.valid_len <= cut);
            assert_eq!(damage.is_none(), t.valid_len == cut, "cut {cut}");
            // Each complete action record is kept.
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            let lines = complete.saturating_sub(1).min(20);
            let want: String = std::iter::once("seed\n".to_string())
                .chain((0..lines).map(|i| format!("line {i}\n")))
                .collect();
            assert_eq!(text, want, "cut {cut}");
        }
    }

    /// A byte flipped anywhere: never a panic, and what is read is a prefix of the output.
    #[test]
    fn a_flipped_byte_anywhere_keeps_a_prefix() {
        let (f, _) = sample(8);
        let full = text_of(&decode(&f).0.unwrap());
        for i in 0..f.len() {
            for bit in [0x01u8, 0x80] {
                let mut g = f.clone();
                g[i] ^= bit;
                let (t, damage) = decode(&g);
                if i >= HEADER_LEN {
                    assert!(damage.is_some(), "flip at {i} went unnoticed");
                }
                if let Some(t) = t {
                    assert!(full.starts_with(&text_of(&t)), "flip at {i}");
                    assert!(t.valid_len <= i.max(HEADER_LEN), "flip at {i}");
                }
            }
        }
    }

    #[test]
    fn garbage_after_the_end_is_set_aside() {
        let (f, _) = sample(4);
        let mut g = f.clone();
        g.extend_from_slice(b"\x07\x00\x00\x00garbage and more garbage");
        let (t, damage) = decode(&g);
        let t = t.unwrap();
        assert_eq!(t.valid_len, f.len());
        assert!(matches!(damage, Some(Damage::Checksum { at }) if at == f.len()));
        let mut g = f.clone();
        g.extend_from_slice(&[0xff; 12]);
        let (t, damage) = decode(&g);
        assert_eq!(t.unwrap().valid_len, f.len());
        assert!(matches!(damage, Some(Damage::Length { .. })));
    }

    #[test]
    fn headers_and_unknown_kinds() {
        assert!(matches!(decode(b"").1, Some(Damage::Header(_))));
        assert!(matches!(
            decode(b"NOTATRANSCRIPT!!xx").1,
            Some(Damage::Header(_))
        ));
        let mut f = checkpoint(&meta("a"));
        f[8] = 2;
        assert!(matches!(decode(&f).1, Some(Damage::Header(m)) if m.contains("format 2")));
        // A record of an unknown kind with a valid checksum is skipped.
        let mut f = checkpoint(&meta("a"));
        let mut rec = Vec::new();
        push_record(&mut rec, Kind::Part, b"{}");
        rec[8] = 200;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[200]);
        crc.update(b"{}");
        rec[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        f.extend_from_slice(&rec);
        push_record(&mut f, Kind::Action, &data(5, "b"));
        let (t, damage) = decode(&f);
        assert_eq!(damage, None);
        assert_eq!(text_of(&t.unwrap()), "ab");
        // An action that does not parse ends the valid prefix there.
        let mut f = checkpoint(&meta("a"));
        let at = f.len();
        push_record(&mut f, Kind::Action, b"{not json");
        let (t, damage) = decode(&f);
        assert_eq!(t.unwrap().valid_len, at);
        assert!(matches!(damage, Some(Damage::Content { at: a, .. }) if a == at));
    }
}
