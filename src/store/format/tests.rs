//! Unit tests of [`super`] (format.rs): the cases it must handle, read as its specification.

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

/// A checkpoint as the first version wrote it: each part's JSON carrying up to
/// [`PART_CHUNK_BYTES`] of its text (escaped), the rest in `more` records.
fn old_checkpoint(meta: &Meta) -> Vec<u8> {
    let mut out = header().to_vec();
    let mut bare = meta.clone();
    bare.state.content.clear();
    push_json(&mut out, Kind::Meta, &bare);
    for part in &meta.state.content {
        let text = match part {
            TerminalContentPart::Unclassified(u) => u.value.as_str(),
            TerminalContentPart::Command(c) => c.output.as_str(),
            TerminalContentPart::Unknown(_) => "",
        };
        let mut cut = text.len().min(PART_CHUNK_BYTES);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut head = part.clone();
        match &mut head {
            TerminalContentPart::Unclassified(u) => u.value.truncate(cut),
            TerminalContentPart::Command(c) => c.output.truncate(cut),
            TerminalContentPart::Unknown(_) => {}
        }
        push_json(&mut out, Kind::Part, &head);
        let mut rest = &text[cut..];
        while !rest.is_empty() {
            let mut n = rest.len().min(PART_CHUNK_BYTES);
            while !rest.is_char_boundary(n) {
                n -= 1;
            }
            push_record(&mut out, Kind::More, &rest.as_bytes()[..n]);
            rest = &rest[n..];
        }
    }
    out
}

/// Several MiB of content in two parts, with 2-, 3- and 4-byte characters straddling
/// every chunk edge, quotes, backslashes and control characters JSON would escape.
fn big_meta() -> Meta {
    let mut m = meta("");
    let edgy = |prefix: &str, ch: &str, bytes: usize| {
        let mut s = String::from(prefix);
        while s.len() < bytes {
            s.push_str(ch);
            s.push_str("\"\\\u{1b}[0m\n");
        }
        s
    };
    m.state.content = vec![
        TerminalContentPart::Unclassified(TerminalUnclassifiedPart {
            value: edgy("x", "é", 3 * PART_CHUNK_BYTES + 17),
        }),
        TerminalContentPart::Command(ahp_types::state::TerminalCommandPart {
            command_id: "c1".into(),
            command_line: "cat \"big file\"".into(),
            output: edgy("ab", "😀€", 2 * PART_CHUNK_BYTES + 5),
            timestamp: 1_700_000_000_123,
            is_complete: true,
            exit_code: Some(0),
            duration_ms: Some(12),
        }),
        TerminalContentPart::Unclassified(TerminalUnclassifiedPart { value: "$ ".into() }),
        TerminalContentPart::Unclassified(TerminalUnclassifiedPart {
            value: String::new(),
        }),
    ];
    m
}

/// Accepts at most 1000 bytes of the first two slices per call: `write_to` must carry
/// on where a short write stopped.
struct Dribble(Vec<u8>);

impl std::io::Write for Dribble {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(1000);
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let mut n = 0;
        for b in bufs.iter().take(2) {
            let k = b.len().min(1000 - n);
            self.0.extend_from_slice(&b[..k]);
            n += k;
            if k < b.len() {
                break;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_part_of_several_mib_reads_back_equal_without_escaping() {
    let m = big_meta();
    let c = Checkpoint::new(&m);
    let f = c.to_vec();
    assert_eq!(f.len(), c.len());
    let mut d = Dribble(Vec::new());
    c.write_to(&mut d).unwrap();
    assert_eq!(d.0, f, "a vectored write with short writes");
    let (records, damage) = scan(&f);
    assert_eq!(damage, None);
    // The text is in `more` records only, raw: each part's JSON is small, and the file is
    // the text plus a few hundred bytes (escaping would have added about 15 %).
    for r in &records {
        match r.kind {
            Some(Kind::Part) => assert!(r.payload.len() < 200, "{}", r.payload.len()),
            Some(Kind::More) => {
                assert!(r.payload.len() <= PART_CHUNK_BYTES);
                assert!(std::str::from_utf8(r.payload).is_ok());
            }
            _ => {}
        }
    }
    let text: usize = m
        .state
        .content
        .iter()
        .map(|p| match p {
            TerminalContentPart::Unclassified(u) => u.value.len(),
            TerminalContentPart::Command(c) => c.output.len(),
            TerminalContentPart::Unknown(_) => 0,
        })
        .sum();
    assert!(
        f.len() < text + 1024,
        "{} bytes for {text} of text",
        f.len()
    );
    let (t, damage) = decode(&f);
    assert_eq!(damage, None);
    let t = t.unwrap();
    assert_eq!(t.valid_len, f.len());
    assert_eq!(t.meta, m);
}

#[test]
fn a_checkpoint_written_the_old_way_still_reads() {
    for m in [big_meta(), meta("seed\n"), meta("")] {
        let old = old_checkpoint(&m);
        // Without content the two ways write the same bytes.
        assert_eq!(old == checkpoint(&m), m.state.content.is_empty());
        let (t, damage) = decode(&old);
        assert_eq!(damage, None);
        assert_eq!(t.unwrap().meta, m);
    }
    // And records appended to it apply as to a new one.
    let mut old = old_checkpoint(&meta("seed\n"));
    push_record(&mut old, Kind::Action, &data(10, "more\n"));
    let (t, _) = decode(&old);
    assert_eq!(text_of(&t.unwrap()), "seed\nmore\n");
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
