//! The xterm.js judge over what a snapshot must get right on an ordinary screen: colours far
//! beyond the scrollback, every SGR attribute, wide and combining characters around wraps,
//! origin mode with scroll regions and insert/delete line, tab stops, the line-drawing
//! charset, a cursor saved with a coloured pen across a trim. Harness and known-difference
//! rules: `xterm_judge.rs`.

use crate::xterm_judge::*;

const COLS: u16 = 80;
const ROWS: u16 = 24;

/// Output that trims the content many times over (about 20 KiB of short lines).
const FILLER: &str = "seq 1 4000; echo fill-$((1+1))\r";

spec!(colours_far_beyond_the_scrollback, async {
    let Some(mut s) = Scene::new("xj-colours", COLS, ROWS).await else {
        return;
    };
    // A header kept on the screen by a scroll region, in 256 colours and truecolour.
    s.run(
        "printf '\\e[2J\\e[H\\e[38;5;196;48;5;21m p256 \\e[38;2;10;200;30;48;2;250;128;1m rgb \\e[0m\\e[2;1H\\e[38;5;250mgrey\\e[0m\\e[4;24r\\e[24;1H'; echo hdr-$((1+1))\r",
        "hdr-2",
    )
    .await;
    s.run(
        "for i in $(seq 1 600); do printf '\\e[38;5;%dm%03d \\e[38;2;%d;%d;%dmtrue\\e[0m\\n' $((i%256)) $i $((i%256)) $((255-i%256)) 7; done; echo end-$((1+1))\r",
        "end-2",
    )
    .await;
    s.check("after a colour flood", EXACT).await;
    s.run(FILLER, "fill-2").await;
    s.check("after more output", EXACT).await;
});
