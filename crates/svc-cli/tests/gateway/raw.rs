//! Raw TCP clients for what an HTTP library would hide: requests that do not parse, headers sent one byte at
//! a time, idle keep-alive connections, and when the server closes a connection.
#![allow(dead_code)]

use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// One HTTP/1.1 response as read off the wire.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, showing the response, when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| panic!("not a JSON body: {self:?}"))
    }
}

pub async fn connect(addr: &str) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// Reads one response (a `content-length` body) within `within`.
pub async fn read_response(stream: &mut TcpStream, within: Duration) -> Raw {
    let deadline = Instant::now() + within;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(raw) = parse(&buf) {
            return raw;
        }
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("no complete response in time; got {:?}", String::from_utf8_lossy(&buf)))
            .unwrap_or(0);
        if n == 0 {
            panic!("connection closed before a complete response; got {:?}", String::from_utf8_lossy(&buf));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `request` on a new connection and reads the response.
pub async fn exchange(addr: &str, request: &[u8]) -> Raw {
    let mut stream = connect(addr).await;
    stream.write_all(request).await.unwrap();
    read_response(&mut stream, Duration::from_secs(10)).await
}

/// Waits up to `within` for the server to close the connection (end of stream or reset); how long it took,
/// or `None` when it is still open. Whatever the server sends is read and dropped.
pub async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(started + within, stream.read(&mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Splits a complete response; `None` while the head or the body is still incomplete.
fn parse(buf: &[u8]) -> Option<Raw> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let body = buf.get(end + 4..end + 4 + length)?.to_vec();
    Some(Raw { status, headers, body })
}
