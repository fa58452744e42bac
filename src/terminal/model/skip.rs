//! Skip-ahead: the stretches of output whose effect on the screen later output overwrites in
//! full, so the model ([`super::Model::feed`]) need not emulate them — only their net effect on
//! the pen. avt parses about 10–25 MB/s on escape-heavy output on a 2-core VM, slower than a
//! pty delivers it, so emulating every byte would set the pace of every terminal.
//!
//! Two kinds of stretch are found, both on the terminal's own grammar (ECMA-48 sequences as
//! xterm and avt read them):
//! - **Scrolled-away lines.** In a run of *simple* output at the end of a feed — printable
//!   text, CR, LF, BS, HT, SGR (`CSI … m`) and EL (`CSI … K`) — with the scroll region the full
//!   screen, everything before the last line feed that is still followed by twice the screen
//!   height of line feeds cannot show any more: the first `rows` line feeds bring the cursor to
//!   the bottom from anywhere, the next `rows` scroll every row in fresh ([`simple_suffix_start`],
//!   [`skip_cut`]). What the stretch leaves besides the pen is the cursor: on the bottom row
//!   (a cut is taken only after enough line feeds to bring it there, and the model is put
//!   there too: in avt a line feed ends a pending wrap when it moves the cursor down but not
//!   when it scrolls, so the row shapes what follows), in column 0 after a CR LF, and after a
//!   bare LF (a program that turned the pty's LF → CR LF translation off, as `ahpty run` does,
//!   or a raw-mode program) in the column its printing since the last CR reached, which is
//!   counted, not emulated, where that printing is ASCII without HT or BS.
//! - **Repainted screens.** A run of *row painting* — CUP (`CSI row ; col H`), SGR, EL 0/2 and
//!   printable characters that never wrap — in which every row of the screen is painted in
//!   full (CUP to its first column, then text, then EL, which also clears the row's wrap flag)
//!   from some point on: what the run drew before that point is overwritten cell by cell
//!   ([`next_repaint`]). This is how full-screen programs (curses, vim, less) redraw.
//!
//! Of a skipped stretch only the pen is applied ([`net_pen`]). The state afterwards is exactly
//! what a full feed gives (the tests compare avt's dumps, byte for byte).
//!
//! Pure functions over bytes; touches nothing.

/// Longest SGR recognised as a reset in [`net_pen`] (longer ones are applied as they are).
const MAX_RESET_SGR_BYTES: usize = 32;

/// Longest CUP parameter read, in digits (a longer one, or a value above 65535, which avt
/// keeps in 16 bits and so wraps, ends a repaint run).
const MAX_PARAM_DIGITS: usize = 5;

/// Where the longest run of simple output (see the module docs) at the end of `b` starts: a
/// sequence boundary.
pub fn simple_suffix_start(b: &[u8]) -> usize {
    let mut end = b.len();
    while let Some(i) = last_control(&b[..end]) {
        if b[i] == 0x1b && is_simple_csi(&b[i..]) {
            end = i;
            continue;
        }
        // The run starts after the token `b[i]` belongs to: the sequence an ESC begins, or a
        // control that ends one (BEL) or stands alone. A run that would start inside a
        // malformed or unterminated sequence, or on a character that composes with the one
        // before it, is no run at all.
        let start = match b[i] {
            0x1b => match well_formed_end(b, i) {
                Some(end) => end,
                None => return b.len(),
            },
            _ => {
                let inside = memchr::memrchr(0x1b, &b[..i])
                    .is_some_and(|e| well_formed_end(b, e).is_none_or(|end| end > i + 1));
                if inside {
                    return b.len();
                }
                i + 1
            }
        };
        let composes = std::str::from_utf8(&b[start..])
            .ok()
            .and_then(|t| t.chars().next())
            .is_some_and(super::is_zero_width);
        return if composes { b.len() } else { start };
    }
    0
}

/// The end of the escape sequence at `b[e]` (an ESC) when it is one every parser delimits the
/// same way: a CSI of parameter and intermediate bytes then a final byte, an OSC or
/// other control string of printable bytes (or UTF-8) ended by BEL or ST, or an ESC sequence
/// of intermediates then a final byte. `None` for anything else (a C0 control or an ESC
/// inside, unterminated).
pub fn well_formed_end(b: &[u8], e: usize) -> Option<usize> {
    let kind = *b.get(e + 1)?;
    let body = e + 2;
    match kind {
        b'[' => {
            let n = b
                .get(body..)?
                .iter()
                .position(|c| !(0x20..=0x3f).contains(c))?;
            (0x40..=0x7e).contains(&b[body + n]).then_some(body + n + 1)
        }
        b']' | b'P' | b'X' | b'^' | b'_' => {
            let n = b.get(body..)?.iter().position(|&c| c < 0x20 || c == 0x7f)?;
            match b[body + n] {
                0x07 if kind == b']' => Some(body + n + 1),
                0x1b if b.get(body + n + 1) == Some(&b'\\') => Some(body + n + 2),
                _ => None,
            }
        }
        0x20..=0x7e => {
            let n = b
                .get(e + 1..)?
                .iter()
                .position(|c| !(0x20..=0x2f).contains(c))?;
            (0x30..=0x7e)
                .contains(&b[e + 1 + n])
                .then_some(e + 1 + n + 1)
        }
        _ => None,
    }
}

/// Whether `b` (UTF-8) holds a C1 control character, U+0080–U+009F (`C2 80`–`C2 9F`).
pub fn has_c1_control(b: &[u8]) -> bool {
    memchr::memchr_iter(0xc2, b).any(|i| b.get(i + 1).is_some_and(|c| (0x80..=0x9f).contains(c)))
}

/// Whether a zero-width character directly follows an escape sequence in `text`. The model
/// composes or keeps out such characters before avt reads them ([`super::Model::feed`]),
/// which can change the sequence's final byte (`m` and U+0301 compose to `ḿ`): avt then reads
/// another sequence than the bytes the skip-ahead scans show.
pub fn has_mark_after_sequence(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memchr_iter(0x1b, b).any(|e| {
        let end = token_end(b, e);
        // Every zero-width character the model handles is U+0300 or above (`CC 80` on).
        b.get(end).is_some_and(|&c| c >= 0xcc)
            && text
                .get(end..)
                .and_then(|t| t.chars().next())
                .is_some_and(super::is_zero_width)
    })
}

/// Whether avt's dump `d` sets a scroll region (`CSI top ; bottom r`): it does for one that is
/// not the whole screen, and its text holds no ESC.
pub fn dump_sets_margins(d: &str) -> bool {
    let b = d.as_bytes();
    memchr::memchr_iter(0x1b, b).any(|e| {
        let end = token_end(b, e);
        b.get(e + 1) == Some(&b'[')
            && b[end - 1] == b'r'
            && b[e + 2..end - 1]
                .iter()
                .all(|&c| c.is_ascii_digit() || c == b';')
    })
}

/// A byte a simple run may hold outside its SGR and EL sequences.
fn is_simple_byte(c: u8) -> bool {
    (c >= 0x20 && c != 0x7f) || matches!(c, b'\r' | b'\n' | b'\t' | 0x08)
}

/// The last byte of `b` that is not [`is_simple_byte`]: eight bytes are checked at a time for
/// a C0 control or DEL (plain text has a CR LF a line, so most words hold neither).
fn last_control(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = b.len();
    while i >= 8 {
        let w = b[i - 8..i].try_into().map_or(0, u64::from_le_bytes);
        let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let x = w ^ (ONES * 0x7f);
        let del = x.wrapping_sub(ONES) & !x & HIGH;
        if below_space | del != 0 {
            if let Some(k) = (i - 8..i).rev().find(|&k| !is_simple_byte(b[k])) {
                return Some(k);
            }
        }
        i -= 8;
    }
    (0..i).rev().find(|&k| !is_simple_byte(b[k]))
}

/// `b` starts with an SGR (`ESC [` digits, `;`, `:` then `m`) or an EL (`ESC [` digits then
/// `K`).
fn is_simple_csi(b: &[u8]) -> bool {
    if b.get(1) != Some(&b'[') {
        return false;
    }
    let body = &b[2..];
    let Some(p) = body
        .iter()
        .position(|&c| !matches!(c, b'0'..=b'9' | b';' | b':'))
    else {
        return false;
    };
    match body[p] {
        b'm' => true,
        b'K' => body[..p].iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// The end of the token that starts at `at`: after an escape sequence that begins there (the
/// end of `b` when it is unterminated), else just after the byte.
fn token_end(b: &[u8], at: usize) -> usize {
    if b[at] != 0x1b {
        return at + 1;
    }
    let Some(&kind) = b.get(at + 1) else {
        return b.len();
    };
    let body = at + 2;
    match kind {
        b'[' => b[body.min(b.len())..]
            .iter()
            .position(|x| (0x40..=0x7e).contains(x))
            .map_or(b.len(), |i| body + i + 1),
        b']' | b'P' | b'X' | b'^' | b'_' => {
            let mut i = body;
            while i < b.len() {
                match b[i] {
                    0x07 if kind == b']' => return i + 1,
                    0x1b if b.get(i + 1) == Some(&b'\\') => return i + 2,
                    // Another ESC ends the string (and starts a sequence of its own).
                    0x1b => return token_end(b, i),
                    0x18 | 0x1a => return i + 1,
                    _ => i += 1,
                }
            }
            b.len()
        }
        _ => b[at + 1..]
            .iter()
            .position(|x| (0x30..=0x7e).contains(x))
            .map_or(b.len(), |i| at + 1 + i + 1),
    }
}

/// The cursor where a simple run starts, and the modes that move it, as [`skip_cut`] needs
/// them.
#[derive(Debug, Clone, Copy)]
pub struct RunStart {
    /// The cursor's column, 0-based; `cols` while a wrap is pending (as avt keeps it).
    pub col: usize,
    /// The cursor's row, 0-based.
    pub row: usize,
    /// The screen's width and height (at least 1 each; the scroll region is the whole
    /// screen).
    pub cols: usize,
    pub rows: usize,
    /// LNM (`CSI 20 h`): a line feed also returns the carriage.
    pub newline: bool,
    /// DECAWM (`CSI ? 7 h`): printing in the last column wraps.
    pub autowrap: bool,
}

/// In a simple run `b` that starts with the cursor at `start`, the last point right after a
/// line feed that is followed by at least `need` line feeds and preceded by enough of them to
/// have brought the cursor to the bottom row, with the cursor's column there (in
/// [`RunStart::col`]'s terms): 0 after a CR LF or in LNM; after a bare LF, the column
/// [`column_at`] counts. Where that column cannot be counted, the last such point after a
/// CR LF is taken. `None` when there is no such point.
pub fn skip_cut(b: &[u8], need: usize, start: RunStart) -> Option<(usize, usize)> {
    let bottom = start.rows.checked_sub(1)?;
    let total = memchr::memchr_iter(b'\n', b).count();
    let mut lfs = 0;
    let mut bare_tried = false;
    let mut k = b.len();
    while k >= 1 {
        if b[k - 1] == b'\n' {
            if lfs >= need {
                // Nothing in a simple run moves the cursor up, and each line feed moves it
                // down a row or scrolls: this many line feeds before `k` bring it to the
                // bottom row (earlier points have fewer).
                if start.row + (total - lfs) < bottom {
                    return None;
                }
                if start.newline || (k >= 2 && b[k - 2] == b'\r') {
                    return Some((k, 0));
                }
                if !bare_tried {
                    bare_tried = true;
                    if let Some(col) = column_at(b, k, start) {
                        return Some((k, col));
                    }
                }
            }
            lfs += 1;
        }
        k -= 1;
    }
    None
}

/// The cursor's column at `b[k]` (right after a bare LF) in a simple run that starts at
/// `start`, when it can be counted and the cursor is on the bottom row there. Counted: every
/// character printed since the run's last CR before `k` is one column of ASCII (no HT, BS,
/// or wider or narrower character); SGR and EL move nothing. With autowrap each printed
/// character first wraps a pending line (moving down a row), then takes a column; without,
/// printing stops in the last column. A line feed keeps the column when it scrolls and, when
/// it moves down, ends a pending wrap (the column becomes the last one), as avt does. Whether
/// the column can be counted does not depend on `start.autowrap`. Costs a pass over the line
/// feeds since that CR.
fn column_at(b: &[u8], k: usize, start: RunStart) -> Option<usize> {
    let (cols, bottom) = (start.cols, start.rows.checked_sub(1)?);
    if cols == 0 {
        return None;
    }
    let (from, mut col, mut row) = match memchr::memrchr(b'\r', &b[..k]) {
        // Nothing moves the cursor up: the line feeds before the CR bring it down at least
        // that far (wraps may bring it further, so only the bottom row is certain).
        Some(r) => {
            let down = start.row + memchr::memchr_iter(b'\n', &b[..r]).count();
            if down < bottom {
                return None;
            }
            (r + 1, 0, bottom)
        }
        None => (0, start.col.min(cols), start.row.min(bottom)),
    };
    let stretch = &b[from..k];
    if !stretch.is_ascii() || memchr::memchr2(b'\t', 0x08, stretch).is_some() {
        return None;
    }
    let mut at = 0;
    for lf in memchr::memchr_iter(b'\n', stretch) {
        let n = printed(&stretch[at..lf]);
        if !start.autowrap {
            if n > 0 {
                col = (col + n).min(cols - 1);
            }
        } else {
            if n > 0 && col + n > cols {
                row = (row + (col + n - 1) / cols).min(bottom);
            }
            col = advance(col, n, cols);
        }
        if row < bottom {
            row += 1;
            col = col.min(cols - 1);
        }
        at = lf + 1;
    }
    // `k` is right after a line feed: `at == stretch.len()`.
    (row == bottom).then_some(col)
}

/// The characters a stretch of a simple run with no control but its SGRs and ELs prints.
fn printed(stretch: &[u8]) -> usize {
    let mut n = stretch.len();
    let mut p = 0;
    while let Some(e) = memchr::memchr(0x1b, &stretch[p..]) {
        let end = token_end(stretch, p + e);
        n -= end - (p + e);
        p = end;
    }
    n
}

/// The column after printing `n` one-column characters from column `col` on a screen `cols`
/// wide that wraps, `cols` meaning a wrap is pending (each character first wraps a pending
/// line, then takes a column). Printing `a` then `b` characters is printing `a + b`.
fn advance(col: usize, n: usize, cols: usize) -> usize {
    if n == 0 || col + n <= cols {
        col + n
    } else {
        (col + n - 1) % cols + 1
    }
}

/// Appends to `text` what puts the cursor where [`skip_cut`] says a cut leaves it: CUP to
/// that column of the bottom row; for a pending wrap (`col == cols`) CUP to the last column
/// and a space printed there, on the bottom row, which the line feeds after the cut scroll
/// away (with autowrap turned on for the space when `autowrap` is off, and off again). The
/// row matters even at column 0: a line feed after a pending wrap ends the wrap when it moves
/// the cursor down, not when it scrolls.
pub fn restore_cursor(text: &mut String, col: usize, cols: usize, rows: usize, autowrap: bool) {
    use std::fmt::Write;
    match col {
        c if c < cols => {
            let _ = write!(text, "\x1b[{rows};{}H", c + 1);
        }
        _ if autowrap => {
            let _ = write!(text, "\x1b[{rows};{cols}H ");
        }
        _ => {
            let _ = write!(text, "\x1b[{rows};{cols}H\x1b[?7h \x1b[?7l");
        }
    }
}

/// The SGRs (`CSI … m`) of a skipped stretch that still shape the pen after it: those from the
/// last one that begins with a reset (`CSI m`, `CSI 0 m`, `CSI 0 ; … m`) on, concatenated, then
/// a CR (which only moves the cursor to the first column; every caller's next byte moves the
/// cursor itself or is a line start). SGR parameters apply left to right and 0 clears every
/// attribute, so nothing before such a reset matters.
///
/// The last reset is found from the end (an emulator starts a new sequence at every ESC, so
/// each ESC is the start of one), and only what follows it is read: coloured output resets its
/// pen every few dozen bytes, so this costs about the length of the stretch's last line, not of
/// the stretch.
pub fn net_pen(text: &str) -> String {
    let b = text.as_bytes();
    let mut sgrs: Vec<(usize, usize)> = Vec::new();
    let mut p = 0;
    let mut q = b.len();
    while let Some(s) = memchr::memrchr(0x1b, &b[..q]) {
        let end = token_end(b, s);
        if b[end - 1] == b'm' && b.get(s + 1) == Some(&b'[') && is_reset(&b[s..end]) {
            p = s;
            break;
        }
        q = s;
    }
    while let Some(e) = memchr::memchr(0x1b, &b[p..]) {
        let s = p + e;
        let end = token_end(b, s);
        if b[end - 1] == b'm' && b.get(s + 1) == Some(&b'[') {
            if is_reset(&b[s..end]) {
                sgrs.clear();
            }
            sgrs.push((s, end));
        }
        p = end;
    }
    let mut pen = String::with_capacity(sgrs.iter().map(|(s, e)| e - s).sum::<usize>() + 1);
    for (s, e) in sgrs {
        pen.push_str(&text[s..e]);
    }
    pen.push('\r');
    pen
}

/// `sgr` (a whole `ESC [ … m`) starts by resetting every attribute.
fn is_reset(sgr: &[u8]) -> bool {
    if sgr.len() > MAX_RESET_SGR_BYTES {
        return false;
    }
    let params = &sgr[2..sgr.len() - 1];
    let first = params
        .iter()
        .position(|&c| c == b';' || c == b':')
        .map_or(params, |i| &params[..i]);
    first.iter().all(|&c| c == b'0') && params.get(first.len()) != Some(&b':')
}

/// A token of row painting, or the end of a run.
enum Paint {
    /// CUP to this 0-based row and column (clamped to the screen).
    Cup(usize, usize),
    Sgr,
    /// EL 0 or EL 2 (erase to the end of the line, or all of it).
    EraseLine,
    /// A character of this many columns.
    Char(usize),
    /// Anything else, or an unterminated sequence: the run ends here.
    End,
}

/// Reads the token at `b[i..]`: what it is and where it ends.
fn paint_token(text: &str, i: usize, cols: usize, rows: usize) -> (Paint, usize) {
    let b = text.as_bytes();
    let c = b[i];
    if (0x20..0x7f).contains(&c) {
        return (Paint::Char(1), i + 1);
    }
    if c == 0x1b {
        if b.get(i + 1) != Some(&b'[') {
            return (Paint::End, i);
        }
        let body = i + 2;
        let Some(len) = b[body.min(b.len())..]
            .iter()
            .position(|x| !(x.is_ascii_digit() || *x == b';' || *x == b':'))
        else {
            return (Paint::End, i);
        };
        let params = &b[body..body + len];
        let end = body + len + 1;
        return match b[body + len] {
            b'm' => (Paint::Sgr, end),
            b'K' if params.is_empty() || params == b"0" || params == b"2" => {
                (Paint::EraseLine, end)
            }
            b'H' => match cup(params, cols, rows) {
                Some((row, col)) => (Paint::Cup(row, col), end),
                None => (Paint::End, i),
            },
            _ => (Paint::End, i),
        };
    }
    if c < 0x80 {
        return (Paint::End, i);
    }
    // A non-ASCII character: the width avt gives it, unless it is one the model composes or
    // keeps out, or a C1 control.
    let Some(ch) = text[i..].chars().next() else {
        return (Paint::End, i);
    };
    let width = match super::cells(ch) {
        Some(w) if !('\u{80}'..='\u{9f}').contains(&ch) => w,
        _ => return (Paint::End, i),
    };
    (Paint::Char(width), i + ch.len_utf8())
}

/// CUP's parameters (`row ; col`, 1-based, empty or 0 meaning 1) as a 0-based position
/// clamped to the screen; `None` for any other shape.
fn cup(params: &[u8], cols: usize, rows: usize) -> Option<(usize, usize)> {
    let mut it = params.split(|&c| c == b';');
    let row = param(it.next().unwrap_or_default())?;
    let col = param(it.next().unwrap_or_default())?;
    if it.next().is_some() {
        return None;
    }
    Some((row.min(rows) - 1, col.min(cols) - 1))
}

fn param(p: &[u8]) -> Option<usize> {
    if p.len() > MAX_PARAM_DIGITS || !p.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = p
        .iter()
        .fold(0usize, |v, &d| v * 10 + usize::from(d - b'0'));
    // avt keeps parameters in 16 bits (65537 is 1 to it): larger values end the run.
    (v <= usize::from(u16::MAX)).then_some(v.max(1))
}

/// The first repaint run in `text` from `from` on (on a screen of `cols` × `rows`) that has a
/// stretch to skip: `(start, cut)`, where `start` is the run's first CUP and `cut` the CUP from
/// which every row is painted in full before the run ends. What lies between only needs its
/// [`net_pen`]. The caller checks that origin mode and insert mode are off and autowrap on
/// where the run starts (the run itself changes no mode).
///
/// Every `ESC [` starts a control sequence whatever state a parser was in, so a run begins at
/// a CUP wherever one appears, even after text that ended inside another sequence.
pub fn next_repaint(
    text: &str,
    from: usize,
    cols: usize,
    rows: usize,
    painted: &mut Vec<(u64, usize)>,
    generation: &mut u64,
) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    if painted.len() < rows {
        painted.resize(rows, (0, 0));
    }
    let mut i = from;
    while let Some(e) = memchr::memchr(0x1b, &b[i..]) {
        let start = i + e;
        let (Paint::Cup(mut row, mut col), mut at) = paint_token(text, start, cols, rows) else {
            i = start + 1;
            continue;
        };
        // A run: the CUP to the first column the current row's painting started at (`line`),
        // and how many distinct rows have been painted in full.
        *generation += 1;
        let gen = *generation;
        let mut rows_done = 0;
        let mut line = (col == 0).then_some(start);
        loop {
            if at >= b.len() {
                break;
            }
            // A stretch of printable ASCII at once (the common case).
            let ascii = b[at..]
                .iter()
                .position(|c| !(0x20..0x7f).contains(c))
                .unwrap_or(b.len() - at);
            if ascii > 0 {
                if col + ascii > cols {
                    break;
                }
                col += ascii;
                at += ascii;
                continue;
            }
            let (token, end) = paint_token(text, at, cols, rows);
            match token {
                Paint::Cup(r, c) => {
                    (row, col) = (r, c);
                    line = (col == 0).then_some(at);
                }
                Paint::Sgr => {}
                Paint::EraseLine => {
                    if let Some(l) = line {
                        mark(painted, gen, row, l, &mut rows_done);
                    }
                }
                // Never wrap: the character must fit on the row.
                Paint::Char(w) if col + w <= cols => col += w,
                Paint::Char(_) | Paint::End => break,
            }
            at = end;
        }
        if rows_done == rows {
            let cut = painted[..rows]
                .iter()
                .map(|&(_, l)| l)
                .min()
                .unwrap_or(start);
            if cut > start {
                return Some((start, cut));
            }
        }
        i = at.max(start + 1);
    }
    None
}

/// Row `row` was painted in full from the CUP at `line` (in run `gen`).
fn mark(painted: &mut [(u64, usize)], gen: u64, row: usize, line: usize, done: &mut usize) {
    if painted[row].0 != gen {
        *done += 1;
    }
    painted[row] = (gen, line);
}

#[cfg(test)]
mod tests;
