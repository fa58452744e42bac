//! Unit tests of [`super`] (skip.rs): the cases it must handle, read as its specification.

use super::*;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    #[test]
    fn the_last_control_is_found_eight_bytes_at_a_time(
        bytes in proptest::collection::vec(proptest::sample::select(vec![
            b'a', b' ', b'1', b';', b':', b'm', b'K', b'[', b']', b'H', 0x1b, b'\r', b'\n',
            b'\t', 0x08, 0x07, 0x7f, 0x00, 0x1f, 0x9b, 0xc3, 0xa9,
        ]), 0..64),
    ) {
        let bytewise = (0..bytes.len()).rev().find(|&k| !is_simple_byte(bytes[k]));
        proptest::prop_assert_eq!(last_control(&bytes), bytewise);
    }
}

/// [`net_pen`] by reading every sequence from the start: the SGRs from the last reset on.
fn net_pen_forward(text: &str) -> String {
    let mut pen = String::new();
    let mut rest = text;
    while let Some(e) = rest.find('\x1b') {
        let end = e + token_end(&rest.as_bytes()[e..], 0);
        let seq = &rest[e..end];
        if seq.starts_with("\x1b[") && seq.ends_with('m') {
            if is_reset(seq.as_bytes()) {
                pen.clear();
            }
            pen.push_str(seq);
        }
        rest = &rest[end..];
    }
    pen + "\r"
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// On what the skips hand it (whole SGR, EL and CUP sequences, text, CR and LF), the
    /// last reset found from the end is the one a reading from the start finds.
    #[test]
    fn net_pen_from_the_end_is_net_pen_from_the_start(
        tokens in proptest::collection::vec(proptest::sample::select(vec![
            "\x1b[m", "\x1b[0m", "\x1b[00;1m", "\x1b[;4m", "\x1b[1m", "\x1b[10m",
            "\x1b[0:3m", "\x1b[38;5;0m", "\x1b[K", "\x1b[2K", "\x1b[3;1H", "\x1b[H",
            "text", "é日", "\r\n", "\t",
        ]), 0..30),
    ) {
        let text = tokens.concat();
        proptest::prop_assert_eq!(net_pen(&text), net_pen_forward(&text));
    }
}

#[test]
fn the_column_after_printing_wraps_as_avt_does() {
    // 10 columns; 10 means a wrap is pending.
    assert_eq!(advance(0, 0, 10), 0);
    assert_eq!(advance(0, 10, 10), 10);
    assert_eq!(advance(10, 1, 10), 1);
    assert_eq!(advance(0, 13, 10), 3);
    assert_eq!(advance(3, 27, 10), 10);
    assert_eq!(advance(7, 4, 10), 1);
    for (a, b) in [(3, 9), (10, 10), (0, 25), (9, 1)] {
        assert_eq!(advance(advance(4, a, 10), b, 10), advance(4, a + b, 10));
    }
}

#[test]
fn a_bare_line_feed_is_cut_at_with_its_column() {
    let start = RunStart {
        col: 4,
        row: 9,
        cols: 10,
        rows: 10,
        newline: false,
        autowrap: true,
    };
    // From column 4 on the bottom row: 13 printed (the SGRs take none) reach column 7,
    // kept by the LF (which scrolls).
    let text = b"abc\x1b[1mdefghij\x1b[mklm\n\n\n";
    assert_eq!(skip_cut(text, 2, start), Some((text.len() - 2, 7)));
    // A CR in between counts from column 0.
    assert_eq!(skip_cut(b"abcd\rxy\n\n\n", 2, start), Some((8, 2)));
    // After a CR LF, or in LNM, the column is 0.
    assert_eq!(skip_cut(b"abcd\r\n\n\n", 2, start), Some((6, 0)));
    let lnm = RunStart {
        newline: true,
        ..start
    };
    assert_eq!(skip_cut(b"abcd\n\n\n", 2, lnm), Some((5, 0)));
    // Ten columns printed leave a wrap pending, which a scrolling LF keeps.
    let left = RunStart { col: 0, ..start };
    assert_eq!(skip_cut(b"0123456789\n\n\n", 2, left), Some((11, 10)));
    // Above the bottom row, an LF ends a pending wrap; the cut must be on the bottom row.
    let top = RunStart {
        col: 0,
        row: 7,
        ..start
    };
    assert_eq!(skip_cut(b"0123456789\n\n\n\n\n", 2, top), Some((13, 9)));
    let higher = RunStart { row: 6, ..top };
    assert_eq!(skip_cut(b"0123456789\n\n\n\n", 2, higher), None);
    // A CR LF cut too: too few line feeds before it to reach the bottom row.
    assert_eq!(
        skip_cut(b"a\r\nb\r\n\n", 2, RunStart { row: 6, ..start }),
        None
    );
    assert_eq!(
        skip_cut(b"a\r\nb\r\n\n", 2, RunStart { row: 8, ..start }),
        Some((3, 0))
    );
    // Wrapping moves down too: 30 columns from row 7 reach row 9 with a wrap pending,
    // which the line feeds then keep (they scroll).
    let wrapping = [b'x'; 30]
        .iter()
        .chain(b"\n\n\n\n")
        .copied()
        .collect::<Vec<u8>>();
    assert_eq!(skip_cut(&wrapping, 2, top), Some((32, 10)));
    // Not counted: a tab, a non-ASCII character; an earlier CR LF is taken.
    assert_eq!(skip_cut(b"a\r\nb\tc\n\n\n\n", 2, start), Some((3, 0)));
    assert_eq!(skip_cut("é\n\n\n".as_bytes(), 2, start), None);
    // Without autowrap, printing stops in the last column.
    let no_wrap = RunStart {
        autowrap: false,
        ..start
    };
    assert_eq!(skip_cut(b"ab\n\n\n", 2, no_wrap), Some((3, 6)));
    assert_eq!(skip_cut(b"abcdefgh\n\n\n", 2, no_wrap), Some((9, 9)));
    let pending = RunStart { col: 10, ..no_wrap };
    assert_eq!(skip_cut(b"\n\n\n", 2, pending), Some((1, 10)));
    assert_eq!(skip_cut(b"x\n\n\n", 2, pending), Some((2, 9)));
    // Too few line feeds after any of them.
    assert_eq!(skip_cut(b"ab\n\n", 2, start), None);
}

#[test]
fn restoring_the_cursor_goes_to_the_bottom_row_or_leaves_a_wrap_pending() {
    let mut t = String::from("\r");
    restore_cursor(&mut t, 0, 10, 5, true);
    assert_eq!(t, "\r\x1b[5;1H");
    let mut t = String::new();
    restore_cursor(&mut t, 6, 10, 5, true);
    assert_eq!(t, "\x1b[5;7H");
    let mut t = String::new();
    restore_cursor(&mut t, 10, 10, 5, true);
    assert_eq!(t, "\x1b[5;10H ");
    let mut t = String::new();
    restore_cursor(&mut t, 10, 10, 5, false);
    assert_eq!(t, "\x1b[5;10H\x1b[?7h \x1b[?7l");
}

#[test]
fn net_pen_keeps_what_follows_the_last_reset() {
    assert_eq!(net_pen("a\x1b[1mb\x1b[0mc\x1b[31md"), "\x1b[0m\x1b[31m\r");
    assert_eq!(net_pen("\x1b[1m\x1b[4m"), "\x1b[1m\x1b[4m\r");
    assert_eq!(net_pen("\x1b[1m\x1b[m\x1b[;4m"), "\x1b[;4m\r");
    assert_eq!(net_pen("\x1b[1m\x1b[0;32mx"), "\x1b[0;32m\r");
    // Not resets: a first parameter that is not 0, a colon sub-parameter.
    assert_eq!(net_pen("\x1b[1m\x1b[10m"), "\x1b[1m\x1b[10m\r");
    assert_eq!(net_pen("\x1b[1m\x1b[0:3m"), "\x1b[1m\x1b[0:3m\r");
    // Other sequences are left out.
    assert_eq!(net_pen("\x1b[1m\x1b[2K\x1b]0;t\x07"), "\x1b[1m\r");
}

fn repaint(text: &str, cols: usize, rows: usize) -> Option<(usize, usize)> {
    next_repaint(text, 0, cols, rows, &mut Vec::new(), &mut 0)
}

#[test]
fn a_repaint_run_is_cut_where_every_row_is_painted_from() {
    let frame = |n: usize| {
        (1..=3)
            .map(|r| format!("\x1b[{r};1H\x1b[3{n}mframe {n}\x1b[K"))
            .collect::<String>()
    };
    let text = format!("x{}{}{}", frame(1), frame(2), frame(3));
    let (start, cut) = repaint(&text, 20, 3).unwrap();
    assert_eq!(start, 1);
    assert_eq!(&text[cut..], frame(3));
    // One row short of the screen: nothing to skip.
    assert_eq!(repaint(&text, 20, 4), None);
    // A row that would wrap ends the run; a row of exactly the width, then EL, is painted.
    let wide = format!("{}\x1b[1;1H{}", frame(1), "y".repeat(9));
    assert_eq!(repaint(&wide, 8, 3), None);
    let row = frame(2).replace("frame 2", "12345678");
    let full = format!("{}{row}", frame(1));
    assert_eq!(&full[repaint(&full, 8, 3).unwrap().1..], row);
    // Without the EL a row is not painted (its wrap flag stays what it was).
    let no_el = format!("{}{}", frame(1), row.replace("\x1b[K", ""));
    assert_eq!(repaint(&no_el, 8, 3), None);
    // A line feed ends it; a later run is found.
    let later = format!("{}\n{}{}", frame(1), frame(2), frame(3));
    let (start, cut) = repaint(&later, 20, 3).unwrap();
    assert_eq!(start, frame(1).len() + 1);
    assert_eq!(&later[cut..], frame(3));
    // A CUP not to the first column paints no row by itself.
    assert_eq!(repaint("\x1b[1;2Hab\x1b[K\x1b[1;2Hab\x1b[K", 5, 1), None);
}
