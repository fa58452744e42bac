//! UTF-8 on the output path, black-box (docs/protocol.md, "Output"): characters split across
//! pty reads, invalid bytes, partial characters at EOF.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

async fn shell(d: &Daemon, tag: &str) -> (Raw, String) {
    let (mut raw, _) = Raw::connect_init(&d.url(), tag, &[]).await;
    let t = term_uri(tag);
    let r = raw
        .request(
            "createTerminal",
            json!({"channel": t, "claim": {"kind": "client", "clientId": tag}}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = raw.request("subscribe", json!({"channel": t})).await;
    assert!(r["result"]["snapshot"].is_object(), "{r}");
    raw.ready(&t).await;
    (raw, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multibyte_lines_arrive_intact() {
    let d = Daemon::start();
    let (mut raw, t) = shell(&d, "utf8-lines").await;
    // Typed as ASCII escapes so only the output holds the characters.
    raw.type_text(
        &t,
        "for i in $(seq 1 3000); do printf 'L%d \\xe2\\x94\\x80\\xe2\\x94\\x82\\xe2\\x94\\x8c \\xf0\\x9f\\x98\\x80 \\xe4\\xb8\\xad\\xe6\\x96\\x87 \\xc3\\xa9\\n' $i; done; echo end-$((8*8))\r",
    )
    .await;
    raw.wait_data(&t, "end-64", SHELL_TIMEOUT).await;
    let data = raw.data(&t);
    assert!(
        !data.contains('\u{FFFD}'),
        "U+FFFD in output: {}",
        tail(&data, 500)
    );
    let lines: Vec<&str> = data
        .split("\r\n")
        .map(|l| l.rsplit('\r').next().unwrap_or(l))
        .filter(|l| l.starts_with('L'))
        .collect();
    let want: Vec<String> = (1..=3000).map(|i| format!("L{i} ─│┌ 😀 中文 é")).collect();
    assert_eq!(lines.len(), want.len(), "{}", tail(&data, 500));
    for (got, want) in lines.iter().zip(&want) {
        assert_eq!(got, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_bytes_become_replacement_characters() {
    let d = Daemon::start();
    let (mut raw, t) = shell(&d, "utf8-invalid").await;
    raw.type_text(
        &t,
        "printf 'a\\xffb\\xc0\\x80c\\xed\\xa0\\x80d\\x9be\\n'; echo inv-$((9*9))\r",
    )
    .await;
    raw.wait_data(&t, "inv-81", SHELL_TIMEOUT).await;
    let data = raw.data(&t);
    let want = "a\u{FFFD}b\u{FFFD}\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}d\u{FFFD}e\r\n";
    assert!(
        data.contains(want),
        "expected {want:?} in {}",
        tail(&data, 400)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bytes_keep_the_connection_valid() {
    let d = Daemon::start();
    let (mut raw, t) = shell(&d, "utf8-random").await;
    raw.type_text(&t, "head -c 200000 /dev/urandom; echo; echo ok-$((2+3))\r")
        .await;
    // Raw panics on any frame that is not valid JSON text; a closed connection fails the wait.
    raw.wait_data(&t, "ok-5", Duration::from_secs(30)).await;
    assert!(raw.closed.is_none());
    let r = raw.request("ping", json!({"channel": ROOT})).await;
    assert!(r["result"].is_null(), "{r}");
    // A fresh subscriber's snapshot is valid too.
    let (mut other, _) = Raw::connect_init(&d.url(), "utf8-random-2", &[]).await;
    let r = other.request("subscribe", json!({"channel": t})).await;
    assert!(
        r["result"]["snapshot"]["state"]["content"].is_array(),
        "{r}"
    );
}
