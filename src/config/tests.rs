//! Unit tests of the settings: parsing, precedence, limits and refusals.

use std::ffi::OsString;

use super::*;

#[test]
fn agent_env_arguments() {
    let args: Vec<AgentEnvArg> = ["PAGER=cat", "LC_ALL", "AI_AGENT=my_agent", "X=a=b", "E="]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let env = agent_env(true, &args);
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("PAGER"), Some("cat"));
    assert_eq!(get("LC_ALL"), None);
    assert_eq!(get("AI_AGENT"), Some("my_agent"));
    assert_eq!(get("X"), Some("a=b"));
    assert_eq!(get("E"), Some(""));
    assert_eq!(get("GIT_PAGER"), Some(""));
    assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
    let only = agent_env(false, &args[..1]);
    assert_eq!(only, vec![("PAGER".to_string(), "cat".to_string())]);
    assert!("=x".parse::<AgentEnvArg>().is_err());
    assert!("".parse::<AgentEnvArg>().is_err());
}

#[test]
fn default_socket_paths() {
    assert_eq!(
        default_socket_path_from(Some("/run/user/1000".into()), 1000),
        PathBuf::from("/run/user/1000/ahpty/ahpty.sock")
    );
    for unset in [None, Some("".into()), Some("relative/dir".into())] {
        assert_eq!(
            default_socket_path_from(unset, 1000),
            PathBuf::from("/tmp/ahpty-1000/ahpty.sock")
        );
    }
}

fn file_origin(line: usize) -> Origin {
    Origin::File {
        path: PathBuf::from("/c.toml"),
        line,
    }
}

/// Settings from `flags`, `env` (variable → value) and `file` (TOML text).
fn settings(flags: Layer, env: &[(&str, &str)], file: &str) -> Result<Settings, ConfigError> {
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| OsString::from(v))
    };
    let env = Layer::from_env(&get)?;
    let file = Layer::from_toml(Path::new("/c.toml"), file, None)?;
    Settings::resolve(&[&flags, &env, &file]).map(|(s, _)| s)
}

fn flag_token_file() -> Layer {
    Layer {
        token_file: Some(Val::flag(Some(PathBuf::from("/f")), "token_file")),
        ..Layer::default()
    }
}

fn flag_no_auth() -> Layer {
    Layer {
        no_auth: Some(Val::flag(true, "no_auth")),
        ..Layer::default()
    }
}

#[test]
fn auth_plan_follows_precedence() {
    let plan = |flags, env: &[(&str, &str)], file, token| {
        settings(flags, env, file).and_then(|s| s.auth_plan(token))
    };
    let flag = Origin::Flag("--token-file".into());
    // A token file from a flag beats $AHPTY_TOKEN; $AHPTY_TOKEN beats the file's.
    assert_eq!(
        plan(flag_token_file(), &[], "", true),
        Ok(AuthPlan::TokenFile("/f".into(), flag))
    );
    assert_eq!(
        plan(Layer::default(), &[], "token_file = \"/t\"\n", true),
        Ok(AuthPlan::EnvToken)
    );
    assert_eq!(
        plan(Layer::default(), &[], "token_file = \"/t\"\n", false),
        Ok(AuthPlan::TokenFile("/t".into(), file_origin(1)))
    );
    // --no-auth beats the file's token file; the file's no_auth loses to a flag's file.
    assert_eq!(
        plan(flag_no_auth(), &[], "token_file = \"/t\"\n", false),
        Ok(AuthPlan::Disabled(Origin::Flag("--no-auth".into())))
    );
    assert!(matches!(
        plan(flag_token_file(), &[], "no_auth = true\n", false),
        Ok(AuthPlan::TokenFile(..))
    ));
    assert_eq!(
        plan(Layer::default(), &[], "", false),
        Ok(AuthPlan::Generate)
    );
}

#[test]
fn auth_contradictions_are_invalid() {
    let invalid = |r: Result<AuthPlan, ConfigError>| matches!(r, Err(ConfigError::Invalid(_)));
    let plan = |flags, env: &[(&str, &str)], file, token| {
        settings(flags, env, file).and_then(|s| s.auth_plan(token))
    };
    // no_auth with $AHPTY_TOKEN set, from any source.
    assert!(invalid(plan(flag_no_auth(), &[], "", true)));
    assert!(invalid(plan(
        Layer::default(),
        &[],
        "no_auth = true\n",
        true
    )));
    // Both in one source.
    assert!(invalid(plan(
        Layer::default(),
        &[],
        "no_auth = true\ntoken_file = \"/t\"\n",
        false
    )));
    assert!(invalid(plan(
        Layer::default(),
        &[("AHPTY_NO_AUTH", "1"), ("AHPTY_TOKEN_FILE", "/t")],
        "",
        false
    )));
    // $AHPTY_TOKEN and $AHPTY_TOKEN_FILE together.
    assert!(invalid(plan(
        Layer::default(),
        &[("AHPTY_TOKEN_FILE", "/t")],
        "",
        true
    )));
}

#[test]
fn every_key_has_a_flag_a_variable_and_help() {
    for key in KEYS {
        assert!(default_text(key.name).is_some(), "{}", key.name);
        assert_eq!(key.env(), format!("AHPTY_{}", key.name.to_uppercase()));
        assert!(key.flag().starts_with("--") && !key.flag().contains('_'));
        assert!(help(key.name).contains(&key.env()), "{}", key.name);
    }
}

#[test]
fn env_lists_and_empty_values() {
    let s = settings(
        Layer::default(),
        &[
            ("AHPTY_LISTEN", "127.0.0.1:1, unix:/tmp/s.sock"),
            ("AHPTY_MAX_TERMINALS", ""),
        ],
        "",
    )
    .unwrap();
    assert_eq!(
        s.listen.value,
        vec![
            Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 1))),
            Listen::Unix("/tmp/s.sock".into())
        ]
    );
    assert_eq!(s.listen.origin, Origin::Env("AHPTY_LISTEN".into()));
    assert_eq!(s.max_terminals.origin, Origin::Default);
    // An empty list is refused.
    assert!(matches!(
        settings(Layer::default(), &[], "listen = []\n"),
        Err(ConfigError::Invalid(m)) if m.contains("listen")
    ));
}
