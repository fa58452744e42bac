//! Property tests (proptest) standing in for fuzz targets, run by the normal `cargo test`:
//! the JSON-RPC entry point (`rpc::frame::parse` and the dispatch behind it, in process) and
//! the shell-integration output parser (`OutputParser::feed`). Each property runs a bounded
//! number of random cases (a few seconds in all); a failure prints the minimal failing input,
//! which belongs in a plain `#[test]` here once fixed.

use std::sync::Arc;

use ahpty::config::Config;
use ahpty::host::{Host, Outgoing};
use ahpty::rpc::frame::{parse, Incoming};
use ahpty::rpc::{Next, RpcConnection};
use ahpty::terminal::shell_integration::{OutputParser, Parsed};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

// ─── JSON-RPC framing ───────────────────────────────────────────────────────────────────

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON-RPC-ish object: each member present or not, right type or not.
fn arb_message() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof![Just(json!("2.0")), arb_json()]),
        prop::option::of(prop_oneof![
            any::<u32>().prop_map(|n| json!(n)),
            "[a-z0-9]{0,8}".prop_map(Value::String),
            arb_json()
        ]),
        prop::option::of(prop_oneof![
            "[a-zA-Z/]{0,16}".prop_map(Value::String),
            arb_json()
        ]),
        prop::option::of(arb_json()),
        prop::option::of(arb_json()),
    )
        .prop_map(|(jsonrpc, id, method, params, result)| {
            let mut m = Map::new();
            for (k, v) in [
                ("jsonrpc", jsonrpc),
                ("id", id),
                ("method", method),
                ("params", params),
                ("result", result),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

/// What `parse` must return, with ids as JSON values (the parser keeps their exact text).
#[derive(Debug, PartialEq)]
enum Expect {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response,
    MalformedNotification,
    Invalid {
        id: Value,
        code: i32,
    },
}

/// What `parse` returned, in the terms of [`Expect`].
fn actual(got: &Incoming) -> Expect {
    let id = |raw: &serde_json::value::RawValue| {
        serde_json::from_str::<Value>(raw.get()).expect("an echoed id is JSON")
    };
    match got {
        Incoming::Request {
            id: i,
            method,
            params,
        } => Expect::Request {
            id: id(i),
            method: method.clone(),
            params: params.clone(),
        },
        Incoming::Notification { method, params } => Expect::Notification {
            method: method.clone(),
            params: params.clone(),
        },
        Incoming::Response => Expect::Response,
        Incoming::MalformedNotification { .. } => Expect::MalformedNotification,
        Incoming::Invalid { id: i, error } => Expect::Invalid {
            id: id(i),
            code: error.code,
        },
    }
}

/// What `parse` must return for a JSON value, from the rules documented on it.
fn expected(v: &Value) -> Expect {
    let invalid = |id: Value, code: i32| Expect::Invalid { id, code };
    let Value::Object(obj) = v else {
        return invalid(Value::Null, -32600);
    };
    let id = obj.get("id");
    let echo = match id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid(echo, -32600);
    }
    if !matches!(id, None | Some(Value::Number(_)) | Some(Value::String(_))) {
        return invalid(Value::Null, -32600);
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        None if obj.contains_key("result") || obj.contains_key("error") => return Expect::Response,
        _ => return invalid(echo, -32600),
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) if id.is_none() => return Expect::MalformedNotification,
        Some(_) => return invalid(echo, -32602),
    };
    match id {
        Some(id) => Expect::Request {
            id: id.clone(),
            method,
            params,
        },
        None => Expect::Notification { method, params },
    }
}

/// Compares ignoring error messages.
fn same(a: &Incoming, b: &Expect) -> bool {
    actual(a) == *b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any text: never panics; not JSON → -32700 with a null id.
    #[test]
    fn parse_never_panics_on_text(text in ".{0,200}") {
        let got = parse(&text);
        if serde_json::from_str::<Value>(&text).is_err() {
            let ok = matches!(actual(&got), Expect::Invalid { id: Value::Null, code: -32700 });
            prop_assert!(ok, "{:?}", got);
        }
    }

    /// Any bytes made into text lossily (binary frames, broken UTF-8 replaced): never panics.
    #[test]
    fn parse_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&String::from_utf8_lossy(&bytes));
    }

    /// Structured messages are classified exactly as documented.
    #[test]
    fn parse_classifies_messages(v in prop_oneof![arb_message(), arb_json()]) {
        let text = v.to_string();
        let got = parse(&text);
        // Compare with the value as re-read (floats need not round-trip exactly).
        let v: Value = serde_json::from_str(&text).unwrap();
        let want = expected(&v);
        prop_assert!(same(&got, &want), "{v}: got {got:?}, want {want:?}");
    }
}

spec!(parse_survives_deep_nesting, {
    for depth in [127, 128, 129, 1000, 100_000] {
        let text = "[".repeat(depth);
        assert!(matches!(
            parse(&text),
            Incoming::Invalid { ref error, .. } if error.code == -32700
        ));
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(matches!(parse(&text), Incoming::Invalid { .. }));
        let text = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{}{}}}",
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        );
        let _ = parse(&text);
    }
});

// ─── Dispatch, in process ───────────────────────────────────────────────────────────────

const METHODS: &[&str] = &[
    "initialize",
    "reconnect",
    "ping",
    "subscribe",
    "unsubscribe",
    "dispatchAction",
    "createTerminal",
    "disposeTerminal",
    "listSessions",
    "fetchTurns",
    "nope",
    "",
];

fn arb_frame() -> impl Strategy<Value = String> {
    let channel = prop_oneof![
        Just(json!("ahp-root://")),
        Just(json!("ahp-terminal:/x")),
        Just(json!("ahp-session:/s")),
        Just(json!("not a uri")),
        arb_json(),
    ];
    let structured = (
        prop::sample::select(METHODS),
        prop::option::of(any::<u16>()),
        channel,
        arb_json(),
        arb_json(),
    )
        .prop_map(|(method, id, channel, action, extra)| {
            let mut params = json!({
                "channel": channel,
                "action": action,
                "protocolVersions": ["1.0.0"],
                "clientId": "fuzz",
                "clientSeq": 1,
                "extra": extra,
            });
            if let Value::Object(m) = &mut params {
                if let Value::Object(a) = &m["action"].clone() {
                    for (k, v) in a {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            let mut msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
            if let Some(id) = id {
                msg["id"] = json!(id);
            }
            msg.to_string()
        });
    prop_oneof![
        3 => structured,
        1 => arb_message().prop_map(|v| v.to_string()),
        1 => ".{0,64}",
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random frames through the real dispatch never panic, every request gets exactly one
    /// answer with its id, and the connection still works afterwards.
    #[test]
    fn dispatch_survives_random_frames(frames in prop::collection::vec(arb_frame(), 1..40)) {
        let rt = runtime();
        rt.block_on(async {
            let config = Config {
                shell: "/bin/true".into(),
                shell_integration: false,
                kill_grace: std::time::Duration::from_millis(10),
                ..Config::default()
            };
            let host = Host::new(&config);
            let (outbox, mut rx) = host.new_outbox();
            let mut conn = RpcConnection::new(host.clone(), outbox);
            let mut requests = 0usize;
            for f in &frames {
                if let Incoming::Request { .. } = parse(f) {
                    requests += 1;
                }
                if conn.handle_text(f).await == Next::Close {
                    return Ok(());
                }
            }
            let probe = r#"{"jsonrpc":"2.0","id":"probe","method":"ping","params":{"channel":"ahp-root://"}}"#;
            conn.handle_text(probe).await;
            let mut answers = 0usize;
            let mut probe_answered = false;
            while let Some(out) = rx.try_recv() {
                if let Outgoing::Text(t) = out {
                    let v: Value = serde_json::from_str(t.as_str()).expect("valid JSON out");
                    if v.get("id").is_some() && v.get("method").is_none() {
                        answers += 1;
                    }
                    if v.get("id") == Some(&json!("probe")) {
                        probe_answered = true;
                    }
                }
            }
            prop_assert!(probe_answered);
            // Each request and each malformed frame gets one answer; notifications none.
            prop_assert!(answers > requests, "{answers} answers for {requests} requests");
            drop(conn);
            host.shutdown().await;
            Ok(())
        })?;
    }
}

// ─── Shell-integration output parser ────────────────────────────────────────────────────

const NONCE: &str = "n0nce";

/// A piece of pty output and what a client must see of it.
fn arb_segment() -> impl Strategy<Value = (Vec<u8>, String)> {
    let text = "[a-zA-Z0-9 \r\n\t.,;:é€😀-]{1,16}".prop_map(|s| (s.clone().into_bytes(), s));
    let kept = prop_oneof![
        Just("\x1b[31m"),
        Just("\x1b[0m"),
        Just("\x1b[?25l"),
        Just("\x1b]0;title\x07"),
        Just("\x1b]2;t\x1b\\"),
        Just("\x1b]8;;http://x\x07"),
        Just("\x1bP1$r\x1b\\"),
        Just("\x1b7"),
    ]
    .prop_map(|s| (s.as_bytes().to_vec(), s.to_string()));
    let stripped = prop_oneof![
        Just("\x1b]633;A\x07".to_string()),
        Just("\x1b]633;B\x07".to_string()),
        Just("\x1b]633;C\x07".to_string()),
        Just("\x1b]633;D;0\x07".to_string()),
        Just(format!("\x1b]633;E;ls -l;{NONCE}\x07")),
        Just("\x1b]633;P;Cwd=/tmp\x1b\\".to_string()),
        Just("\x1b]133;A\x07".to_string()),
        Just("\x1b]133;D;1\x07".to_string()),
        // Terminal queries: cut too (the host answers them).
        Just("\x1b[6n".to_string()),
        Just("\x1b[c".to_string()),
        Just("\x1b]11;?\x1b\\".to_string()),
        Just("\x1b[?2004$p".to_string()),
    ]
    .prop_map(|s| (s.into_bytes(), String::new()));
    prop_oneof![4 => text, 2 => kept, 2 => stripped]
}

/// The text, the number of marks and the number of queries the parser reports.
fn run_parser(chunks: &[&[u8]]) -> (String, usize, usize) {
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c, &mut out);
    }
    p.finish(&mut out);
    let mut text = String::new();
    let (mut marks, mut queries) = (0, 0);
    for e in out {
        match e {
            Parsed::Text(t) => text.push_str(&t),
            Parsed::Mark(_) => marks += 1,
            Parsed::Query(_) => queries += 1,
        }
    }
    (text, marks, queries)
}

fn split_at_points<'a>(bytes: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = points.iter().map(|p| p % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut chunks = Vec::new();
    let mut start = 0;
    for c in cuts {
        chunks.push(&bytes[start..c]);
        start = c;
    }
    chunks.push(&bytes[start..]);
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Output text = input minus the shell-integration sequences and terminal queries, for any
    /// split of the input; every query is reported once.
    #[test]
    fn parser_strips_exactly_the_integration_sequences(
        segments in prop::collection::vec(arb_segment(), 0..24),
        points in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let input: Vec<u8> = segments.iter().flat_map(|(b, _)| b.clone()).collect();
        let want: String = segments.iter().map(|(_, s)| s.as_str()).collect();
        let (whole, marks, queries) = run_parser(&[&input]);
        prop_assert_eq!(&whole, &want);
        let (split, split_marks, split_queries) = run_parser(&split_at_points(&input, &points));
        prop_assert_eq!(&split, &want);
        prop_assert_eq!(marks, split_marks);
        prop_assert_eq!(queries, split_queries);
        let asked = segments
            .iter()
            .filter(|(b, s)| s.is_empty() && !b.starts_with(b"\x1b]633;") && !b.starts_with(b"\x1b]133;"))
            .count();
        prop_assert_eq!(queries, asked);
    }

    /// Arbitrary bytes (biased towards escape-sequence material): never panics, and the result
    /// does not depend on where the reads were cut.
    #[test]
    fn parser_is_split_invariant_on_any_bytes(
        input in prop::collection::vec(
            prop_oneof![
                4 => any::<u8>(),
                2 => prop::sample::select(b"\x1b]633;EABCDP\x07\\\x9c[0123456789;?".to_vec()),
            ],
            0..400,
        ),
        points in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let whole = run_parser(&[&input]);
        let split = run_parser(&split_at_points(&input, &points));
        prop_assert_eq!(&whole, &split);
        prop_assert!(!whole.0.contains("\x1b]633;"));
        let one_by_one: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(&whole, &run_parser(&one_by_one));
    }
}

spec!(parser_bounded_on_endless_sequences, {
    // An OSC that never ends, fed in 64 KiB reads: memory stays bounded and text resumes.
    let mut p = OutputParser::new(NONCE.into());
    let mut out = Vec::new();
    p.feed(b"\x1b]633;E;", &mut out);
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..64 {
        p.feed(&chunk, &mut out);
        out.clear();
    }
    p.feed(b"\x07after", &mut out);
    let text: String = out
        .iter()
        .filter_map(|e| match e {
            Parsed::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.ends_with("after"), "{text:?}");
    let _ = Arc::new(());
});
