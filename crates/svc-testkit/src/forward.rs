//! A TCP forwarder a test controls, to cut a process off from a server (the gateway from its PostgreSQL) and
//! let it back: [`Forwarder::cut`] closes the listener and every live connection (both ends see them close),
//! [`Forwarder::restore`] listens again on the same port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// A forwarder from `127.0.0.1:port` to a target; cut and restored at will, stopped when dropped.
pub struct Forwarder {
    addr: SocketAddr,
    target: SocketAddr,
    running: Mutex<Option<Running>>,
}

struct Running {
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Forwarder {
    /// Forwards a fresh port of 127.0.0.1 to `target` (`host:port`).
    ///
    /// # Panics
    /// When `target` is not an address or no port can be bound: a test cannot run without it.
    pub async fn start(target: &str) -> Forwarder {
        let target = tokio::net::lookup_host(target).await.ok().and_then(|mut a| a.next());
        let Some(target) = target else { panic!("the forwarder's target is not an address") };
        let listener = match listen(SocketAddr::from(([127, 0, 0, 1], 0))) {
            Ok(l) => l,
            Err(e) => panic!("the forwarder cannot listen: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("the forwarder has no address: {e}"),
        };
        let f = Forwarder { addr, target, running: Mutex::new(None) };
        f.serve(listener);
        f
    }

    /// The port it listens on (the same after a restore).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops listening and closes every live connection; returns once they are closed.
    pub async fn cut(&self) {
        let running = self.running.lock().ok().and_then(|mut r| r.take());
        let Some(running) = running else { return };
        running.accept.abort();
        let _ = running.accept.await;
        let connections = running.connections.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
        for c in connections {
            c.abort();
        }
        // An aborted task drops its sockets when it is next polled: let the runtime get to them.
        tokio::task::yield_now().await;
    }

    /// Listens again on the same port (after [`Forwarder::cut`]).
    ///
    /// # Panics
    /// When the port cannot be bound again within 10 s.
    pub async fn restore(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match listen(self.addr) {
                Ok(listener) => return self.serve(listener),
                Err(e) if tokio::time::Instant::now() > deadline => panic!("the forwarder cannot listen again: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    fn serve(&self, listener: TcpListener) {
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (target, conns) = (self.target, connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                if let Ok(mut c) = conns.lock() {
                    c.retain(|h| !h.is_finished());
                    c.push(pipe.abort_handle());
                }
            }
        });
        if let Ok(mut r) = self.running.lock() {
            *r = Some(Running { accept, connections });
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(running) = self.running.lock().ok().and_then(|mut r| r.take()) {
            running.accept.abort();
            for c in running.connections.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default() {
                c.abort();
            }
        }
    }
}

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_cut_closes_every_connection_and_a_restore_listens_on_the_same_port() {
        // An echo server behind the forwarder.
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let f = Forwarder::start(&target).await;
        let addr = format!("127.0.0.1:{}", f.port());
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        f.cut().await;
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), c.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the live connection is closed: {closed:?}");
        assert!(TcpStream::connect(&addr).await.is_err(), "nothing listens while cut");
        f.restore().await;
        let mut c = TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"yo").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"yo");
    }
}
