//! The query filter on whole streams and on every split of them.

use super::*;

/// `text` through a fresh filter in one chunk.
fn whole(text: &str, allow: bool) -> String {
    QueryFilter::new(allow).filter(text)
}

/// Asserts that every split of `text` into two chunks (on character boundaries), and the
/// split into single characters, give what the whole does.
fn same_in_pieces(text: &str, allow: bool) {
    let want = whole(text, allow);
    for (i, _) in text.char_indices().skip(1) {
        let mut f = QueryFilter::new(allow);
        let got = f.filter(&text[..i]) + &f.filter(&text[i..]);
        assert_eq!(got, want, "split at {i} of {text:?}");
    }
    let mut f = QueryFilter::new(allow);
    let got: String = text.chars().map(|c| f.filter(&c.to_string())).collect();
    assert_eq!(got, want, "one character at a time: {text:?}");
}

const KEPT: &[&str] = &[
    "plain text\r\n",
    "\x1b[1;31mred\x1b[0m",
    "\x1b[?1049h\x1b[?25l\x1b[2;20r\x1b[5 q\x1b[H\x1b[2J",
    "\x1b]0;a title\x07",
    "\x1b]2;?\x1b\\",
    "\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
    "\x1b]7;file:///tmp\x07",
    "\x1b]133;D;0\x07",
    "\x1b]10;#ffffff\x07",
    "\x1b(B\x1b)0\x1b#8\x1b7\x1b8\x1b=\x1b>",
    "\x1bP1$r0m\x1b\\",
    "\x1bPq#0;2;0;0;0#0~~\x1b\\",
    "\x1b_Ga=T,q=2;AAAA\x1b\\",
    "\x1b[>1u\x1b[<u\x1b[>4;1m\x1b[8;24;80t\x1b[22;0t",
    "\u{9b}1m\u{9d}0;t\u{9c}",
    "tab\there, é ü 漢字 🙂",
    "\x1b]010;#ffffff\x07",
    "\x1b]0\x01;a title\x07",
    "\x1b]99;i=1:d=0;Hello?\x1b\\",
    "\x1b]21;foreground=red;background=#000000\x1b\\",
    "\x1b_Gq=0,a=T,q=2;AAAA\x1b\\",
    "\x1bP+p544e\x1b\\",
    "\x1b[1#P\x1b[1'{",
];

const REMOVED: &[&str] = &[
    "\x1b]52;c;aGVsbG8=\x07",
    "\x1b]52;c;?\x1b\\",
    "\x1b]50;?\x07",
    "\x1b]50;fixed\x07",
    "\x1b]4;1;?\x07",
    "\x1b]4;1;rgb:00/00/00;2;?\x1b\\",
    "\x1b]10;?\x07",
    "\x1b]11;?\x1b\\",
    "\x1b]12;?\x07",
    "\x1b]17;?\x07",
    "\x1b]60\x07",
    "\x1b]1337;ReportCellSize\x07",
    "\x1b]1337;Copy=:aGk=\x07",
    "\x1b]5522;type=write;aGk=\x1b\\",
    "\x1bP$qm\x1b\\",
    "\x1bP$q\"p\x1b\\",
    "\x1bP+q544e\x1b\\",
    "\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\",
    "\x1b_Ga=q,i=1;AAAA\x1b\\",
    "\x1b[5n",
    "\x1b[6n",
    "\x1b[?6n",
    "\x1b[?996n",
    "\x1b[c",
    "\x1b[0c",
    "\x1b[>c",
    "\x1b[>0c",
    "\x1b[=c",
    "\x1b[>q",
    "\x1b[>0q",
    "\x1b[?2004$p",
    "\x1b[4$p",
    "\x1b[14t",
    "\x1b[18t",
    "\x1b[21t",
    "\x1b[x",
    "\x1b[?4m",
    "\x1b[?u",
    "\x1b[?1;1S",
    "\x1b[1$w",
    "\x1b[1$u",
    "\x1b[&u",
    "\x1b[\"v",
    "\x1b[1;1;1;1;1;1*y",
    "\x1bZ",
    "\x05",
    "\u{9b}6n",
    "\u{9d}52;c;aGk=\u{9c}",
    "\u{90}$qm\u{9c}",
    // The number as emulators read it: C0 controls inside it skipped, leading zeros.
    "\x1b]5\x012;c;aGk=\x07",
    "\x1b]5\x002\x1f;c;aGk=\x1b\\",
    "\x1b]\x1052;c;aGk=\x07",
    "\x1b]052;c;aGk=\x07",
    "\x1b]00052;c;aGk=\x07",
    "\x1b]050;?\x07",
    "\x1b]5\x080;?\x07",
    "\x1b]060\x07",
    "\x1b]01337;Copy=:aGk=\x07",
    "\x1b]1\x19337;Copy=:aGk=\x07",
    "\x1b]52;c;\x01?\x07",
    "\u{9d}052;c;aGk=\u{9c}",
    // A number no emulator reads the same way: dropped when in doubt.
    "\x1b]5x2;c;aGk=\x07",
    "\x1b];c;aGk=\x07",
    "\x1b]99999999999;c;aGk=\x07",
    "\x1b]5\x7f2;c;aGk=\x07",
    // XTGETXRES, XTREPORTCOLORS, DECRQLP.
    "\x1bP+Q666f6e74\x1b\\",
    "\x1b[#R",
    "\x1b[1'|",
    "\x1b['|",
    // kitty graphics: the last `q` wins.
    "\x1b_Ga=T,q=2,q=0;AAAA\x1b\\",
    "\x1b_Ga=q,q=1;AAAA\x1b\\",
    "\x1b_Ga=q,q=x;AAAA\x1b\\",
    "\x1b_G\x01a=q;AAAA\x1b\\",
    // kitty's OSC 99 and OSC 21 queries.
    "\x1b]99;i=1:p=?;\x1b\\",
    "\x1b]099;p=?\x07",
    "\x1b]21;foreground=?\x1b\\",
    "\x1b]21;background=#000000;cursor=?\x07",
];

#[test]
fn what_passes_passes_unchanged() {
    for t in KEPT {
        assert_eq!(whole(t, false), *t, "{t:?}");
        same_in_pieces(t, false);
    }
}

#[test]
fn queries_and_clipboard_writes_go_whole() {
    for t in REMOVED {
        let text = format!("a{t}b");
        assert_eq!(whole(&text, false), "ab", "{t:?}");
        same_in_pieces(&text, false);
    }
}

#[test]
fn allow_clipboard_keeps_writes_only() {
    for t in [
        "\x1b]52;c;aGVsbG8=\x07",
        "\x1b]52;;aGk=\x1b\\",
        "\x1b]1337;Copy=:aGk=\x07",
        "\x1b]5522;type=write;aGk=\x1b\\",
    ] {
        assert_eq!(whole(t, true), t, "{t:?}");
        same_in_pieces(t, true);
    }
    for t in [
        "\x1b]52;c;?\x07",
        "\x1b]5522;type=read\x1b\\",
        "\x1b]50;?\x07",
        "\x1b[c",
    ] {
        assert_eq!(whole(t, true), "", "{t:?}");
    }
}

#[test]
fn leading_zeros_keep_an_allowed_clipboard_write() {
    for t in ["\x1b]052;c;aGk=\x07", "\x1b]5\x012;c;aGk=\x07"] {
        assert_eq!(whole(t, true), t, "{t:?}");
        same_in_pieces(t, true);
    }
    for t in ["\x1b]052;c;?\x07", "\x1b]52;c;\x01?\x07", "\x1b]050;?\x07"] {
        assert_eq!(whole(t, true), "", "{t:?}");
    }
}

#[test]
fn a_long_osc_99_is_judged_on_its_metadata() {
    let body = "x".repeat(4 * STRING_HEAD);
    let kept = format!("\x1b]99;i=1;{body}\x07");
    assert_eq!(whole(&kept, false), kept);
    let asks = format!("\x1b]99;i=1:p=?;{body}\x07");
    assert_eq!(whole(&asks, false), "");
    // A number longer than the head is no number yet: dropped.
    let digits = format!("\x1b]{}52;c;aGk=\x07ok", "0".repeat(2 * STRING_HEAD));
    assert_eq!(whole(&digits, false), "ok");
}

#[test]
fn a_mixed_stream_keeps_its_text_in_every_split() {
    let text = "$ vim\r\n\x1b[?1049h\x1b[c\x1b]11;?\x07\x1b[?2004h\x1b]52;c;eA==\x07\
                é\x1bP$qr\x1b\\\x1b[6n\x1b]0;vim\x07~\r\n\x1b[?1049l";
    let want = "$ vim\r\n\x1b[?1049h\x1b[?2004hé\x1b]0;vim\x07~\r\n\x1b[?1049l";
    assert_eq!(whole(text, false), want);
    same_in_pieces(text, false);
}

#[test]
fn an_aborted_string_is_judged_and_what_follows_read_afresh() {
    // ESC not followed by `\` ends the OSC; the CSI after it is judged on its own.
    assert_eq!(whole("\x1b]52;c;aGk=\x1b[6nX", false), "X");
    assert_eq!(whole("\x1b]0;t\x1b[1mX", false), "\x1b]0;t\x1b[1mX");
    // A C1 CSI inside a DCS ends it too.
    assert_eq!(whole("\x1bPq\u{9b}6nX", false), "\x1bPqX");
    // CAN cancels a CSI.
    assert_eq!(whole("\x1b[6\x18X", false), "\x18X");
    // Controls inside a CSI are executed: they stay.
    assert_eq!(whole("\x1b[6\r\nn", false), "\r\n");
    // ENQ inside a kept string is removed all the same.
    assert_eq!(whole("\x1b]0;a\x05b\x07", false), "\x1b]0;ab\x07");
    // BEL does not end a DCS: the request after it is still one.
    assert_eq!(whole("\x1bP\x07$qm\x1b\\X", false), "X");
}

#[test]
fn memory_is_bounded_and_long_strings_stream() {
    let mut f = QueryFilter::new(true);
    // A long clipboard write, allowed: judged on its head, then streamed.
    let mut out = f.filter("\x1b]52;c;");
    let chunk = "QUFB".repeat(1024);
    for _ in 0..256 {
        out.push_str(&f.filter(&chunk));
        assert!(f.held.len() <= STRING_HEAD + 8, "{}", f.held.len());
    }
    out.push_str(&f.filter("\x07ok"));
    assert_eq!(out.len(), "\x1b]52;c;".len() + 256 * chunk.len() + 3);
    assert!(out.ends_with("\x07ok"));

    // The same refused: nothing of it is kept, nor held.
    let mut f = QueryFilter::new(false);
    let mut out = f.filter("\x1b]52;c;");
    for _ in 0..256 {
        out.push_str(&f.filter(&chunk));
        assert!(f.held.len() <= STRING_HEAD + 8);
    }
    out.push_str(&f.filter("\x07ok"));
    assert_eq!(out, "ok");

    // An endless CSI is dropped without being held.
    let mut f = QueryFilter::new(false);
    let mut out = f.filter("\x1b[");
    for _ in 0..1000 {
        out.push_str(&f.filter(&"1;".repeat(100)));
        assert!(f.held.len() <= CSI_MAX + 4);
    }
    out.push_str(&f.filter("mok"));
    assert_eq!(out, "ok");
}

#[test]
fn reset_drops_what_is_held() {
    let mut f = QueryFilter::new(false);
    assert_eq!(f.filter("x\x1b]52;c;aG"), "x");
    f.reset();
    assert_eq!(f.filter("k=\x07"), "k=\x07");
}
