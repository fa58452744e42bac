//! Picking a terminal from what the user typed (`TERMINAL` of attach, send, kill, logs).
//!
//! In this order, the first rule that matches anything decides:
//! 1. the exact URI (`ahp-terminal:/t1`);
//! 2. a number: the daemon's number for the terminal, as `ahpty ls` shows it (`3`, or `#3`);
//! 3. the exact title (`make`);
//! 4. the exact name part of the URI, after its scheme and slashes (`t1`);
//! 5. a prefix of the URI, of its name part or of the title (`ahp-terminal:/5c`, `5c`, `ma`).
//!
//! A rule matching two or more terminals is an ambiguity; no rule matching is a no-match. Both
//! are one line each (exit 1) naming the candidates or how to list them.
//!
//! A pure function over the listing; touches nothing.

use super::Failure;
use crate::proto::catalog::TerminalSummary;

/// The terminal `query` designates among `terminals` (see the module rules).
pub fn select<'a>(
    terminals: &'a [TerminalSummary],
    query: &str,
) -> Result<&'a TerminalSummary, Failure> {
    let q = query.trim();
    if q.is_empty() {
        return Err(Failure::failed(
            "the terminal to use is empty: give its number, title or URI (see `ahpty ls`)",
        ));
    }
    let number = q.strip_prefix('#').unwrap_or(q);
    let by_number = |t: &TerminalSummary| {
        number.bytes().all(|b| b.is_ascii_digit()) && number.parse::<u64>().ok() == Some(t.id)
    };
    let rules: [&dyn Fn(&TerminalSummary) -> bool; 5] = [
        &|t| t.resource == q,
        &by_number,
        &|t| t.title == q,
        &|t| name_part(&t.resource) == q,
        &|t| {
            t.resource.starts_with(q)
                || name_part(&t.resource).starts_with(q)
                || t.title.starts_with(q)
        },
    ];
    for rule in rules {
        let found: Vec<&TerminalSummary> = terminals.iter().filter(|t| rule(t)).collect();
        match found.len() {
            0 => continue,
            1 => return Ok(found[0]),
            n => {
                let mut names: Vec<String> = found
                    .iter()
                    .take(5)
                    .map(|t| format!("{} {:?}", t.id, t.title))
                    .collect();
                if n > 5 {
                    names.push(format!("and {} more", n - 5));
                }
                return Err(Failure::failed(format!(
                    "{q:?} matches {n} terminals ({}): use its number or full URI",
                    names.join(", ")
                )));
            }
        }
    }
    if terminals.is_empty() {
        return Err(Failure::failed(format!(
            "no terminal matches {q:?}: the daemon has no terminals (`ahpty new` creates one)"
        )));
    }
    Err(Failure::failed(format!(
        "no terminal matches {q:?} (`ahpty ls` lists them by number, title and URI)"
    )))
}

/// The part of a URI after its scheme and leading slashes: `t1` for `ahp-terminal:/t1`.
pub fn name_part(uri: &str) -> &str {
    match uri.split_once(':') {
        Some((_, rest)) => rest.trim_start_matches('/'),
        None => uri,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::state::{
        TerminalClaim, TerminalClientClaim, TerminalLifecycleState, TerminalRunningLifecycleState,
    };

    fn term(id: u64, uri: &str, title: &str) -> TerminalSummary {
        TerminalSummary {
            id,
            resource: uri.into(),
            title: title.into(),
            claim: TerminalClaim::Client(TerminalClientClaim {
                client_id: "c".into(),
            }),
            holder: "c".into(),
            holder_connected: true,
            lifecycle: TerminalLifecycleState::Running(TerminalRunningLifecycleState {}),
            cwd: None,
            cols: None,
            rows: None,
            created_at: 0,
            supports_command_detection: None,
            restored: false,
        }
    }

    #[test]
    fn rules_in_order() {
        let ts = vec![
            term(1, "ahp-terminal:/build", "make"),
            term(2, "ahp-terminal:/5cafe", "bash"),
            term(3, "ahp-terminal:/5cab", "bash"),
            term(12, "agenthost-terminal:/3", "12"),
        ];
        let id = |q: &str| select(&ts, q).map(|t| t.id);
        assert_eq!(id("ahp-terminal:/build"), Ok(1));
        assert_eq!(id("2"), Ok(2));
        assert_eq!(id("#3"), Ok(3));
        // A number wins over a title that looks like one.
        assert_eq!(id("12"), Ok(12));
        assert_eq!(id("make"), Ok(1));
        assert_eq!(id("build"), Ok(1));
        assert_eq!(id("5caf"), Ok(2));
        assert_eq!(id("ma"), Ok(1));
        assert_eq!(id("agent"), Ok(12));
        let amb = select(&ts, "bash").unwrap_err();
        assert!(
            amb.message.contains("matches 2 terminals") && amb.message.contains("2 \"bash\""),
            "{amb}"
        );
        let amb = select(&ts, "5ca").unwrap_err();
        assert!(amb.message.contains("matches 2"), "{amb}");
        let none = select(&ts, "nope").unwrap_err();
        assert!(
            none.message.contains("no terminal matches \"nope\""),
            "{none}"
        );
        assert_eq!(none.code, 1);
        assert!(select(&[], "x")
            .unwrap_err()
            .message
            .contains("no terminals"));
        assert!(select(&ts, "99").is_err());
    }
}
