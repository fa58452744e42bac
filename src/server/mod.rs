//! The network face: a TCP listener, the WebSocket upgrade (with the [`upgrade`] checks), and
//! one task per connection ([`connection`]). Owns no AHP state: every connection talks to the
//! shared [`Host`]. On shutdown it disposes every terminal and closes every connection with a
//! WebSocket close frame (1001).

pub mod connection;
pub mod upgrade;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::host::Host;
use upgrade::UpgradePolicy;

/// How long connections get to flush their close frame at shutdown.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// A bound, not yet running, daemon.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    host: Arc<Host>,
    policy: Arc<UpgradePolicy>,
    max_message_bytes: usize,
}

impl Server {
    /// Binds the listener. Errors: the address is in use or cannot be bound; the message
    /// names the address.
    pub async fn bind(config: &Config) -> io::Result<Server> {
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {}", config.listen, describe(&e)),
            )
        })?;
        let local_addr = listener.local_addr()?;
        Ok(Server {
            listener,
            local_addr,
            host: Host::new(config),
            policy: Arc::new(UpgradePolicy::new(&config.allow_origins, &local_addr)),
            max_message_bytes: config.max_message_bytes,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The shared host.
    pub fn host(&self) -> Arc<Host> {
        self.host.clone()
    }

    /// Accepts connections until `shutdown` completes, then disposes every terminal (process
    /// groups killed) and closes every connection with code 1001.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tracing::info!("listening on ws://{}", self.local_addr);
        let reaper = tokio::spawn(self.host.clone().reap_orphans());
        let stall_watch = tokio::spawn(self.host.clone().watch_stalls());
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let host = self.host.clone();
                        let policy = self.policy.clone();
                        let max = self.max_message_bytes;
                        connections.spawn(connection::handle(stream, peer, host, policy, max));
                    }
                    Err(e) => {
                        // Out of file descriptors and similar: keep serving the others.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        tracing::info!("shutting down");
        drop(self.listener);
        reaper.abort();
        stall_watch.abort();
        self.host.shutdown().await;
        let drained = tokio::time::timeout(SHUTDOWN_FLUSH, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.shutdown().await;
        }
        tracing::info!("stopped");
    }
}

/// Binds `config.listen`, logs `listening on ws://ADDR` and serves until `shutdown`.
pub async fn serve(config: &Config, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    let server = Server::bind(config).await?;
    server.run(shutdown).await;
    Ok(())
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::AddrInUse => "address already in use".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::AddrNotAvailable => "address not available on this machine".into(),
        _ => e.to_string(),
    }
}
