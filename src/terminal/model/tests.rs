//! Unit tests of the screen model: skip-ahead, freeze/thaw round trips, the client dump's
//! rewrites. Touches only the model's own types.

use super::*;

fn model(cols: u16, rows: u16) -> Model {
    Model::thaw(&Frozen::fresh(cols, rows))
}

fn screen(m: &Model) -> (Vec<String>, avt::Cursor) {
    (m.vt.screen().text(), m.vt.cursor())
}

/// A model rebuilt from its frozen form is the same model.
fn roundtrip(m: &Model) -> Model {
    Model::thaw(&m.freeze())
}

#[test]
fn skip_ahead_gives_the_state_of_a_full_feed() {
    let mut lines = String::from("\x1b[31mstart\r\n");
    for i in 0..500 {
        let _ = write!(lines, "\x1b[3{}mline {i}\x1b[K\x1b[0m\ttab\r\n", i % 8);
    }
    lines.push_str("\x1b[1mlast, no newline");
    for prefix in [
        "",
        "\x1b[?1049h\x1b[5;10Hx",
        "\x1b[2;5r",
        "\x1b]0;t\x07",
        "\x1b[?1h",
    ] {
        let text = format!("{prefix}{lines}");
        let mut skipping = model(40, 10);
        skipping.feed(&text);
        let mut full = model(40, 10);
        full.feed_exact(&text);
        assert_eq!(screen(&skipping), screen(&full), "{prefix:?}");
        assert_eq!(skipping.vt.dump(), full.vt.dump(), "{prefix:?}");
    }
    use skip::simple_suffix_start;
    assert!(simple_suffix_start(b"\x1b[1;5Habc") == "\x1b[1;5H".len());
    // An unterminated OSC swallows the rest.
    assert_eq!(simple_suffix_start(b"\x1b]0;abc\r\nxyz"), 12);
    assert_eq!(simple_suffix_start(b"\x1b]0;abc\x07\r\nxyz"), 8);
    assert_eq!(simple_suffix_start(b"ab\x1b[1mcd"), 0);
    assert_eq!(simple_suffix_start(b"ab\x07cd"), 3);
}

/// Pieces of output: what full-screen programs draw with, and what breaks a repaint run.
#[test]
fn bare_line_feeds_are_skipped_with_the_column_they_leave() {
    // Lines longer than the screen is wide, LF without CR (the pty's LF → CR LF
    // translation off): the cursor's column moves on from line to line and a wrap is
    // pending whenever a line ends in the last column.
    for (len, prefix) in [
        (57, ""),
        (40, ""),
        (80, "\x1b[5;7Hx"),
        (13, "\x1b[?1049h"),
        (57, "\x1b[4h"),
        (57, "\x1b[20h"),
        (57, "\x1b[?7l"),
    ] {
        let mut lines = String::from(prefix);
        for i in 0..300 {
            let body: String = (0..len)
                .map(|k| char::from(b'a' + ((i + k) % 26) as u8))
                .collect();
            let _ = writeln!(lines, "\x1b[3{}m{body}\x1b[m", i % 8);
        }
        lines.push_str("tail");
        let start = skip::RunStart {
            col: 0,
            row: 0,
            cols: 40,
            rows: 10,
            newline: false,
            autowrap: true,
        };
        if prefix.is_empty() {
            // Counted, not given up on: the cut is a bare LF's.
            let (cut, _) = skip::skip_cut(lines.as_bytes(), 20, start).expect("a cut");
            assert_ne!(lines.as_bytes()[cut - 2], b'\r');
        }
        let mut skipping = model(40, 10);
        skipping.feed(&lines);
        let mut full = model(40, 10);
        full.feed_exact(&lines);
        assert_eq!(screen(&skipping), screen(&full), "{len} {prefix:?}");
        assert_eq!(skipping.vt.dump(), full.vt.dump(), "{len} {prefix:?}");
    }
}

#[test]
fn a_cut_leaves_the_cursor_on_the_bottom_row_as_a_full_feed_does() {
    // A full feed reaches the bottom row (row 4) with the fourth LF, prints a line that
    // fills the width (a wrap pending) and scrolls on, keeping the wrap pending. Skipping
    // the first CR LF without moving the cursor would leave the model a row higher: its
    // line would be printed on row 3 and the next LF, which moves down instead of
    // scrolling, would end the wrap.
    let text = format!("\r\n\n\n\n{}{}", "a".repeat(12), "\n".repeat(7));
    let mut skipping = model(12, 5);
    skipping.feed(&text);
    let mut full = model(12, 5);
    full.feed_exact(&text);
    assert_eq!(full.vt.cursor().col, 12, "a wrap is pending");
    assert_eq!(skipping.vt.cursor(), full.vt.cursor());
    assert_eq!(skipping.vt.dump(), full.vt.dump());
}

/// A model of `cols` × `rows` fed `text` with skipping, in one feed and in two split at a
/// sequence boundary (before an ESC, where the host may end a batch) near `split`, ends in
/// the state of a full feed: the same cursor, dump and modes.
fn skipping_matches_a_full_feed(
    cols: u16,
    rows: u16,
    text: &str,
    split: usize,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut at = split % (text.len() + 1);
    while at < text.len() && text.as_bytes()[at] != 0x1b {
        at += 1;
    }
    let mut full = model(cols, rows);
    full.feed_exact(text);
    let mut whole = model(cols, rows);
    whole.feed(text);
    let mut split = model(cols, rows);
    split.feed(&text[..at]);
    split.feed(&text[at..]);
    for skipping in [&whole, &split] {
        proptest::prop_assert_eq!(skipping.vt.cursor(), full.vt.cursor());
        proptest::prop_assert_eq!(skipping.vt.dump(), full.vt.dump());
        proptest::prop_assert_eq!(skipping.modes(), full.modes());
    }
    Ok(())
}

/// Simple output (no cursor addressing, no scroll region) with bare line feeds, lines of
/// every length around the screen's width, and what the column count gives up on.
fn simple_piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        6 => Just("\n".to_string()),
        1 => Just("\r\n".to_string()),
        1 => Just("\r".to_string()),
        4 => "[a-z ]{0,13}",
        2 => (11usize..14).prop_map(|n| "w".repeat(n)),
        1 => prop::sample::select(vec!["\t", "\x08", "é", "日本", "x\u{301}"])
            .prop_map(str::to_string),
        2 => prop::sample::select(vec!["\x1b[K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[m"])
            .prop_map(str::to_string),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]

    /// Skipping ahead over bare line feeds gives the state a full feed gives, from any
    /// cursor position and modes, in one feed or two.
    #[test]
    fn skipping_bare_line_feeds_is_exact(
        before in proptest::collection::vec(piece(), 0..12),
        mode in proptest::sample::select(vec!["", "\x1b[20h", "\x1b[?7l", "\x1b[4h", "\x1b[?1049h"]),
        pieces in proptest::collection::vec(simple_piece(), 0..160),
        split in 0usize..10_000,
    ) {
        let text = format!("{}{mode}{}", before.concat(), pieces.concat());
        skipping_matches_a_full_feed(12, 5, &text, split)?;
    }
}

/// Simple output for small screens: bare line feeds most of all, lines up to twice a
/// width, and what the column count gives up on.
fn small_simple_piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        8 => Just("\n".to_string()),
        1 => Just("\r\n".to_string()),
        1 => Just("\r".to_string()),
        4 => "[a-z]{0,3}",
        3 => (1usize..12).prop_map(|n| "w".repeat(n)),
        1 => prop::sample::select(vec![
            "\t", "\x08", "é", "日本", "日", "x\u{301}", "\u{301}", "a\u{200b}", "│",
        ])
        .prop_map(str::to_string),
        1 => prop::sample::select(vec![
            "\x1b[K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[m", "\x1b[44m",
        ])
        .prop_map(str::to_string),
    ]
}

/// What comes before a simple run: cursor moves, modes set the ways avt reads them (some
/// the mode tracker does not follow), saved and restored cursors, both screens.
fn mode_piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0u16..6, 0u16..7).prop_map(|(r, c)| format!("\x1b[{r};{c}H")),
        3 => "[a-z]{0,7}",
        1 => prop::sample::select(vec!["日本", "日", "é"]).prop_map(str::to_string),
        // Modes avt holds otherwise than the mode tracker says.
        2 => prop::sample::select(vec![
            "\x1b[?7l\x1b7\x1b[?7h\x1b8", "\x1b7\x1b[?7l\x1b8", "\x1b[?7l\x1b[s\x1b[?7h\x1b[u",
            "\x1b[20h\x1b[65556l", "\x1b[65556h", "\x1b[?65543l", "\x1b[?7h\u{9b}?7l",
            "\x1b[20h\u{9b}20l",
        ])
        .prop_map(str::to_string),
        4 => prop::sample::select(vec![
            "\r\n", "\n", "\r", "\x08", "\t", "\x1b[2;3r", "\x1b[r", "\x1b[?6h", "\x1b[?6l",
            "\x1b[4h", "\x1b[4l", "\x1b[?7l", "\x1b[?7h", "\x1b[?1049h", "\x1b[?1049l",
            "\x1b[20h", "\x1b[20l", "\x1b[?25l", "\x1b[44m", "\x1b[m", "\x1b7", "\x1b8",
            "\x1b[s", "\x1b[u", "\x1b[?1048h", "\x1b[?1048l", "\x1b[65543l", "\x1b[?65543l",
            "\x1b[65556h", "\x1b[65556l", "\x1b[!p", "\x1bc", "\u{9b}?7l", "\u{9b}20h",
            "\x1b[2;65539r", "\u{9b}2;3r", "\x1b[2;3\u{200b}r",
            "\x1b[S", "\x1b[L", "\x1b(0", "\x1b(B", "\x1bM", "\x1bD", "\x1bE", "\x1b[5W",
            "\x1b[3g", "\x1bH", "\x1b[2J", "\x1b[?47h", "\x1b[?47l",
        ])
        .prop_map(str::to_string),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(600))]

    /// Skipping ahead is exact on any screen size down to 1×1, whatever modes avt holds
    /// (whether or not the mode tracker knows them), in one feed or two.
    #[test]
    fn skipping_is_exact_on_small_screens_in_any_mode(
        cols in 1u16..6,
        rows in 1u16..5,
        before in proptest::collection::vec(mode_piece(), 0..10),
        pieces in proptest::collection::vec(small_simple_piece(), 0..80),
        split in 0usize..10_000,
    ) {
        let text = format!("{}{}", before.concat(), pieces.concat());
        skipping_matches_a_full_feed(cols, rows, &text, split)?;
    }
}

fn piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u16..8, 0u16..3).prop_map(|(r, c)| match c {
            0 => format!("\x1b[{r};1H"),
            1 => format!("\x1b[{r}H"),
            _ => format!("\x1b[{r};{}H", r + 2),
        }),
        4 => "[a-z ]{0,9}",
        2 => "[a-z]{8,14}",
        2 => prop::sample::select(vec!["日本", "é", "│─┼", "x\u{301}", "😀", "\u{200b}"])
            .prop_map(str::to_string),
        2 => prop::sample::select(vec![
            "\x1b[K", "\x1b[0K", "\x1b[2K", "\x1b[1K", "\x1b[31m", "\x1b[0;44m", "\x1b[m",
            "\x1b[1;4m", "\x1b[38;5;200m", "\x1b[7m",
        ])
        .prop_map(str::to_string),
        1 => prop::sample::select(vec![
            "\r\n", "\n", "\r", "\x08", "\t", "\x1b[2;4r", "\x1b[r", "\x1b[?6h", "\x1b[?6l",
            "\x1b[4h", "\x1b[4l", "\x1b[?7l", "\x1b[?7h", "\x1b[?1049h", "\x1b[?1049l",
            "\x1b7", "\x1b8", "\x1b[S", "\x1b[L", "\x1b[2P", "\x1b[3@", "\x1b(0", "\x1b(B",
            "\x1b]0;t\x07", "\x1b[", "\x1b[5;",
        ])
        .prop_map(str::to_string),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

    /// Whatever the output, skipping ahead gives the state a full feed gives, in one feed
    /// or split into two at a sequence boundary (where the host's batches end).
    #[test]
    fn skipping_ahead_is_exact(
        before in proptest::collection::vec(piece(), 0..40),
        frames in proptest::collection::vec(piece(), 0..200),
        repeat in 1usize..4,
        split in 0usize..10_000,
    ) {
        let mut text = before.concat();
        // Repaints of the whole screen, so runs to skip occur often.
        for f in 0..repeat {
            for k in 0..5 {
                let r = 1 + (k + f + split) % 5;
                let fill = "-".repeat((r * f + split) % 12);
                text.push_str(&format!("\x1b[{r};1H\x1b[3{f}mr{r}f{f}{fill}\x1b[K"));
            }
            text.push_str(&frames.concat());
        }
        skipping_matches_a_full_feed(12, 5, &text, split)?;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Where a model says a thaw reproduces it, a thawed copy of its frozen state goes on
    /// exactly as it does, whatever follows (the split falls anywhere, inside sequences
    /// too).
    #[test]
    fn a_model_that_thaws_exactly_goes_on_as_its_thawed_copy(
        pieces in proptest::collection::vec(piece(), 1..60),
        split in 0usize..10_000,
    ) {
        let text = pieces.concat();
        let mut at = split % (text.len() + 1);
        while !text.is_char_boundary(at) {
            at += 1;
        }
        let mut live = model(12, 5);
        live.feed_exact(&text[..at]);
        if live.thaws_exactly() {
            let mut thawed = roundtrip(&live);
            live.feed_exact(&text[at..]);
            thawed.feed_exact(&text[at..]);
            let (a, b) = (live.freeze(), thawed.freeze());
            proptest::prop_assert_eq!(&a.raw, &b.raw);
            proptest::prop_assert_eq!(&a.modes, &b.modes);
            proptest::prop_assert_eq!(a.client(), b.client());
        }
    }
}

#[test]
fn a_model_inside_a_sequence_does_not_thaw_exactly() {
    let mut m = model(12, 5);
    assert!(m.thaws_exactly());
    for (text, exact) in [
        ("a\x1b[?20", false),
        // Known only at the next ESC (the model does not follow a sequence's bytes).
        ("04h", false),
        ("x\x1b[m", true),
        ("\x1b]0;title", false),
        ("\x1b\\b", true),
        ("\x1b", false),
        ("\x1b(B", true),
        ("plain text", true),
    ] {
        m.feed_exact(text);
        assert_eq!(m.thaws_exactly(), exact, "after {text:?}");
    }
}

/// Feeds `text` with skipping and without, and compares avt's dumps.
fn assert_skip_exact(cols: u16, rows: u16, text: &str) {
    let mut skipping = model(cols, rows);
    skipping.feed(text);
    let mut full = model(cols, rows);
    full.feed_exact(text);
    assert_eq!(skipping.vt.dump(), full.vt.dump(), "{text:?}");
}

fn plain_lines(n: usize) -> String {
    (0..n).map(|i| format!("line{i}\r\n")).collect::<String>() + "end"
}

#[test]
fn skip_is_exact_a_skipped_reset_clears_the_pen_set_before_it() {
    // The pen is set before the stretch (the CSI after it ends the simple run), the only
    // reset is in the skipped stretch, and nothing after it sets the pen: what is drawn
    // after the cut shows whether the skip applied that reset.
    let pen = "\x1b[1;4;7;44m\x1b[?1h";
    assert_skip_exact(
        20,
        3,
        &format!("{pen}\x1b[0;32mgreen\r\n{}", plain_lines(10)),
    );
    let frame = |n: usize, sgr: &str| {
        (1..=3)
            .map(|r| format!("\x1b[{r};1H{sgr}frame {n}\x1b[K"))
            .collect::<String>()
    };
    let repaints = format!("{pen}{}{}", frame(1, "\x1b[m"), frame(2, ""));
    assert_skip_exact(20, 3, &format!("{repaints}\x1b[1;1H"));
}

#[test]
fn skip_is_exact_c1_csi_sgr_in_scrolled_away_lines() {
    // U+009B is CSI to avt; the simple run takes its bytes for text and net_pen misses it.
    assert_skip_exact(20, 3, &format!("\u{9b}1m{}", plain_lines(10)));
}

#[test]
fn skip_is_exact_c1_csi_cursor_up_in_scrolled_away_lines() {
    // A C1 CUU inside the "simple" run moves the cursor up, so later lines land elsewhere.
    // Six line feeds follow the cut, but each comes after a C1 CUU to the top row, so the
    // skipped lines stay on the screen in a full feed.
    let text = format!("pre0\r\npre1\r\npre2\r\n{}", "\u{9b}9A\r\n".repeat(6));
    assert_skip_exact(20, 3, &text);
}

#[test]
fn skip_is_exact_c1_decstbm_unseen_by_the_tracker() {
    // avt sets a scroll region from a C1 CSI; the mode tracker (vte) does not see it, so the
    // scroll-away skip drops a line above the region that a full feed keeps.
    assert_skip_exact(20, 5, &format!("\u{9b}2;4r\x1b[1;1H{}", plain_lines(12)));
}

#[test]
fn skip_is_exact_esc_esc_csi_before_scrolled_away_lines() {
    // token_end takes `ESC ESC [` for one whole sequence; avt is in a CSI after it, so the
    // "simple" run starts inside a CSI (`31m` is its end, an SGR).
    assert_skip_exact(20, 3, &format!("\x1b\x1b[31m{}", plain_lines(10)));
}

#[test]
fn skip_is_exact_cup_param_wrapping_in_avt() {
    // CUP 65537 is row 1 to avt (u16 wrap), the last row to the repaint scan.
    let f1 = "\x1b[1;1Hold1\x1b[K\x1b[2;1Hold2\x1b[K\x1b[3;1Hold3\x1b[K";
    let f2 = "\x1b[1;1Hnew1\x1b[K\x1b[2;1Hnew2\x1b[K\x1b[65537;1Hnew3\x1b[K";
    // (A final CUP keeps the last row's painting out of the scroll-away suffix.)
    assert_skip_exact(12, 3, &format!("{f1}{f2}\x1b[1;1H"));
}

#[test]
fn skip_is_exact_combining_mark_after_a_csi_final() {
    // feed_exact composes "A\u{301}" into "Á", which ends the CSI as an unknown final; the
    // skipping feed cuts the text between them (the simple suffix starts at U+0301), so
    // avt runs CUU 3.
    assert_skip_exact(10, 5, "\x1b[5;1H\x1b[3A\u{301}");
}

#[test]
fn skip_is_exact_unterminated_csi_then_sgr_before_scrolled_away_lines() {
    // token_end reads past the ESC that ends `ESC [ 5 ;` up to the next `[`, so the simple
    // run starts inside the SGR `ESC [ 0 ; 44 m` and its pen is lost.
    assert_skip_exact(20, 3, &format!("\x1b[5;\x1b[0;44m{}", plain_lines(10)));
}

#[test]
fn skip_is_exact_c0_inside_a_csi_before_scrolled_away_lines() {
    // VT (executed inside a CSI) is the last non-simple byte: the simple run starts inside
    // the CSI, whose final is then a letter of the first line after the cut.
    assert_skip_exact(20, 3, &format!("\x1b[\x0b31m{}", plain_lines(10)));
}

#[test]
fn skip_is_exact_c0_inside_an_unterminated_osc_before_plain_lines() {
    // The simple run starts inside the OSC (after the NUL): the skipped lines are missing
    // from the OSC avt holds (its dump carries the parser state).
    assert_skip_exact(20, 3, &format!("\x1b]2;\x00{}", plain_lines(10)));
}

/// Lines of bare line feeds whose cursor column depends on autowrap, then empty ones (which
/// keep the column) and a character printed where the cursor is left.
fn bare_lines_after(prefix: &str) -> String {
    format!(
        "{prefix}{}{}tail",
        "abcdefghijklmno\n".repeat(30),
        "\n".repeat(10)
    )
}

#[test]
fn skip_is_exact_autowrap_restored_by_a_cursor_restore() {
    // DECRC, SCORC and ?1049l restore the autowrap DECSC saved; the mode tracker does not
    // follow them, so it says autowrap is on where avt has it off.
    for prefix in [
        "\x1b[?7l\x1b7\x1b[?7h\x1b8",
        "\x1b[?7l\x1b[s\x1b[?7h\x1b[u",
        "\x1b[?7l\x1b[?1049h\x1b[?7h\x1b[?1049l",
    ] {
        assert_skip_exact(12, 5, &bare_lines_after(prefix));
    }
}

#[test]
fn skip_is_exact_modes_the_tracker_reads_otherwise() {
    // avt keeps a parameter in 16 bits (65556 is 20 to it) where vte saturates it, and
    // reads up to 32 parameters where the tracker reads 16.
    assert_skip_exact(12, 5, &bare_lines_after("\x1b[20h\x1b[65556l"));
    assert_skip_exact(
        12,
        5,
        &bare_lines_after(&format!("\x1b[?{}7l", "1;".repeat(16))),
    );
}

#[test]
fn skip_is_exact_after_a_c1_control_in_an_earlier_feed() {
    // A feed with a C1 control is fed in full, but the tracker (vte) never saw the C1 CSI
    // that turned autowrap off; the next feed skips with the tracker's modes.
    let lines = bare_lines_after("");
    let mut skipping = model(12, 5);
    skipping.feed("\u{9b}?7l");
    skipping.feed(&lines);
    let mut full = model(12, 5);
    full.feed_exact("\u{9b}?7l");
    full.feed_exact(&lines);
    assert_eq!(skipping.vt.cursor(), full.vt.cursor());
    assert_eq!(skipping.vt.dump(), full.vt.dump());
}

#[test]
fn skip_is_exact_combining_mark_after_a_skipped_sgr() {
    // feed_exact composes `m` and U+0301 into `ḿ`, so avt never applies the SGR; the
    // skipped stretch's net pen has it.
    assert_skip_exact(12, 5, &format!("\x1b[31m\u{301}{}", plain_lines(30)));
    assert_skip_exact(1, 1, "\x1b[31m\u{301}\r\n\n\n");
}

#[test]
fn skip_is_exact_scroll_regions_the_tracker_misses() {
    // avt keeps a parameter in 16 bits (65541 is 5 to it) where vte saturates it, so the
    // tracker ignores a region avt sets; a line above the region stays on the screen.
    assert_skip_exact(20, 5, &format!("\x1b[2;65541rtop{}", plain_lines(30)));
    // A C1 CSI sets a region in an earlier feed (fed in full), which vte never sees.
    let lines = format!("top{}", plain_lines(30));
    let mut skipping = model(20, 5);
    skipping.feed("\u{9b}2;5r");
    skipping.feed(&lines);
    let mut full = model(20, 5);
    full.feed_exact("\u{9b}2;5r");
    full.feed_exact(&lines);
    assert_eq!(skipping.vt.dump(), full.vt.dump());
}

#[test]
fn avt_dumps_a_scroll_region_only_when_it_is_not_the_whole_screen() {
    // The shape avt 0.19.0 dumps in (the skip-ahead reads it).
    let mut m = model(20, 5);
    m.feed_exact("\x1b[1;5r\x1b[?1049h\x1b[1;1Hx\x1b7\x1b[2;2H\x1b]0;a\x07\x1b[3g");
    assert!(!skip::dump_sets_margins(&m.vt.dump()));
    m.feed_exact("\x1b[2;4r");
    assert!(m.vt.dump().contains("\x1b[2;4r"));
    assert!(skip::dump_sets_margins(&m.vt.dump()));
}

#[test]
fn frozen_models_thaw_exactly() {
    let mut m = model(30, 8);
    m.feed("\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b]2;t\x07hello\r\nwide 日本\r\n");
    m.feed("\x1b[?1049h\x1b[2;6r\x1b[3;3H\x1b[7mdraw\x1b7\x1b[1;1H\x1b(0lqk\x1b(B");
    let back = roundtrip(&m);
    assert_eq!(screen(&back), screen(&m));
    assert_eq!(back.vt.dump(), m.vt.dump());
    assert_eq!(back.modes(), m.modes());
    // Output after the restore lands the same way (the scroll region, saved cursor and
    // pen survived).
    let mut a = m;
    let mut b = back;
    for x in [&mut a, &mut b] {
        x.feed("\x1b8more\r\n\r\n\r\n\r\n\r\n\x1b[?1049l after");
    }
    assert_eq!(screen(&a), screen(&b));
}

#[test]
fn the_client_dump_uses_sequences_clients_implement() {
    // The shape avt 0.19.0 dumps in (the rewrites depend on it).
    let mut m = model(20, 5);
    m.feed("\x1b[3g\x1b[5G\x1bHa\x1b[?1049hb");
    let f = m.freeze();
    assert!(f.raw.contains("\x1b[?1047h") && f.raw.contains("\x1b[5W"));
    assert!(!f.client.contains("1047") && f.client.contains("\x1b[?1049h"));
    assert!(f.client.contains("\x1b[3g") && !f.client.contains("\x1b[5W"));
    // In the primary screen with a saved alternate cursor, the bracket is dropped.
    let mut m = model(20, 5);
    m.feed("\x1b[?1049h\x1b[2;2H\x1b7\x1b[?1049lx");
    let f = m.freeze();
    assert!(f.raw.contains("\x1b[?1047l"));
    assert!(!f.client.contains("1047") && !f.client.contains("1049"));
}

#[test]
fn combining_marks_compose_and_zero_width_characters_stay_out() {
    let mut m = model(20, 3);
    m.feed("e\u{301}x a\u{20d7}b 👍\u{1f3fd}!");
    let (text, cursor) = screen(&m);
    assert_eq!(text[0], "éx ab 👍🏽!");
    // é, x, space, a, b, space, the emoji (2) and its modifier (2), !
    assert_eq!(cursor.col, 11);
}

#[test]
fn cursor_reports() {
    let mut m = model(10, 5);
    m.feed("\x1b[3;4H");
    assert_eq!(m.cursor_report(false), b"\x1b[3;4R");
    assert_eq!(m.cursor_report(true), b"\x1b[?3;4;1R");
    m.feed("\x1b[1;10Hx");
    assert_eq!(m.cursor_report(false), b"\x1b[1;10R");
    m.feed("\x1b[2;4r\x1b[?6h\x1b[2;1H");
    assert_eq!(m.cursor_report(false), b"\x1b[2;1R");
}

#[test]
fn a_frozen_model_is_a_few_kib() {
    // A full 120×40 screen of coloured text in the alternate screen, with the primary one
    // full too: what an idle terminal keeps is the dump, not avt's grids (156 KiB).
    let mut m = model(120, 40);
    let mut text = String::new();
    for screen in ["", "\x1b[?1049h"] {
        text.push_str(screen);
        for i in 0..40 {
            let _ = write!(
                text,
                "\x1b[3{}m{:<119}\x1b[0m\r\n",
                i % 8,
                format!("row {i} é 日本")
            );
        }
    }
    m.feed(&text);
    let f = m.freeze();
    assert!(f.heap_bytes() < 48 * 1024, "{} bytes", f.heap_bytes());
    assert!(f.client().contains("row 39"));
}

#[test]
fn preamble_sets_default_tab_stops() {
    let p = preamble(20);
    assert!(p.ends_with("\x1b[9G\x1bH\x1b[17G\x1bH\x1b[H\x1b[2J"));
}

#[test]
fn truecolour_reaches_clients_in_the_colour_space_form() {
    let mut m = model(20, 3);
    m.feed("\x1b[38;2;10;20;30;48;2;1;2;3mrgb\x1b[0m \x1b[38;5;200mx");
    let f = m.freeze();
    assert!(
        f.raw.contains("38:2:10:20:30"),
        "avt's shape changed: {:?}",
        f.raw
    );
    assert!(f.client.contains("38;2;10;20;30") && f.client.contains("48;2;1;2;3"));
    assert!(!f.client.contains(":2:"), "{:?}", f.client);
}

#[test]
fn the_alternate_screen_is_entered_with_the_saved_pen_in_place() {
    // xterm's ?1049h saves the cursor itself: the dump must issue it with the primary
    // screen's saved position and pen current, not after SGR 0.
    let mut m = model(20, 5);
    m.feed("ab\x1b[1;31m\x1b[?1049h\x1b[0;44m\x1b[3;3Hvim");
    let f = m.freeze();
    let at = f
        .client
        .find("\x1b[?1049h")
        .expect("enters the alternate screen");
    let before = &f.client[..at];
    let pen = before.rfind("\x1b[").expect("a sequence before ?1049h");
    assert!(
        before[pen..].ends_with('m') && before[pen..].contains("31"),
        "{:?}",
        f.client
    );
    assert!(!before.contains("\x1b7"), "{:?}", f.client);
}
