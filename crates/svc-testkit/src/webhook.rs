//! A recording webhook receiver for tests: answers every request (any method, any path) with a programmable
//! status sequence (e.g. 500 twice, then 200), optional extra headers such as `Retry-After`, an optional
//! delay and an optional endless answer body (a misbehaving receiver that never stops talking), and records
//! each request's method, path, headers and exact body bytes.
//!
//! It does not verify signatures: tests do that themselves, independently of the code under test.

use crate::ntfy::Served;
use axum::body::Body;
use axum::http::{HeaderMap, Request, Response};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The raw headers.
    pub headers: HeaderMap,
    /// The exact body bytes.
    pub body: Bytes,
    /// What the receiver answered.
    pub status: u16,
}

impl Received {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One programmed answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: u16,
    /// Extra headers, e.g. `("Retry-After", "1")`.
    pub headers: Vec<(String, String)>,
}

/// The running receiver; stops when dropped.
pub struct WebhookReceiver {
    served: Served,
    state: Arc<State>,
}

/// An answer body that never ends: `chunk` bytes of `x`, again and again, one chunk every `every` (as fast as
/// the client reads when `every` is zero), until the client hangs up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndlessBody {
    /// Bytes per chunk.
    pub chunk: usize,
    /// Pause between chunks.
    pub every: Duration,
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Reply>>,
    default_status: Mutex<u16>,
    delay: Mutex<Duration>,
    endless: Mutex<Option<EndlessBody>>,
    received: Mutex<Vec<Received>>,
}

impl WebhookReceiver {
    /// A receiver answering 200 to everything.
    pub async fn start() -> WebhookReceiver {
        let state = Arc::new(State::default());
        *lock(&state.default_status) = 200;
        let s = state.clone();
        let router = axum::Router::new().fallback(move |req: Request<Body>| handle(s.clone(), req));
        WebhookReceiver { served: Served::start(router).await, state }
    }

    /// `http://127.0.0.1:<port>/hook`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.served.addr())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.served.addr())
    }

    /// Answers the next requests with these statuses, in order, then with the default status.
    pub fn respond_with(&self, statuses: &[u16]) {
        lock(&self.state.script).extend(statuses.iter().map(|s| Reply { status: *s, headers: Vec::new() }));
    }

    /// Queues one answer with extra headers.
    pub fn respond_once_with_headers(&self, status: u16, headers: &[(&str, &str)]) {
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        lock(&self.state.script).push_back(Reply { status, headers });
    }

    /// The status used once the queued answers are used up.
    pub fn set_default_status(&self, status: u16) {
        *lock(&self.state.default_status) = status;
    }

    /// Waits this long before answering each request.
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.state.delay) = delay;
    }

    /// Answers every request with an endless body (`None`: the usual short JSON body again).
    pub fn set_endless_body(&self, body: Option<EndlessBody>) {
        *lock(&self.state.endless) = body;
    }

    /// Stops answering: the port is closed until [`WebhookReceiver::up`].
    pub fn down(&self) {
        self.served.stop();
    }

    /// Listens again on the same port.
    pub async fn up(&self) {
        self.served.restart().await;
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state.received).clone()
    }

    /// How many requests arrived (without copying them).
    pub fn received_count(&self) -> usize {
        lock(&self.state.received).len()
    }

    /// Waits until at least `n` requests arrived, or panics after `timeout`.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let r = self.received();
            if r.len() >= n {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {n} webhook requests, have {}",
                r.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `sha256=<hex>` of `body` under `secret`, computed from the SHA-256 primitive by the RFC 2104 construction,
/// independently of the `hmac` crate the sender uses, so tests check the sender against a second implementation.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret, &[body])))
}

/// The Standard Webhooks `webhook-signature` value for `key` (already decoded from `whsec_…`, or the raw secret
/// bytes): `v1,` + base64 of the HMAC-SHA256 of `{id}.{timestamp}.{body}`, by the same independent construction.
pub fn standard_signature(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    let mac = hmac_sha256(key, &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body]);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac))
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `secret`.
fn hmac_sha256(secret: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    const BLOCK: usize = 64;
    let mut key = [0u8; BLOCK];
    if secret.len() > BLOCK {
        key[..32].copy_from_slice(&Sha256::digest(secret));
    } else {
        key[..secret.len()].copy_from_slice(secret);
    }
    let pad = |byte: u8| key.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let mut inner = Sha256::new().chain_update(pad(0x36));
    for p in parts {
        inner.update(p);
    }
    let outer = Sha256::new().chain_update(pad(0x5c)).chain_update(inner.finalize()).finalize();
    outer.into()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn handle(state: Arc<State>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
    let reply = lock(&state.script)
        .pop_front()
        .unwrap_or_else(|| Reply { status: *lock(&state.default_status), headers: Vec::new() });
    lock(&state.received).push(Received {
        method: parts.method.to_string(),
        path: parts.uri.to_string(),
        headers: parts.headers,
        body,
        status: reply.status,
    });
    // Recorded first, so an attempt the client gave up on (timeout) still counts.
    let delay = *lock(&state.delay);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut resp = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        resp = resp.header(k.as_str(), v.as_str());
    }
    let endless = *lock(&state.endless);
    let body = match endless {
        Some(e) => endless_body(e),
        None => Body::from(format!("{{\"status\":{}}}", reply.status)),
    };
    resp.body(body).unwrap_or_default()
}

fn endless_body(e: EndlessBody) -> Body {
    let chunk = Bytes::from(vec![b'x'; e.chunk.max(1)]);
    let stream = futures::stream::unfold(chunk, move |chunk| async move {
        if !e.every.is_zero() {
            tokio::time::sleep(e.every).await;
        }
        Some((Ok::<Bytes, std::io::Error>(chunk.clone()), chunk))
    });
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn github_vector() {
        assert_eq!(
            signature(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
        // RFC 4231 test case 6: a key longer than the block.
        assert_eq!(
            signature(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First"),
            "sha256=60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn standard_webhooks_vector() {
        // The example of the Standard Webhooks specification (secret `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`).
        use base64::Engine as _;
        let key = base64::engine::general_purpose::STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            standard_signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
