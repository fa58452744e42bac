//! Runs one command in a fresh ahpty terminal: connects, creates a terminal, types a command,
//! prints what it printed and its exit code, and disposes of the terminal.
//!
//! Usage: hello 'ws://127.0.0.1:8765?tkn=TOKEN' (the URL `ahpty serve` printed). The shell
//! needs command detection (bash, zsh and fish have it) for `terminal/commandFinished`.

use ahp::ahp_types::actions::{StateAction, TerminalInputAction};
use ahp::{Client, ClientConfig, SubscriptionEvent};
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: hello URL (the URL `ahpty serve` printed)")?;
    let transport = ahp_ws::WebSocketTransport::connect(&url).await?;
    let client = Client::connect(transport, ClientConfig::default()).await?;
    client
        .initialize("hello".into(), vec!["1.0.0".into()], vec![])
        .await?;

    // A terminal of our own (a URI nobody else uses), claimed by us.
    let terminal = format!("ahp-terminal:/hello-{}", std::process::id());
    let claim = json!({"kind": "client", "clientId": "hello"});
    client
        .request::<_, Value>(
            "createTerminal",
            json!({"channel": terminal, "claim": claim}),
        )
        .await?;
    let (_snapshot, mut events) = client.subscribe(terminal.clone()).await?;

    let input = TerminalInputAction {
        data: "echo hello-$((6*7))\r".into(),
    };
    client
        .dispatch(terminal.clone(), StateAction::TerminalInput(input))
        .await?;

    // The command's output is the terminal/data between commandExecuted and commandFinished.
    let mut running = false;
    let mut output = String::new();
    let exit_code = loop {
        match events.recv().await {
            Some(SubscriptionEvent::Action(envelope)) => match envelope.action {
                StateAction::TerminalCommandExecuted(_) => running = true,
                StateAction::TerminalData(d) if running => output.push_str(&d.data),
                StateAction::TerminalCommandFinished(f) => break f.exit_code,
                _ => {}
            },
            Some(_) => {}
            None => return Err("the connection closed".into()),
        }
    };
    print!("{}", output.replace("\r\n", "\n"));
    println!(
        "exit code: {}",
        exit_code.map_or("unknown".into(), |c| c.to_string())
    );

    client
        .request::<_, Value>("disposeTerminal", json!({"channel": terminal}))
        .await?;
    Ok(())
}
