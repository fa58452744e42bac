#!/usr/bin/env node
// The test suite's screen judge: feeds byte streams to @xterm/headless with VS Code's
// terminal settings (1000 lines of scrollback, Unicode 11 widths) and prints the resulting
// screen as JSON: every cell of the scrollback and the screen (and of the primary screen under
// the alternate one), the cursor, the active buffer, the modes, and the state later output
// depends on (pen, saved cursors, scroll region, tab stops, charsets, pending wrap).
//
// Usage:
//   node judge.js [--cols N] [--rows N] [--base64] [FILE...]
//       One screen: FILEs (or stdin when none) are fed in order, raw bytes or base64 text.
//   node judge.js --batch
//       Many screens: each stdin line is a JSON case
//         {"cols": 80, "rows": 24, "steps": [{"data": "<base64>"} | {"text": "<string>"}
//                                            | {"resize": [cols, rows]}]}
//       and each gets one output line, the screen's JSON (or {"error": "..."}).
'use strict';

const fs = require('fs');
const readline = require('readline');
const { Terminal } = require('@xterm/headless');
const { Unicode11Addon } = require('@xterm/addon-unicode11');

const SCROLLBACK = 1000;

function colour(mode, value) {
  if (mode === 'default') return null;
  if (mode === 'rgb') return { rgb: [(value >> 16) & 255, (value >> 8) & 255, value & 255] };
  return value < 16 ? { palette: value } : { p256: value };
}

function cellMode(cell, which) {
  if (which === 'fg') {
    if (cell.isFgDefault()) return 'default';
    return cell.isFgRGB() ? 'rgb' : 'palette';
  }
  if (cell.isBgDefault()) return 'default';
  return cell.isBgRGB() ? 'rgb' : 'palette';
}

// The underline colour lives in xterm's extended attributes, outside the public API.
function underline(cell) {
  if (!cell.isUnderline()) return null;
  const style = typeof cell.getUnderlineStyle === 'function' ? cell.getUnderlineStyle() : 1;
  let col = null;
  if (typeof cell.getUnderlineColorMode === 'function') {
    const mode = cell.getUnderlineColorMode();
    const value = cell.getUnderlineColor();
    // 0: default, 0x1000000/0x2000000: palette 16/256, 0x3000000: RGB (xterm's Attributes.CM_*).
    if (mode === 0x3000000) col = colour('rgb', value);
    else if (mode !== 0) col = colour('palette', value);
  }
  return { style, colour: col };
}

// The colours and attributes of a cell, or of a pen (xterm's AttributeData, which cells extend).
function describeAttrs(a, d) {
  const fg = colour(cellMode(a, 'fg'), a.getFgColor());
  const bg = colour(cellMode(a, 'bg'), a.getBgColor());
  if (fg) d.fg = fg;
  if (bg) d.bg = bg;
  const flags = [];
  if (a.isBold()) flags.push('bold');
  if (a.isDim()) flags.push('dim');
  if (a.isItalic()) flags.push('italic');
  if (a.isBlink()) flags.push('blink');
  if (a.isInverse()) flags.push('inverse');
  if (a.isInvisible()) flags.push('invisible');
  if (a.isStrikethrough()) flags.push('strike');
  if (a.isOverline()) flags.push('overline');
  if (flags.length) d.attrs = flags;
  const u = underline(a);
  if (u) d.underline = u;
  return d;
}

function describeCell(cell) {
  return describeAttrs(cell, { ch: cell.getChars(), w: cell.getWidth() });
}

// A charset by name: null for ASCII, 'dec-graphics' for DEC line drawing, else its mapped
// characters in key order.
function describeCharset(c) {
  if (!c) return null;
  if (c.q === '\u2500' && c.x === '\u2502') return 'dec-graphics';
  return Object.keys(c).sort().map((k) => k + c[k]).join('');
}

// What the screen does not show but later output depends on (xterm internals of the pinned
// version): the pen, the saved cursor, the scroll region, the tab stops, the charsets, a
// pending wrap. `null` where the internals are not found.
function hiddenState(term, buf) {
  const core = term._core;
  const b = buf && buf._buffer ? buf._buffer : null;
  const ih = core && core._inputHandler;
  const cs = core && core._charsetService;
  if (!b || !ih || !cs) return null;
  const tabs = Object.keys(b.tabs || {}).filter((k) => b.tabs[k]).map(Number).sort((x, y) => x - y);
  return {
    pen: describeAttrs(ih._curAttrData, {}),
    saved: { x: b.savedX, y: b.savedY, pen: describeAttrs(b.savedCurAttrData, {}), charset: describeCharset(b.savedCharset) },
    region: [b.scrollTop, b.scrollBottom],
    tabs,
    charsets: { glevel: cs.glevel, g: [0, 1, 2, 3].map((i) => describeCharset(cs._charsets[i])) },
    pendingWrap: b.x >= term.cols,
  };
}

// The saved cursor of a buffer other than the active one (the primary screen's, which
// leaving the alternate screen restores).
function savedOf(buf) {
  const b = buf && buf._buffer ? buf._buffer : null;
  if (!b) return null;
  return { x: b.savedX, y: b.savedY, pen: describeAttrs(b.savedCurAttrData, {}), charset: describeCharset(b.savedCharset) };
}

function describeLine(line, cols) {
  const cells = [];
  let cell;
  for (let x = 0; x < cols; x++) {
    cell = line.getCell(x, cell);
    if (!cell) break;
    cells.push(describeCell(cell));
  }
  // Trailing blank default cells carry nothing a client can see.
  while (cells.length && cells[cells.length - 1].ch === '' && Object.keys(cells[cells.length - 1]).length === 2) {
    cells.pop();
  }
  return { wrapped: line.isWrapped, cells };
}

function describe(term) {
  const buf = term.buffer.active;
  const core = term._core;
  const normal = term.buffer.normal;
  const scrollback = [];
  for (let y = 0; y < normal.baseY; y++) scrollback.push(describeLine(normal.getLine(y), term.cols));
  const screen = [];
  for (let y = 0; y < term.rows; y++) screen.push(describeLine(buf.getLine(buf.baseY + y), term.cols));
  const dec = core && core.coreService ? core.coreService.decPrivateModes : {};
  const modes = {
    bracketedPaste: term.modes.bracketedPasteMode,
    mouseTracking: term.modes.mouseTrackingMode,
    mouseEncoding: core && core.coreMouseService ? core.coreMouseService.activeEncoding : null,
    appCursorKeys: term.modes.applicationCursorKeysMode,
    appKeypad: term.modes.applicationKeypadMode,
    origin: term.modes.originMode,
    wraparound: term.modes.wraparoundMode,
    insert: term.modes.insertMode,
    focus: term.modes.sendFocusMode,
  };
  const primary = [];
  if (buf.type === 'alternate') {
    for (let y = 0; y < term.rows; y++) primary.push(describeLine(normal.getLine(normal.baseY + y), term.cols));
  }
  return {
    cols: term.cols,
    rows: term.rows,
    buffer: buf.type,
    cursor: {
      x: buf.cursorX,
      y: buf.cursorY,
      visible: core && core.coreService ? !core.coreService.isCursorHidden : true,
      style: (dec && dec.cursorStyle) || term.options.cursorStyle || 'block',
      blink: dec && dec.cursorBlink !== undefined ? dec.cursorBlink : !!term.options.cursorBlink,
    },
    modes,
    scrollback,
    screen,
    // The primary screen under an active alternate one (empty otherwise), and its saved cursor.
    primary,
    primarySaved: buf.type === 'alternate' ? savedOf(normal) : null,
    hidden: hiddenState(term, buf),
  };
}

async function run(cols, rows, steps) {
  const term = new Terminal({ cols, rows, scrollback: SCROLLBACK, allowProposedApi: true });
  term.loadAddon(new Unicode11Addon());
  term.unicode.activeVersion = '11';
  for (const step of steps) {
    if (step.resize) {
      term.resize(step.resize[0], step.resize[1]);
    } else {
      await new Promise((resolve) => term.write(step, resolve));
    }
  }
  const d = describe(term);
  term.dispose();
  return d;
}

function parseSteps(c) {
  return (c.steps || []).map((s) => {
    if (s.resize) return { resize: s.resize };
    if (typeof s.text === 'string') return s.text;
    return new Uint8Array(Buffer.from(s.data || '', 'base64'));
  });
}

async function batch() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let out;
    try {
      const c = JSON.parse(line);
      out = await run(c.cols || 80, c.rows || 24, parseSteps(c));
    } catch (e) {
      out = { error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  }
}

async function main() {
  const args = process.argv.slice(2);
  let cols = 80;
  let rows = 24;
  let base64 = false;
  const files = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--batch') return batch();
    if (a === '--cols') cols = parseInt(args[++i], 10);
    else if (a === '--rows') rows = parseInt(args[++i], 10);
    else if (a === '--base64') base64 = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 15).join('\n') + '\n');
      return;
    } else files.push(a);
  }
  if (!(cols > 0 && rows > 0)) throw new Error('--cols and --rows take a positive number');
  const inputs = files.length ? files.map((f) => fs.readFileSync(f)) : [fs.readFileSync(0)];
  const steps = inputs.map((b) => new Uint8Array(base64 ? Buffer.from(b.toString('ascii'), 'base64') : b));
  process.stdout.write(JSON.stringify(await run(cols, rows, steps)) + '\n');
}

main().catch((e) => {
  process.stderr.write(`judge: ${e && e.message ? e.message : e}\n`);
  process.exit(1);
});
