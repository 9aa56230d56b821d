//! The HTTP server under the router: accepting connections, bounding what clients may hold, and shutting down.
//!
//! 1. Accept; every accepted socket gets `TCP_NODELAY` (Nagle's algorithm would hold a stream's last small
//!    write, `[DONE]`, until the client's delayed ACK, about 40 ms).
//! 2. Beyond `max_connections` open connections, a new one is answered 503 with `Retry-After` and the
//!    OpenAI-shaped body, then closed (`wire.rs`).
//! 3. Each connection is served by hyper (HTTP/1.1, and HTTP/2 with prior knowledge) under a watchdog that
//!    closes it when its headers are too slow or it stays idle too long (`conn.rs`); hyper's own bodiless
//!    error answers go out as JSON (`io.rs`). Each request carries the peer's address (in its `RequestId`),
//!    for the limit on failed authentications. With `server.tls` the connection is TLS first (`tls.rs`: the
//!    handshake within `header_read_timeout`, then the same; ALPN offers `h2` and `http/1.1`).
//! 4. On shutdown: stop accepting, let the requests under way finish, and close whatever is still open when
//!    `shutdown_timeout` has passed. The caller then waits for the settlement and outbox tasks, which run on
//!    their own `TaskTracker` and so finish even for a connection closed here.

mod conn;
mod io;
pub mod tls;
mod wire;

use crate::App;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use svc_config::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections answered 503 at the same time; beyond this a refused connection is closed without an answer.
const REFUSING_AT_ONCE: usize = 64;
/// How long a refused connection is read from after its answer, so that closing it does not reset the
/// connection before the client has read the answer (a close with unread input sends a TCP reset).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// At most one warning about refused connections per this period.
const REFUSAL_WARNING_EVERY: Duration = Duration::from_secs(10);

/// What clients may hold, from `server:` in the config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_timeout: Duration,
}

impl Limits {
    pub(crate) fn from_config(server: &ServerConfig) -> Limits {
        Limits {
            header_read_timeout: server.header_read_timeout,
            keep_alive_timeout: server.keep_alive_timeout,
            max_connections: server.max_connections.clamp(1, Semaphore::MAX_PERMITS),
            shutdown_timeout: server.shutdown_timeout,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains the connections (see the module docs).
pub(crate) async fn run(
    app: App,
    listener: TcpListener,
    limits: Limits,
    tls: Arc<arc_swap::ArcSwapOption<tokio_rustls::TlsAcceptor>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut http = auto::Builder::new(TokioExecutor::new());
    // The watchdog of `conn.rs` bounds header reads; hyper's timer would also cut idle keep-alive time short.
    http.http1().header_read_timeout(None);
    let connections = TaskTracker::new();
    let stop = conn::Stop { drain: CancellationToken::new(), close: CancellationToken::new() };
    let places = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    let refusal = Arc::<[u8]>::from(wire::too_many_connections(limits.max_connections));
    let mut refused = Refused::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    if !is_connection_error(&e) {
                        // Out of file descriptors, most often: wait for connections to close.
                        tracing::error!(error = %e, "cannot accept connections; trying again in a second");
                        tokio::select! {
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        match places.clone().try_acquire_owned() {
            Ok(place) => {
                let app = app.clone().with_peer(peer.ip());
                connections.spawn(conn::serve(tcp, tls.load_full(), app, http.clone(), limits, stop.clone(), place));
            }
            Err(_) => {
                refused.count(limits.max_connections);
                if let Ok(slot) = refusing.clone().try_acquire_owned() {
                    let (answer, close) = (refusal.clone(), stop.close.clone());
                    connections.spawn(async move {
                        tokio::select! {
                            () = refuse(tcp, &answer) => {}
                            () = close.cancelled() => {}
                        }
                        drop(slot);
                    });
                }
            }
        }
    }
    drop(listener);
    drop(app);
    stop.drain.cancel();
    connections.close();
    if tokio::time::timeout(limits.shutdown_timeout, connections.wait()).await.is_err() {
        tracing::warn!(
            connections = limits.max_connections.saturating_sub(places.available_permits()),
            "shutdown: closing the connections still open after {}s (server.shutdown_timeout_seconds)",
            limits.shutdown_timeout.as_secs()
        );
        stop.close.cancel();
        connections.wait().await;
    }
    Ok(())
}

/// Answers a connection beyond `max_connections`, then reads what the client sent for a moment before
/// closing, so that the client gets the answer rather than a reset.
async fn refuse(mut tcp: TcpStream, answer: &[u8]) {
    let deadline = Instant::now() + REFUSAL_LINGER;
    let _ = tokio::time::timeout_at(deadline, tcp.write_all(answer)).await;
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 1024];
    let _ =
        tokio::time::timeout_at(deadline, async { while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {} }).await;
}

/// Counts refused connections and warns about them at most once per [`REFUSAL_WARNING_EVERY`].
#[derive(Default)]
struct Refused {
    since_warning: u64,
    warned_at: Option<Instant>,
}

impl Refused {
    fn count(&mut self, max: usize) {
        self.since_warning += 1;
        if self.warned_at.is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_EVERY) {
            tracing::warn!(
                refused = self.since_warning,
                "connections refused: {max} are open (server.max_connections); each got 503"
            );
            self.since_warning = 0;
            self.warned_at = Some(Instant::now());
        }
    }
}

/// Errors of one connection, not of the listener: accepting again at once is right.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
