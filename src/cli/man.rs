//! `ahpty man [COMMAND]`: the manual pages, rendered from the clap parser with the sections
//! its help leaves out (EXIT STATUS, EXAMPLES, ENVIRONMENT, FILES).
//!
//! May touch: stdout.

use crate::Cli;
use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

/// `ahpty man [COMMAND]`: clap_mangen's sections, then EXIT STATUS (from the help footer),
/// EXAMPLES (from the long help), ENVIRONMENT and FILES.
pub(crate) fn print_man(command: Option<&str>) -> ExitCode {
    // `help` is a subcommand of the parser, not a page of its own.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Global options (-v) appear on every page.
    cmd.build();
    let page = match command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => {
                let full = format!("ahpty-{}", sub.get_name());
                sub.clone()
                    .name(full)
                    .bin_name(format!("ahpty {name}"))
                    .version(env!("CARGO_PKG_VERSION"))
                    .disable_version_flag(true)
            }
            None => {
                // Hidden subcommands (upgrade-check, for the daemon's own use) are not listed.
                let names: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name())
                    .collect();
                eprintln!(
                    "ahpty: no subcommand {name:?} (one of: {})",
                    names.join(", ")
                );
                return ExitCode::from(2);
            }
        },
    };
    match render_man(page, command) {
        Ok(out) => {
            let _ = std::io::stdout().lock().write_all(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ahpty: cannot render the man page: {e}");
            ExitCode::from(1)
        }
    }
}

pub(crate) fn render_man(page: clap::Command, command: Option<&str>) -> std::io::Result<Vec<u8>> {
    use roff::{bold, roman, Roff};
    let long = page
        .get_long_about()
        .or(page.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (description, examples) = match long.split_once("\n\nExamples:\n") {
        Some((d, e)) => (d.to_string(), e.to_string()),
        None => (long.clone(), String::new()),
    };
    let footer = page
        .get_after_help()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (notes, status) = match footer.find("Exit status") {
        Some(i) => (footer[..i].trim().to_string(), footer[i..].to_string()),
        None => (footer.trim().to_string(), String::new()),
    };
    let page = page
        .long_about(description)
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let man = clap_mangen::Man::new(page.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if page.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    let paragraphs = |roff: &mut Roff, text: &str| {
        for para in text.split("\n\n").filter(|p| !p.trim().is_empty()) {
            roff.control("PP", []);
            roff.text([roman(para.replace('\n', " "))]);
        }
    };
    if !notes.is_empty() {
        roff.control("SH", ["NOTES"]);
        paragraphs(&mut roff, &notes);
    }
    if !status.is_empty() {
        roff.control("SH", ["EXIT STATUS"]);
        paragraphs(&mut roff, &status);
    }
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        roff.control("nf", []);
        for line in examples.lines() {
            roff.text([roman(line.trim_start())]);
        }
        roff.control("fi", []);
    }
    let client = !matches!(
        command,
        Some("serve" | "config" | "service" | "completions" | "man")
    );
    let daemon = matches!(command, None | Some("serve" | "config"));
    let mut env: Vec<(&str, &str)> = Vec::new();
    if client {
        env.push((
            "AHPTY_URL",
            "The daemon the client commands talk to (like --url): ws://HOST:PORT?tkn=TOKEN, \
             wss://…, or unix:PATH.",
        ));
        env.push((
            "AHPTY_TOKEN",
            "The token sent to a ws:// URL without tkn (client commands); the token the daemon \
             requires (serve).",
        ));
    }
    if daemon {
        env.push((
            "AHPTY_*",
            "Every serve setting, named like its flag (AHPTY_LISTEN, AHPTY_TOKEN_FILE, …): \
             below flags, above the config file.",
        ));
        env.push((
            "AHPTY_CONFIG",
            "The config file to read instead of the default.",
        ));
        env.push((
            "XDG_CONFIG_HOME",
            "Where the config file is looked for (default ~/.config).",
        ));
    }
    if client || daemon {
        env.push((
            "XDG_RUNTIME_DIR",
            "Where the default socket lives (unset: /tmp/ahpty-$UID/).",
        ));
        env.push(("RUST_LOG", "Log filter (overrides -v), e.g. ahpty=debug."));
    }
    if !env.is_empty() {
        roff.control("SH", ["ENVIRONMENT"]);
        for (name, what) in env {
            roff.control("TP", []);
            roff.text([bold(name)]);
            roff.text([roman(what)]);
        }
    }
    let mut files: Vec<(&str, &str)> = Vec::new();
    if daemon || command == Some("service") {
        files.push((
            "$XDG_CONFIG_HOME/ahpty/config.toml",
            "The settings file (TOML, keys named like the flags); `ahpty config` shows what \
             is used.",
        ));
    }
    if daemon || client {
        files.push((
            "$XDG_RUNTIME_DIR/ahpty/ahpty.sock",
            "The daemon's default Unix socket (owner-only; no token needed), where the client \
             commands look first.",
        ));
    }
    if matches!(command, None | Some("service")) {
        files.push((
            "$XDG_CONFIG_HOME/systemd/user/ahpty.service",
            "The user unit `ahpty service install` writes.",
        ));
    }
    if !files.is_empty() {
        roff.control("SH", ["FILES"]);
        for (name, what) in files {
            roff.control("TP", []);
            roff.text([bold(name)]);
            roff.text([roman(what)]);
        }
    }
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(out)
}
