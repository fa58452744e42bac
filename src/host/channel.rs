//! Channel URIs and working directories: what a string names, under the project's decisions
//! D1 (any absolute URI with a non-reserved scheme is an opaque terminal key, kept
//! byte-for-byte), D2 (unknown targets) and D4 (cwd accepted as a `file://` URI or an
//! absolute path, always reported as a `file://` URI). Pure functions; no state.

use std::path::{Path, PathBuf};

use url::Url;

use super::error::HostError;
use super::validate::MAX_URI_BYTES;

/// Longest `createTerminal.cwd`, in bytes (the kernel's `PATH_MAX`).
pub const MAX_CWD_BYTES: usize = 4096;

/// URI schemes reserved by AHP; never accepted as terminal keys.
pub const RESERVED_SCHEMES: &[&str] = &[
    "ahp-root",
    "ahp-session",
    "ahp-chat",
    "ahp-changeset",
    "ahp-resource-watch",
    "ahp-otlp",
    "ahp-automations",
    "ahp-canvas",
];

pub use crate::proto::ROOT;

/// What a channel string refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelKind {
    /// `ahp-root://`.
    Root,
    /// An `ahp-session:` or `ahp-chat:` URI (ahpty hosts none: -32001).
    Session,
    /// Another reserved scheme ahpty does not serve.
    ReservedOther,
    /// A terminal key (which may or may not exist).
    Terminal,
    /// Not an absolute URI.
    Invalid(String),
}

/// Classifies a channel string. One longer than [`MAX_URI_BYTES`] is `Invalid` (and is not
/// parsed).
pub fn classify(channel: &str) -> ChannelKind {
    if channel == ROOT {
        return ChannelKind::Root;
    }
    if channel.len() > MAX_URI_BYTES {
        return ChannelKind::Invalid(format!(
            "a URI of {} bytes is longer than the limit of {MAX_URI_BYTES} bytes",
            channel.len()
        ));
    }
    match Url::parse(channel) {
        Ok(url) => match url.scheme() {
            "ahp-session" | "ahp-chat" => ChannelKind::Session,
            s if RESERVED_SCHEMES.contains(&s) => ChannelKind::ReservedOther,
            _ => ChannelKind::Terminal,
        },
        Err(e) => ChannelKind::Invalid(format!("{channel:?} is not an absolute URI: {e}")),
    }
}

/// Whether `channel` is an OTLP telemetry channel (`ahp-otlp:`, any case): stateless, and
/// never fed by ahpty, which exports no telemetry.
pub fn is_otlp(channel: &str) -> bool {
    channel
        .get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("ahp-otlp:"))
}

/// Checks a `createTerminal.channel` (D1): an absolute URI with a non-reserved scheme.
/// Errors: invalid params (-32602) naming the value.
pub fn check_new_terminal_uri(channel: &str) -> Result<(), HostError> {
    match classify(channel) {
        ChannelKind::Terminal => Ok(()),
        ChannelKind::Invalid(msg) => Err(HostError::invalid_params(format!("channel: {msg}"))),
        _ => Err(HostError::invalid_params(format!(
            "channel: {channel:?} uses a scheme reserved by AHP; use e.g. ahp-terminal:/<id>"
        ))),
    }
}

/// Resolves a `createTerminal.cwd` (D4) to an existing directory the daemon may enter.
///
/// Errors: a relative path, another URI scheme, a non-directory, a directory the daemon has no
/// permission to enter, or more than [`MAX_CWD_BYTES`] → invalid params (-32602) naming it; a
/// path that does not exist → not found (-32008) naming it. Never falls back to another directory.
pub fn resolve_cwd(cwd: &str) -> Result<PathBuf, HostError> {
    if cwd.len() > MAX_CWD_BYTES {
        return Err(HostError::invalid_params(format!(
            "cwd: {} bytes is longer than the limit of {MAX_CWD_BYTES} bytes",
            cwd.len()
        )));
    }
    let path = if cwd.starts_with('/') {
        PathBuf::from(cwd)
    } else if let Ok(url) = Url::parse(cwd) {
        if url.scheme() != "file" {
            return Err(HostError::invalid_params(format!(
                "cwd: {cwd:?} must be a file:// URI or an absolute path"
            )));
        }
        url.to_file_path().map_err(|_| {
            HostError::invalid_params(format!("cwd: {cwd:?} is not a local file URI"))
        })?
    } else {
        return Err(HostError::invalid_params(format!(
            "cwd: {cwd:?} is relative; give a file:// URI or an absolute path"
        )));
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => match may_enter(&path) {
            Ok(()) => Ok(path),
            Err(e) => Err(HostError::invalid_params(format!(
                "cwd: the daemon may not enter {}: {e}",
                path.display()
            ))),
        },
        Ok(_) => Err(HostError::invalid_params(format!(
            "cwd: {} is not a directory",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(HostError::not_found(format!(
            "cwd: directory {} does not exist",
            path.display()
        ))),
        Err(e) => Err(HostError::invalid_params(format!(
            "cwd: cannot use {}: {e}",
            path.display()
        ))),
    }
}

/// Whether this process may make `dir` its working directory (search permission, `X_OK`).
fn may_enter(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the path holds a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The `file://` URI of an absolute path (percent-encoded; D4).
pub fn file_uri(path: &Path) -> String {
    Url::from_file_path(path)
        .map(String::from)
        .unwrap_or_else(|_| format!("file://{}", path.display()))
}

/// The user's home directory: `$HOME`, else `/`.
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::error::ErrorKind;

    #[test]
    fn classification() {
        assert_eq!(classify("ahp-root://"), ChannelKind::Root);
        assert_eq!(classify("ahp-session:/s1"), ChannelKind::Session);
        assert_eq!(classify("ahp-chat:/c"), ChannelKind::Session);
        assert_eq!(
            classify("ahp-automations://catalog"),
            ChannelKind::ReservedOther
        );
        assert_eq!(classify("ahp-terminal:/t1"), ChannelKind::Terminal);
        assert_eq!(classify("agenthost-terminal:/5f0c"), ChannelKind::Terminal);
        assert!(matches!(classify("t1"), ChannelKind::Invalid(_)));
        assert!(matches!(classify(""), ChannelKind::Invalid(_)));
    }

    #[test]
    fn cwd_forms() {
        assert_eq!(resolve_cwd("/").unwrap(), PathBuf::from("/"));
        assert_eq!(resolve_cwd("file:///usr").unwrap(), PathBuf::from("/usr"));
        assert_eq!(
            resolve_cwd("/definitely/not/here").unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            resolve_cwd("file:///definitely/not/here").unwrap_err().kind,
            ErrorKind::NotFound
        );
        assert_eq!(
            resolve_cwd("/etc/passwd").unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        assert_eq!(
            resolve_cwd("tmp").unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        assert_eq!(
            resolve_cwd("https://example.com/").unwrap_err().kind,
            ErrorKind::InvalidParams
        );
        assert!(resolve_cwd("/etc/passwd")
            .unwrap_err()
            .message
            .contains("/etc/passwd"));
    }

    #[test]
    fn file_uris_are_percent_encoded() {
        assert_eq!(
            file_uri(Path::new("/tmp/My Dir/✓")),
            "file:///tmp/My%20Dir/%E2%9C%93"
        );
    }
}
