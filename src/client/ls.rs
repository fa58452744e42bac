//! `ahpty ls [--json]`: one row per terminal — number, title, status (running, or exited with
//! its code), who holds the claim (and whether that client is connected), size, age, cwd and
//! URI — from one `ahpty/listTerminals` request. `--json` prints an array for scripts (shape
//! in docs/cli.md). The table prints no control or bidirectional characters (a title is
//! whatever a program set): they show as spaces. `--json` keeps every value exact, escaped
//! as JSON.
//!
//! May touch: its one daemon connection, stdout, and `$HOME` (read, to shorten cwds).

use std::time::{SystemTime, UNIX_EPOCH};

use ahp::ahp_types::state::{TerminalClaim, TerminalLifecycleState};
use serde::Serialize;

use super::{Conn, Failure, Outcome, Target};
use crate::proto::catalog::TerminalSummary;

/// One terminal as `ls --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Row {
    /// The daemon's number for the terminal (what `attach 3` selects).
    pub index: u64,
    /// Channel URI.
    pub uri: String,
    /// Title.
    pub title: String,
    /// `"running"` or `"exited"`.
    pub status: &'static str,
    /// Exit code once exited (`null` while running or when unknown).
    pub exit_code: Option<i64>,
    /// The `clientId` holding the claim.
    pub holder: String,
    /// Whether the holder has a live connection.
    pub holder_connected: bool,
    /// The claim as the protocol has it (`{kind:"client",clientId}` or a session claim).
    pub claim: TerminalClaim,
    /// Working directory as a path (`null` when unknown).
    pub cwd: Option<String>,
    /// Columns.
    pub cols: Option<i64>,
    /// Rows.
    pub rows: Option<i64>,
    /// Creation time, Unix milliseconds (the daemon's clock).
    pub created_at: i64,
    /// Seconds since creation.
    pub age_seconds: i64,
    /// Whether the shell reports commands and their exit codes.
    pub command_detection: bool,
    /// Restored from the transcript of an earlier daemon process (no process behind it).
    pub restored: bool,
}

/// Builds the printed row of a listed terminal; `now_ms` is the current Unix time.
pub(crate) fn row(t: &TerminalSummary, now_ms: i64) -> Row {
    let (status, exit_code) = match &t.lifecycle {
        TerminalLifecycleState::Exited(e) => ("exited", e.exit_code),
        _ => ("running", None),
    };
    Row {
        index: t.id,
        uri: t.resource.clone(),
        title: t.title.clone(),
        status,
        exit_code,
        holder: t.holder.clone(),
        holder_connected: t.holder_connected,
        claim: t.claim.clone(),
        cwd: t.cwd.as_deref().map(cwd_path),
        cols: t.cols,
        rows: t.rows,
        created_at: t.created_at,
        age_seconds: (now_ms - t.created_at).max(0) / 1000,
        command_detection: t.supports_command_detection == Some(true),
        restored: t.restored,
    }
}

/// A `file://` URI as a path (percent-decoded); anything else unchanged.
pub(crate) fn cwd_path(uri: &str) -> String {
    url::Url::parse(uri)
        .ok()
        .filter(|u| u.scheme() == "file")
        .and_then(|u| u.to_file_path().ok())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| uri.to_string())
}

/// Current Unix time in milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `ahpty ls`.
pub async fn ls(target: &Target, token: Option<&str>, json: bool) -> Outcome {
    let mut conn = Conn::open(target, token, &[]).await?;
    let listing = conn.list().await?;
    conn.close().await;
    let now = now_ms();
    let rows: Vec<Row> = listing.terminals.iter().map(|t| row(t, now)).collect();
    let text = if json {
        let mut s = serde_json::to_string_pretty(&rows)
            .map_err(|e| Failure::failed(format!("cannot encode the list: {e}")))?;
        s.push('\n');
        s
    } else {
        table(&rows, std::env::var("HOME").ok().as_deref())
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(Failure::failed(format!("cannot write to stdout: {e}"))),
    }
}

/// The human table: a header, then one aligned line per row. `home` shortens cwds to `~`.
pub(crate) fn table(rows: &[Row], home: Option<&str>) -> String {
    let header = [
        "#", "TITLE", "STATUS", "HOLDER", "SIZE", "AGE", "CWD", "URI",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let status = match (r.status, r.exit_code) {
            ("exited", Some(c)) => format!("exited {c}"),
            ("exited", None) => "exited".into(),
            (s, _) => s.into(),
        };
        let status = if r.restored {
            format!("{status} (restored)")
        } else {
            status
        };
        // The CLI connects only for the length of a command: its terminals are not "away".
        let holder = if r.holder_connected || r.holder == super::connect::CLIENT_ID {
            r.holder.clone()
        } else {
            format!("{} (away)", r.holder)
        };
        let size = match (r.cols, r.rows) {
            (Some(c), Some(h)) => format!("{c}x{h}"),
            _ => "-".into(),
        };
        let cwd = match (&r.cwd, home) {
            (Some(c), Some(h)) if !h.is_empty() && (c == h || c.starts_with(&format!("{h}/"))) => {
                format!("~{}", &c[h.len()..])
            }
            (Some(c), _) => c.clone(),
            (None, _) => "-".into(),
        };
        // Every cell is printed through `one_line`: a program sets titles and cwds, and a
        // client sets URIs and holders.
        lines.push(vec![
            r.index.to_string(),
            clip(&r.title, 24),
            status,
            clip(&holder, 24),
            size,
            age(r.age_seconds),
            super::one_line(&cwd),
            super::one_line(&r.uri),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let mut line = String::new();
        for (i, cell) in l.iter().enumerate() {
            if i + 1 == l.len() {
                line.push_str(cell);
            } else if i == 0 {
                // Numbers right-aligned.
                line.push_str(&format!("{cell:>w$}  ", w = widths[i]));
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `45s`, `12m`, `3h`, `2d`.
pub(crate) fn age(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// At most `max` characters, control and bidirectional characters shown as spaces (see
/// [`super::one_line`]), `…` when cut.
fn clip(s: &str, max: usize) -> String {
    let clean = super::one_line(s);
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_paths() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(61), "1m");
        assert_eq!(age(7200), "2h");
        assert_eq!(age(200_000), "2d");
        assert_eq!(cwd_path("file:///tmp/a%20b"), "/tmp/a b");
        assert_eq!(cwd_path("/x"), "/x");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\u{202e}b\u{2066}c\x1b[1m\u{9b}d", 24), "a b c [1m d");
    }
}
