//! A recording HTTP forward proxy, as a corporate network puts between a gateway and the internet: every
//! request head it is sent is recorded (its request line and `Proxy-Authorization`); a plain request
//! (absolute-form, `POST http://host/path`) is forwarded, head and all, to one fixed `target` address whatever
//! host it names, so a test can give upstreams names that resolve nowhere; a `CONNECT` is refused with 403
//! (a test cannot present a certificate the client trusts, so what it checks is that the tunnel was asked for).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request head the proxy was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `POST http://models.internal/v1/chat/completions HTTP/1.1`, `CONNECT models.internal:443 HTTP/1.1`.
    pub line: String,
    /// The `Proxy-Authorization` value, if any.
    pub auth: Option<String>,
}

/// A running proxy; stops when dropped.
pub struct ForwardProxy {
    /// `http://127.0.0.1:port`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

/// The longest request head read.
const MAX_HEAD: usize = 64 * 1024;

impl ForwardProxy {
    /// A proxy forwarding plain requests to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<ForwardProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, target, record.clone()));
            }
        });
        Ok(ForwardProxy { url, seen, task })
    }

    /// The heads seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client connection: each request head is recorded; the first plain one opens the connection to
/// `target`, after which bytes flow both ways unread (later requests on it are not recorded).
async fn serve(mut client: TcpStream, target: SocketAddr, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(n) if n > 0 && buf.len() < MAX_HEAD => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let line = head.lines().next().unwrap_or_default().to_string();
    let auth = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization").then(|| value.trim().to_string())
    });
    let connect = line.starts_with("CONNECT ");
    if let Ok(mut s) = seen.lock() {
        s.push(Seen { line, auth });
    }
    if connect {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(target).await else { return };
    if upstream.write_all(&buf).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
