//! A loopback HTTP/1 server for an axum router that can be stopped (port closed, every open connection
//! dropped) and restarted on the same port; used by every testkit server of the events work.

use axum::http::Request;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A loopback HTTP/1 server for an axum router that can be stopped (port closed, every connection dropped)
/// and restarted on the same port. Used by every testkit server; stops when dropped.
pub struct Served {
    addr: SocketAddr,
    router: axum::Router,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Served {
    /// Binds 127.0.0.1 on an ephemeral port and serves `router`.
    pub async fn start(router: axum::Router) -> Served {
        let listener = bind("127.0.0.1:0".parse().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))).await;
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("test server has no address: {e}"));
        let task = tokio::spawn(accept_loop(listener, router.clone()));
        Served { addr, router, task: Mutex::new(Some(task)) }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes the port and aborts every connection.
    pub fn stop(&self) {
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
    }

    /// Listens again on the same port (after [`Served::stop`]).
    pub async fn restart(&self) {
        self.stop();
        // Give the aborted task a moment to drop its listener before the port is bound again.
        tokio::task::yield_now().await;
        let mut tries = 0;
        let listener = loop {
            match try_bind(self.addr) {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot rebind {}: {e}", self.addr),
            }
        };
        *lock(&self.task) = Some(tokio::spawn(accept_loop(listener, self.router.clone())));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop();
    }
}

fn try_bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn bind(addr: SocketAddr) -> TcpListener {
    try_bind(addr).unwrap_or_else(|e| panic!("cannot bind a test server on {addr}: {e}"))
}

/// Accepts connections until aborted; aborting drops the listener and, with the `JoinSet`, every connection.
async fn accept_loop(listener: TcpListener, router: axum::Router) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let router = router.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| router.clone().oneshot(req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}
