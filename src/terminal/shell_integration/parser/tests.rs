//! The shell-integration parser against byte streams: every case is checked whole, split at
//! every byte and fed one byte at a time ([`check_splits`]), and compared with an independent
//! naive stripper over random concatenations.
//!
//! Touches nothing.

use super::*;
use crate::terminal::escape::MAX_SEQUENCE_BYTES;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

#[test]
fn signed_parser_trusts_only_marks_with_the_nonce() {
    let mut p = OutputParser::signed("n0nce".into());
    let mut out = Vec::new();
    p.feed(
        b"a\x1b]633;C\x07b\x1b]133;D;99\x07c\x1b]633;D;98\x07d\x1b]1337;CurrentDir=/x\x07e\
          \x1b]633;C;n0nce\x07f\x1b]633;D;3;n0nce\x07g\x1b]633;P;Cwd=/tmp;n0nce\x07h\
          \x1b]633;E;ls;n0nce\x07\x1b]633;A;n0nce\x07",
        &mut out,
    );
    let marks: Vec<Mark> = out
        .iter()
        .filter_map(|e| match e {
            Parsed::Mark(m) => Some(m.clone()),
            Parsed::Text(_) | Parsed::Query(_) => None,
        })
        .collect();
    assert_eq!(
        marks,
        [
            Mark::CommandExecuted,
            Mark::CommandFinished { exit_code: Some(3) },
            Mark::Cwd("/tmp".into()),
            Mark::CommandLine {
                command_line: "ls".into(),
                nonce_ok: true
            },
            Mark::PromptStart,
        ]
    );
    let text: String = out
        .iter()
        .filter_map(|e| match e {
            Parsed::Text(t) => Some(t.as_str()),
            Parsed::Mark(_) | Parsed::Query(_) => None,
        })
        .collect();
    assert_eq!(text, "abcdefgh");
}

const NONCE: &str = "n0nce";

/// Feeds `chunks` and returns merged events (adjacent texts joined) after `finish`.
fn run(chunks: &[&[u8]]) -> Vec<Parsed> {
    let mut p = OutputParser::new(NONCE.to_string());
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, &mut out);
    }
    p.finish(&mut out);
    normalize(out)
}

fn normalize(events: Vec<Parsed>) -> Vec<Parsed> {
    let mut v: Vec<Parsed> = Vec::new();
    for e in events {
        match (v.last_mut(), e) {
            (_, Parsed::Text(t)) if t.is_empty() => panic!("empty Text event"),
            (Some(Parsed::Text(a)), Parsed::Text(b)) => a.push_str(&b),
            (_, e) => v.push(e),
        }
    }
    v
}

fn text_of(events: &[Parsed]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Parsed::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn marks_of(events: &[Parsed]) -> Vec<Mark> {
    events
        .iter()
        .filter_map(|e| match e {
            Parsed::Mark(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

/// Unsplit, every two-way split and one byte per feed must agree.
fn check_splits(input: &[u8]) -> Vec<Parsed> {
    let whole = run(&[input]);
    for cut in 0..=input.len() {
        let (a, b) = input.split_at(cut);
        assert_eq!(run(&[a, b]), whole, "split at {cut} of {input:?}");
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(run(&bytes), whole, "byte at a time {input:?}");
    whole
}

fn osc633(body: &str) -> String {
    format!("\x1b]633;{body}\x07")
}

#[test]
fn plain_text_and_utf8_splits() {
    let ev = check_splits("aé😀─中".as_bytes());
    assert_eq!(ev, vec![Parsed::Text("aé😀─中".into())]);
}

#[test]
fn a_character_split_across_reads_survives_with_the_next_one() {
    let ev = run(&[&[0x42, 0xcc], &[0x81, 0x43, 0xe2, 0x94, 0x80]]);
    assert_eq!(text_of(&ev), "B\u{301}C─");
    let ev = run(&[&[0xc3], &[0xa9, 0x21]]);
    assert_eq!(text_of(&ev), "é!");
    check_splits(&[0x42, 0xcc, 0x81, 0x43, 0xe2, 0x94, 0x80]);
}

#[test]
fn invalid_utf8_becomes_one_replacement_per_maximal_subpart() {
    let input = b"a\xffb\xc0\x80c\xed\xa0\x80d\x9be\n";
    let ev = check_splits(input);
    assert_eq!(text_of(&ev), String::from_utf8_lossy(input));
    assert_eq!(
        text_of(&ev),
        "a\u{FFFD}b\u{FFFD}\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}d\u{FFFD}e\n"
    );
}

#[test]
fn a_partial_character_is_ended_by_esc_and_by_eof() {
    let ev = check_splits(b"\xd8\x1b[0m12\n");
    assert_eq!(text_of(&ev), "\u{FFFD}\x1b[0m12\n");
    // Text and the CSIs passed through as text are decoded as one run: the same.
    let ev = check_splits(b"a\x1b[1m\xe2\x94\x1b[0;31mb\xc3\xa9\x1b[K\xc3");
    assert_eq!(
        text_of(&ev),
        "a\x1b[1m\u{FFFD}\x1b[0;31mb\u{e9}\x1b[K\u{FFFD}"
    );
    let ev = run(&[b"\xe2\x94"]);
    assert_eq!(ev, vec![Parsed::Text("\u{FFFD}".into())]);
    // A partial char before a stripped sequence is not glued to bytes after it.
    let ev = check_splits(b"\xe2\x94\x1b]633;A\x07\x80");
    assert_eq!(text_of(&ev), "\u{FFFD}\u{FFFD}");
}

#[test]
fn sequences_split_across_reads_are_reassembled() {
    let ev = run(&[
        b"\x1b]63",
        b"3;D;1",
        b"30\x07",
        b"\x1b[",
        b"31mred\x1b[0m\n",
    ]);
    assert_eq!(
        ev,
        vec![
            Parsed::Mark(Mark::CommandFinished {
                exit_code: Some(130)
            }),
            Parsed::Text("\x1b[31mred\x1b[0m\n".into()),
        ]
    );
    check_splits(b"\x1b]633;D;130\x07\x1b[31mred\x1b[0m\n");
}

#[test]
fn a_full_command_cycle_byte_at_a_time() {
    let input = format!(
        "{}$ {}{}{}out\r\n{}",
        osc633("A"),
        osc633("B"),
        osc633(&format!("E;ls\\x20-l;{NONCE}")),
        osc633("C"),
        osc633("D;0")
    );
    let ev = check_splits(input.as_bytes());
    assert_eq!(
        ev,
        vec![
            Parsed::Mark(Mark::PromptStart),
            Parsed::Text("$ ".into()),
            Parsed::Mark(Mark::CommandStart),
            Parsed::Mark(Mark::CommandLine {
                command_line: "ls -l".into(),
                nonce_ok: true
            }),
            Parsed::Mark(Mark::CommandExecuted),
            Parsed::Text("out\r\n".into()),
            Parsed::Mark(Mark::CommandFinished { exit_code: Some(0) }),
        ]
    );
}

#[test]
fn bel_and_st_both_terminate_an_osc() {
    for input in [
        &b"\x1b]633;A\x07X"[..],
        b"\x1b]633;A\x1b\\X",
        b"\x1b]133;A\x1b\\X",
    ] {
        let ev = check_splits(input);
        assert_eq!(
            ev,
            vec![Parsed::Mark(Mark::PromptStart), Parsed::Text("X".into())]
        );
    }
    let ev = run(&[b"\x1b]633;A\x1b", b"\\X"]);
    assert_eq!(
        ev,
        vec![Parsed::Mark(Mark::PromptStart), Parsed::Text("X".into())]
    );
    // Mixed terminators in one stream.
    let ev = check_splits(b"\x1b]633;A\x07p\x1b]633;B\x1b\\q\x1b]133;C\x07r\x1b]633;D;2\x1b\\");
    assert_eq!(text_of(&ev), "pqr");
    assert_eq!(marks_of(&ev).len(), 4);
}

#[test]
fn osc_ended_by_esc_without_backslash() {
    // ESC ends the OSC (as in vte); the ESC starts the next sequence.
    let ev = check_splits(b"\x1b]633;A\x1b[1mB");
    assert_eq!(
        ev,
        vec![
            Parsed::Mark(Mark::PromptStart),
            Parsed::Text("\x1b[1mB".into())
        ]
    );
    let ev = check_splits(b"\x1b]0;t\x1b[1mB");
    assert_eq!(text_of(&ev), "\x1b]0;t\x1b[1mB");
    assert_eq!(marks_of(&ev), vec![Mark::Title("t".into())]);
}

#[test]
fn unterminated_sequences_are_released_or_dropped_at_eof() {
    // Unterminated title at EOF is released verbatim.
    let ev = run(&[b"\x1b]0;abc", b"hello"]);
    assert_eq!(text_of(&ev), "\x1b]0;abchello");
    // A title absorbs text until its BEL, then output continues.
    let ev = run(&[b"\x1b]0;abc", b"hello", b"\x07after"]);
    assert_eq!(text_of(&ev), "\x1b]0;abchello\x07after");
    // Unterminated integration OSC at EOF is dropped.
    let ev = run(&[b"x\x1b]633;E;abc"]);
    assert_eq!(text_of(&ev), "x");
}

#[test]
fn an_oversize_integration_osc_is_dropped_whole() {
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    p.feed(b"\x1b]633;E;", &mut out);
    let chunk = vec![b'a'; 64 * 1024];
    for _ in 0..40 {
        p.feed(&chunk, &mut out);
        assert!(p.framer.held_bytes() <= MAX_SEQUENCE_BYTES + 1);
    }
    p.feed(b"\x07visible\n", &mut out);
    p.finish(&mut out);
    let ev = normalize(out);
    assert_eq!(ev, vec![Parsed::Text("visible\n".into())]);
    // ST-terminated variant, terminator split.
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    p.feed(b"\x1b]133;A", &mut out);
    p.feed(&vec![b'z'; MAX_SEQUENCE_BYTES + 10], &mut out);
    p.feed(b"\x1b", &mut out);
    p.feed(b"\\ok", &mut out);
    p.finish(&mut out);
    assert_eq!(normalize(out), vec![Parsed::Text("ok".into())]);
}

#[test]
fn an_oversize_foreign_osc_streams_through_verbatim() {
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    let mut expected = b"\x1b]1337;File=x:".to_vec();
    p.feed(&expected.clone(), &mut out);
    let chunk = vec![b'Q'; 100_000];
    for _ in 0..30 {
        p.feed(&chunk, &mut out);
        expected.extend_from_slice(&chunk);
        assert!(p.framer.held_bytes() <= MAX_SEQUENCE_BYTES + 1);
    }
    p.feed(b"\x07\x1b]633;A\x07tail", &mut out);
    expected.extend_from_slice(b"\x07tail");
    p.finish(&mut out);
    let ev = normalize(out);
    assert_eq!(text_of(&ev).as_bytes(), &expected[..]);
    assert_eq!(marks_of(&ev), vec![Mark::PromptStart]);
}

#[test]
fn oversize_dcs_and_csi() {
    let mut input = b"\x1bPq".to_vec();
    input.extend(std::iter::repeat_n(b'#', MAX_SEQUENCE_BYTES + 5));
    input.extend_from_slice(b"\x1b\\done");
    let ev = run(&[&input]);
    assert_eq!(text_of(&ev).as_bytes(), &input[..]);
    let mut input = b"\x1b[".to_vec();
    input.extend(std::iter::repeat_n(b'1', MAX_SEQUENCE_BYTES + 5));
    input.extend_from_slice(b"mdone");
    let ev = run(&[&input]);
    assert_eq!(text_of(&ev).as_bytes(), &input[..]);
}

#[test]
fn semicolons_stay_in_the_command_line_and_only_the_last_field_is_the_nonce() {
    let ev = check_splits(osc633(&format!("E;a;b;c;{NONCE}")).as_bytes());
    assert_eq!(
        marks_of(&ev),
        vec![Mark::CommandLine {
            command_line: "a;b;c".into(),
            nonce_ok: true
        }]
    );
    let fields: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let line = fields.join(";");
    let ev = run(&[osc633(&format!("E;{line}")).as_bytes()]);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::CommandLine {
            command_line: line.clone(),
            nonce_ok: false
        }]
    );
    let ev = run(&[osc633(&format!("E;{line};{NONCE}")).as_bytes()]);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::CommandLine {
            command_line: line,
            nonce_ok: true
        }]
    );
}

#[test]
fn command_line_escapes_are_decoded_in_one_pass() {
    let cases = [
        ("E;echo\\x20a\\x3bb", "echo a;b"),
        ("E;a\\\\x3bb", "a\\x3bb"),
        ("E;C:\\x5cUsers\\x5calice", "C:\\Users\\alice"),
        ("E;x\\x3Bz", "x;z"),
        ("E;bad\\xZZ", "bad\\xZZ"),
        ("E;tail\\", "tail\\"),
        ("E;\\xe2\\x9c\\x93 \\xff", "✓ \u{FFFD}"),
    ];
    for (body, want) in cases {
        let ev = run(&[osc633(body).as_bytes()]);
        assert_eq!(
            marks_of(&ev),
            vec![Mark::CommandLine {
                command_line: want.into(),
                nonce_ok: false
            }],
            "{body}"
        );
    }
    let ev = run(&[osc633("P;Cwd=/srv/a=b").as_bytes()]);
    assert_eq!(marks_of(&ev), vec![Mark::Cwd("/srv/a=b".into())]);
    let ev = run(&[osc633("P;Cwd=/srv/semi\\x3bcolon").as_bytes()]);
    assert_eq!(marks_of(&ev), vec![Mark::Cwd("/srv/semi;colon".into())]);
    let ev = run(&[osc633("P;HasRichCommandDetection=True").as_bytes()]);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::Property {
            key: "HasRichCommandDetection".into(),
            value: "True".into()
        }]
    );
}

#[test]
fn exit_codes_are_32_bit_integers_or_absent() {
    let cases: [(&str, Option<i64>); 7] = [
        ("D", None),
        ("D;130", Some(130)),
        ("D;abc", None),
        ("D;-1", Some(-1)),
        ("D;1;aid=42", Some(1)),
        ("D;99999999999", None),
        ("D;", None),
    ];
    for (body, want) in cases {
        for num in ["633", "133"] {
            let seq = format!("\x1b]{num};{body}\x07");
            let ev = run(&[seq.as_bytes()]);
            assert_eq!(
                ev,
                vec![Parsed::Mark(Mark::CommandFinished { exit_code: want })],
                "{seq:?}"
            );
        }
    }
}

#[test]
fn osc7_and_cwd_reports_become_paths() {
    let cases = [
        (
            "\x1b]7;file://myhost/home/u/My%20Dir/%E2%9C%93\x1b\\",
            "/home/u/My Dir/✓",
        ),
        ("\x1b]7;file:///srv/a+b\x07", "/srv/a+b"),
        ("\x1b]7;file://host/srv/%ZZ\x07", "/srv/%ZZ"),
        ("\x1b]7;file:///srv/%FF\x07", "/srv/\u{FFFD}"),
        ("\x1b]1337;CurrentDir=/x/y\x07", "/x/y"),
    ];
    for (seq, want) in cases {
        let ev = check_splits(seq.as_bytes());
        assert_eq!(marks_of(&ev), vec![Mark::Cwd(want.into())], "{seq:?}");
        let passes = seq.starts_with("\x1b]7;");
        assert_eq!(text_of(&ev), if passes { seq } else { "" }, "{seq:?}");
    }
    // Not a file URI: passed, no mark.
    let ev = run(&[b"\x1b]7;http://x/y\x07"]);
    assert!(marks_of(&ev).is_empty());
}

#[test]
fn titles_are_sanitized_capped_and_passed_through() {
    let input = b"\x1b]0;quote\" back\\ ctl\x01 bad\xff\x07";
    let ev = check_splits(input);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::Title("quote\" back\\ ctl bad\u{FFFD}".into())]
    );
    assert_eq!(text_of(&ev), String::from_utf8_lossy(input));
    let long = format!("\x1b]2;{}\x07", "t".repeat(100_000));
    let ev = run(&[long.as_bytes()]);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::Title("t".repeat(MAX_TITLE_CHARS))]
    );
    assert_eq!(text_of(&ev), long);
    let ev = check_splits(b"\x1b]112\x07next");
    assert_eq!(ev, vec![Parsed::Text("\x1b]112\x07next".into())]);
    // OSC 1 (icon name) is not a title.
    let ev = run(&[b"\x1b]1;icon\x07"]);
    assert!(marks_of(&ev).is_empty());
}

#[test]
fn foreign_sequences_untouched() {
    let inputs: [&[u8]; 12] = [
        b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
        b"\x1b]52;c;aGVsbG8=\x07",
        b"\x1b]1337;SetUserVar=a=b\x07",
        b"\x1bP1$r0m\x1b\\",
        b"\x1b_Gf=100;AAAA\x1b\\",
        b"\x1b^pm\x1b\\\x1bXsos\x1b\\",
        b"\x1b7\x1b8\x1b(B\x1b#8\x1bc",
        b"\x1b[?1049h\x1b[2J\x1b[1;1H\x1b[38;2;1;2;3m\x1b[>4;2m",
        b"\x1b[1\n2m",
        b"\x1b[1$}x\x1b[?1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;21;22;23;24;25;26;27;28;29;30;31;32;33h",
        b"\r\n\t\x08\x07\x00\x7f\x1b\x1b[A\x1b\x18x\x1b]0;a\x18b",
        b"\x1b]6330;x\x07\x1b]13;y\x07\x1b]1337;CurrentDirX=1\x07",
    ];
    for input in inputs {
        let ev = check_splits(input);
        assert_eq!(text_of(&ev).as_bytes(), input, "{input:?}");
    }
}

fn queries_of(ev: &[Parsed]) -> Vec<Query> {
    ev.iter()
        .filter_map(|e| match e {
            Parsed::Query(q) => Some(q.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn queries_are_cut_and_reported_in_order() {
    let input = b"a\x1b[6nb\x1b[?6nc\x1b[cd\x1b[>0ce\x1b]11;?\x1b\\f\x1b]10;?\x07g\x1bZh\
                  \x1b[5ni\x1bP$qm\x1b\\j\x1b[18tk\x1b[?u\x1b]4;1;?\x07l";
    let ev = check_splits(input);
    assert_eq!(text_of(&ev), "abcdefghijkl");
    assert_eq!(
        queries_of(&ev),
        [
            Query::CursorPosition { extended: false },
            Query::CursorPosition { extended: true },
            Query::PrimaryAttributes,
            Query::SecondaryAttributes,
            Query::Color {
                which: 11,
                bell: false
            },
            Query::Color {
                which: 10,
                bell: true
            },
            Query::PrimaryAttributes,
            Query::Status,
            Query::Unanswered,
            Query::WindowSize { op: 18 },
            Query::Unanswered,
            Query::Unanswered,
        ]
    );
    // Text before a query comes before it.
    assert_eq!(
        run(&[b"ab\x1b[6", b"ncd"]),
        vec![
            Parsed::Text("ab".into()),
            Parsed::Query(Query::CursorPosition { extended: false }),
            Parsed::Text("cd".into()),
        ]
    );
}

#[test]
fn mode_reports_follow_the_output() {
    let ev = check_splits(b"\x1b[?2004$p\x1b[?2004h\x1b[?2004$p\x1b[4h\x1b[4$p\x1b[?77$p");
    assert_eq!(text_of(&ev), "\x1b[?2004h\x1b[4h");
    let reports: Vec<u8> = queries_of(&ev)
        .iter()
        .map(|q| match q {
            Query::Mode { report, .. } => *report,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(reports, [2, 1, 1, 0]);
}

#[test]
fn integration_osc_cancelled_by_can() {
    let ev = check_splits(b"a\x1b]633;A\x18b");
    assert_eq!(ev, vec![Parsed::Text("a\x18b".into())]);
}

#[test]
fn other_integration_letters_stripped() {
    let input = b"1\x1b]633;F\x072\x1b]633;SetMark;Id=3\x073\x1b]633;EnvJson;{}\x07\x1b]1337;ShellIntegrationVersion=5\x07\x1b]1337;RemoteHost=a@b\x074\x1b]133;L\x07";
    let ev = check_splits(input);
    assert_eq!(ev, vec![Parsed::Text("1234".into())]);
}

#[test]
fn spoofed_command_line_not_trusted() {
    // What `cat` of a file holding a forged E mark would print.
    let ev = run(&[osc633("E;rm -rf /;wrongnonce").as_bytes()]);
    assert_eq!(
        marks_of(&ev),
        vec![Mark::CommandLine {
            command_line: "rm -rf /;wrongnonce".into(),
            nonce_ok: false
        }]
    );
    // An empty nonce never trusts.
    let mut p = OutputParser::new(String::new());
    let mut out = Vec::new();
    p.feed(b"\x1b]633;E;x;\x07", &mut out);
    assert_eq!(
        out,
        vec![Parsed::Mark(Mark::CommandLine {
            command_line: "x;".into(),
            nonce_ok: false
        })]
    );
}

#[test]
fn text_before_mark_comes_first_within_one_feed() {
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    p.feed(b"abc\x1b]633;C\x07def", &mut out);
    assert_eq!(
        out,
        vec![
            Parsed::Text("abc".into()),
            Parsed::Mark(Mark::CommandExecuted),
            Parsed::Text("def".into()),
        ]
    );
}

/// Removes integration OSCs from `input` by a naive independent method, for comparison.
fn reference_strip(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let rest = &input[i..];
        let is_si = [&b"\x1b]633;"[..], b"\x1b]133;"]
            .iter()
            .any(|p| rest.starts_with(p));
        if is_si {
            // Find BEL or ESC; ESC \ is consumed whole.
            let body = &rest[2..];
            match body.iter().position(|&b| b == BEL || b == ESC) {
                Some(j) if body[j] == BEL => i += 2 + j + 1,
                Some(j) if body.get(j + 1) == Some(&b'\\') => i += 2 + j + 2,
                Some(j) => i += 2 + j,
                None => break,
            }
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn byte_exact_over_many_vectors() {
    let pieces: [&[u8]; 14] = [
        b"hello ",
        "wörld ✓ ".as_bytes(),
        b"\x1b[31m",
        b"\x1b[0m",
        b"\x1b]0;title\x07",
        b"\x1b]2;t2\x1b\\",
        b"\x1b]633;A\x07",
        b"\x1b]633;B\x1b\\",
        b"\x1b]633;E;ls\\x20-la;n0nce\x07",
        b"\x1b]133;C\x07",
        b"\x1b]633;D;0\x1b\\",
        b"\x1b]7;file:///tmp\x07",
        b"\x1bPq#0;2;0;0;0\x1b\\",
        b"\r\n",
    ];
    // Deterministic pseudo-random concatenations.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..60 {
        let mut input = Vec::new();
        for _ in 0..8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            input.extend_from_slice(pieces[(seed % pieces.len() as u64) as usize]);
        }
        let ev = check_splits(&input);
        assert_eq!(
            text_of(&ev).as_bytes(),
            &reference_strip(&input)[..],
            "{input:?}"
        );
        assert!(!text_of(&ev).contains("\x1b]633"));
        assert!(!text_of(&ev).contains("\x1b]133"));
    }
}

#[test]
fn random_bytes_never_panic_and_splits_agree() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let alphabet: &[u8] = b"\x1b\x07\x18\x9c\\[]P_X^;0123456789ABCDE:?$ a\xc3\xa9\xe2\x94\x80\xff";
    for _ in 0..200 {
        let mut input = Vec::new();
        for _ in 0..40 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            input.push(alphabet[(seed % alphabet.len() as u64) as usize]);
        }
        let ev = check_splits(&input);
        for e in &ev {
            if let Parsed::Text(t) = e {
                assert!(!t.contains("\x1b]633;") && !t.contains("\x1b]133;"));
            }
        }
    }
}

fn run_parts(p: &mut OutputParser, parts: &[&[u8]]) -> Vec<Parsed> {
    let mut out = Vec::new();
    for part in parts {
        p.feed(part, &mut out);
    }
    p.finish(&mut out);
    out
}

#[test]
fn suspend_and_resume_at_any_byte_equals_the_unsplit_stream() {
    let mut oversize_osc = b"a\x1b]2;".to_vec();
    oversize_osc.extend(std::iter::repeat_n(b'x', MAX_SEQUENCE_BYTES + 10));
    oversize_osc.extend_from_slice(b"\x07b\xc3\xa9");
    let mut oversize_integration = b"a\x1b]633;E;".to_vec();
    oversize_integration.extend(std::iter::repeat_n(b'y', MAX_SEQUENCE_BYTES + 10));
    oversize_integration.extend_from_slice(b"\x1b\\b");
    let small: [&[u8]; 5] = [
        "héllo wörld ✓ 😀\r\n".as_bytes(),
        b"x\x1b[1;31mred\x1b[0m\x1b]0;title\x07y",
        b"\x1b]633;E;ls -l;n0nce\x1b\\\x1b]633;C;n0nce\x07out\x1b]633;D;0;n0nce\x07",
        b"\x1bP1$qm\x1b\\z\x1b_apc\x1b\\\xe2\x82",
        b"\x1b]7;file://h/tmp\x1b\\\x1b]1337;CurrentDir=/x\x07end\xff",
    ];
    let check = |input: &[u8], at: usize| {
        let whole = normalize(run_parts(
            &mut OutputParser::signed("n0nce".into()),
            &[input],
        ));
        let mut first = OutputParser::signed("n0nce".into());
        let mut out = Vec::new();
        first.feed(&input[..at], &mut out);
        let carry = first.suspend();
        let carry: ParserCarry =
            serde_json::from_str(&serde_json::to_string(&carry).unwrap()).unwrap();
        let mut second = OutputParser::signed("n0nce".into());
        second.resume(&carry);
        out.extend(run_parts(&mut second, &[&input[at..]]));
        assert_eq!(
            normalize(out),
            whole,
            "split at {at} of {:?}",
            String::from_utf8_lossy(&input[..input.len().min(60)])
        );
    };
    for input in small {
        for at in 0..=input.len() {
            check(input, at);
        }
    }
    for input in [&oversize_osc, &oversize_integration] {
        for at in [
            3,
            8,
            9,
            100,
            MAX_SEQUENCE_BYTES + 5,
            MAX_SEQUENCE_BYTES + 9,
            MAX_SEQUENCE_BYTES + 12,
            input.len() - 2,
            input.len() - 1,
        ] {
            check(input, at);
        }
    }
}

#[test]
fn colour_queries_of_any_length_are_removed_whole() {
    // Under the sequence limit (answered, at most once per colour) and past it (dropped):
    // neither leaves a byte of text, and what follows passes.
    for (fields, answered) in [(100_000, 2), (600_000, 0)] {
        let mut input = b"\x1b]11".to_vec();
        input.extend_from_slice(";?".repeat(fields).as_bytes());
        input.extend_from_slice(b"\x07after");
        let chunks: Vec<&[u8]> = input.chunks(4096).collect();
        let out = run(&chunks);
        assert_eq!(text_of(&out), "after", "{fields} fields");
        let queries = out.iter().filter(|e| matches!(e, Parsed::Query(_))).count();
        assert_eq!(queries, answered, "{fields} fields");
    }
}
