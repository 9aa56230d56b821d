//! An ntfy-compatible push test server that behaves like a real ntfy v2.13 where svc cares
//! (shared/reference/ntfy.md): publish on `POST`/`PUT /<topic>` with header or query parameters and as JSON on
//! `/`, priority validation (400, code 40007), the 4095-byte text body limit (400, code 40014), topic validation
//! (an invalid topic is a 404, a reserved one 400 code 40010), optional token auth checked before routing
//! (401 code 40101 for an unknown token, 403 code 40301 without write permission), `/<topics>/json` NDJSON
//! subscriptions with the `open` event, `since=` and `poll=1`, `/v1/health`, and every error as
//! `{"code","http","error"}`.
//!
//! Programmable: [`NtfyServer::fail_next`] answers the next publishes with a status, [`NtfyServer::down`]
//! closes the port (connections refused) and [`NtfyServer::up`] reopens the same port. It records every
//! publish attempt ([`NtfyServer::requests`]) and every stored message ([`NtfyServer::messages`]).
//! Not implemented: attachments, e-mail, delays, SSE/WebSocket/raw streams, rate limiting (use `fail_next`).

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

mod rfc2047;
mod served;

pub use rfc2047::decode_rfc2047;
pub use served::Served;

/// Topics a real ntfy reserves by default.
const RESERVED: &[&str] = &["docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"];

/// A stored message, serialized exactly like ntfy's message objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// 12 characters.
    pub id: String,
    /// Unix seconds.
    pub time: u64,
    /// `time` + 12 h.
    pub expires: u64,
    /// `message`.
    pub event: String,
    /// The topic.
    pub topic: String,
    /// The decoded title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The text.
    pub message: String,
    /// 1–5; omitted when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Decoded, trimmed tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// One publish attempt as received (also the refused ones).
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// `POST` or `PUT`.
    pub method: String,
    /// The path and query.
    pub uri: String,
    /// The raw headers.
    pub headers: HeaderMap,
    /// The raw body.
    pub body: Bytes,
    /// What the server answered.
    pub status: u16,
}

impl PublishRequest {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Who may do what when access control is on.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Tokens that may publish and subscribe.
    pub write_tokens: Vec<String>,
    /// Tokens that may only subscribe (publishing gets 403).
    pub read_tokens: Vec<String>,
}

/// The running server; stops when dropped.
pub struct NtfyServer {
    served: Served,
    state: Arc<State>,
}

struct State {
    access: Option<Access>,
    messages: Mutex<Vec<Message>>,
    requests: Mutex<Vec<PublishRequest>>,
    fail: Mutex<VecDeque<u16>>,
    live: broadcast::Sender<Message>,
    next_id: AtomicU64,
}

impl NtfyServer {
    /// A server without access control (it ignores `Authorization`, like a default ntfy).
    pub async fn start() -> NtfyServer {
        NtfyServer::start_with(None).await
    }

    /// A server with access control: anonymous users may do nothing; `access` lists the known tokens.
    pub async fn with_auth(access: Access) -> NtfyServer {
        NtfyServer::start_with(Some(access)).await
    }

    async fn start_with(access: Option<Access>) -> NtfyServer {
        let state = Arc::new(State {
            access,
            messages: Mutex::default(),
            requests: Mutex::default(),
            fail: Mutex::default(),
            live: broadcast::channel(1024).0,
            next_id: AtomicU64::new(1),
        });
        let s = state.clone();
        let router = axum::Router::new().fallback(move |req: Request<Body>| handle(s.clone(), req));
        NtfyServer { served: Served::start(router).await, state }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.served.addr())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.served.addr()
    }

    /// Every stored message, in publish order.
    pub fn messages(&self) -> Vec<Message> {
        lock(&self.state.messages).clone()
    }

    /// How many messages are stored (without copying them).
    pub fn message_count(&self) -> usize {
        lock(&self.state.messages).len()
    }

    /// Every publish attempt, in arrival order.
    pub fn requests(&self) -> Vec<PublishRequest> {
        lock(&self.state.requests).clone()
    }

    /// Answers the next `n` publishes with `status` (and ntfy's error JSON) instead of storing them.
    pub fn fail_next(&self, n: usize, status: u16) {
        lock(&self.state.fail).extend(std::iter::repeat_n(status, n));
    }

    /// Closes the port and drops every open connection: connections are refused until [`NtfyServer::up`].
    pub fn down(&self) {
        self.served.stop();
    }

    /// Listens again on the same port.
    pub async fn up(&self) {
        self.served.restart().await;
    }

    /// Waits until at least `n` messages are stored, or panics after `timeout`.
    pub async fn wait_for_messages(&self, n: usize, timeout: Duration) -> Vec<Message> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let m = self.messages();
            if m.len() >= n {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {n} ntfy messages, have {}",
                m.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn error(status: u16, code: u32, text: &str) -> Response<Body> {
    let body = serde_json::json!({"code": code, "http": status, "error": text}).to_string() + "\n";
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn json_line(status: u16, value: &impl Serialize) -> Response<Body> {
    let body = serde_json::to_string(value).unwrap_or_default() + "\n";
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

/// Who the caller is.
enum Caller {
    Anonymous,
    Reader,
    Writer,
}

async fn handle(state: Arc<State>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
    let caller = match authenticate(&state, &parts.headers) {
        Ok(c) => c,
        Err(resp) => {
            if matches!(parts.method, Method::POST | Method::PUT) {
                record(&state, &parts.method, &parts.uri, &parts.headers, &body, 401);
            }
            return *resp;
        }
    };
    let path = parts.uri.path().trim_start_matches('/').to_string();
    let query = parse_query(&parts.uri);
    let method = parts.method.clone();
    if path == "v1/health" && method == Method::GET {
        return json_line(200, &serde_json::json!({"healthy": true}));
    }
    if method == Method::POST || method == Method::PUT {
        let resp = if path.is_empty() {
            publish_json(&state, &caller, &body)
        } else if valid_topic(&path) {
            publish(&state, &caller, &path, &parts.headers, &query, &body)
        } else {
            error(404, 40401, "page not found")
        };
        record(&state, &method, &parts.uri, &parts.headers, &body, resp.status().as_u16());
        return resp;
    }
    if method == Method::GET {
        if let Some(topics) = path.strip_suffix("/json") {
            let topics: Vec<String> = topics.split(',').map(str::to_string).collect();
            if topics.iter().all(|t| valid_topic(t)) {
                return subscribe(&state, &caller, topics, &query);
            }
        }
        if let Some(topic) = path.strip_suffix("/auth").filter(|t| valid_topic(t)) {
            let _ = topic;
            return match caller {
                Caller::Anonymous if state.access.is_some() => error(403, 40301, "forbidden"),
                _ => json_line(200, &serde_json::json!({"success": true})),
            };
        }
    }
    error(404, 40401, "page not found")
}

fn record(state: &State, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes, status: u16) {
    lock(&state.requests).push(PublishRequest {
        method: method.to_string(),
        uri: uri.to_string(),
        headers: headers.clone(),
        body: body.clone(),
        status,
    });
}

/// Reference: a wrong token is 401 before routing; unsupported schemes count as anonymous.
fn authenticate(state: &State, headers: &HeaderMap) -> Result<Caller, Box<Response<Body>>> {
    let Some(access) = &state.access else {
        return Ok(Caller::Writer);
    };
    let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Ok(Caller::Anonymous);
    };
    let token = if let Some(t) = value.strip_prefix("Bearer ") {
        t.trim().to_string()
    } else if let Some(b) = value.strip_prefix("Basic ") {
        let decoded = base64::engine::general_purpose::STANDARD.decode(b.trim()).unwrap_or_default();
        let text = String::from_utf8_lossy(&decoded).to_string();
        match text.split_once(':') {
            Some(("", token)) => token.to_string(),
            _ => return Err(Box::new(error(401, 40101, "unauthorized"))),
        }
    } else {
        return Ok(Caller::Anonymous);
    };
    if access.write_tokens.contains(&token) {
        Ok(Caller::Writer)
    } else if access.read_tokens.contains(&token) {
        Ok(Caller::Reader)
    } else {
        Err(Box::new(error(401, 40101, "unauthorized")))
    }
}

fn valid_topic(t: &str) -> bool {
    !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn parse_query(uri: &Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.replace('+', " ")),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

/// A parameter: the first header of `headers` present, else the first query parameter of `query_names`.
fn param(headers: &HeaderMap, query: &[(String, String)], names: &[&str], query_names: &[&str]) -> Option<String> {
    for n in names {
        if let Some(v) = headers.get(*n) {
            return Some(decode_rfc2047(&String::from_utf8_lossy(v.as_bytes())));
        }
    }
    query_names.iter().find_map(|n| query.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
}

fn parse_priority(p: &str) -> Result<Option<u8>, ()> {
    match p.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "1" | "min" => Ok(Some(1)),
        "2" | "low" => Ok(Some(2)),
        "3" | "default" => Ok(Some(3)),
        "4" | "high" => Ok(Some(4)),
        "5" | "max" | "urgent" => Ok(Some(5)),
        _ => Err(()),
    }
}

/// The next failure programmed with [`NtfyServer::fail_next`], as a response.
fn programmed_failure(state: &State) -> Option<Response<Body>> {
    let status = lock(&state.fail).pop_front()?;
    let (code, text) = match status {
        401 => (40101, "unauthorized"),
        403 => (40301, "forbidden"),
        429 => (42901, "limit reached: too many requests"),
        500 => (50001, "internal server error"),
        502 => (50201, "bad gateway"),
        503 => (50301, "service unavailable"),
        s => (u32::from(s) * 100 + 1, "programmed failure"),
    };
    Some(error(status, code, text))
}

fn may_publish(state: &State, caller: &Caller) -> Result<(), Box<Response<Body>>> {
    match (state.access.is_some(), caller) {
        (false, _) | (true, Caller::Writer) => Ok(()),
        _ => Err(Box::new(error(403, 40301, "forbidden"))),
    }
}

fn publish(
    state: &State,
    caller: &Caller,
    topic: &str,
    headers: &HeaderMap,
    query: &[(String, String)],
    body: &Bytes,
) -> Response<Body> {
    if RESERVED.contains(&topic) {
        return error(400, 40010, "invalid request: topic invalid");
    }
    if let Err(r) = may_publish(state, caller) {
        return *r;
    }
    if let Some(r) = programmed_failure(state) {
        return r;
    }
    let priority = match param(headers, query, &["x-priority", "priority", "prio", "p"], &["priority", "prio", "p"]) {
        Some(p) => match parse_priority(&p) {
            Ok(p) => p,
            Err(()) => return error(400, 40007, "invalid priority parameter"),
        },
        None => None,
    };
    let title =
        param(headers, query, &["x-title", "title", "ti", "t"], &["title", "ti", "t"]).filter(|t| !t.is_empty());
    let tags = param(headers, query, &["x-tags", "tags", "tag", "ta"], &["tags", "tag", "ta"])
        .map(|t| t.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let text = match param(headers, query, &["x-message", "message", "m"], &["message", "m"]) {
        Some(m) => m,
        None => {
            // Reference: 4096 bytes or more, or non-UTF-8, is an attachment, and attachments are off.
            if body.len() >= 4096 {
                return error(400, 40014, "invalid request: attachments not allowed");
            }
            match std::str::from_utf8(body) {
                Ok(s) => s.to_string(),
                Err(_) => return error(400, 40014, "invalid request: attachments not allowed"),
            }
        }
    };
    let text = text.trim();
    let message = if text.is_empty() { "triggered".to_string() } else { text.to_string() };
    let msg = store(state, topic, title, message, priority, tags);
    json_line(200, &msg)
}

#[derive(Deserialize)]
struct JsonPublish {
    topic: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    tags: Vec<String>,
}

fn publish_json(state: &State, caller: &Caller, body: &Bytes) -> Response<Body> {
    if body.len() > 8192 {
        return error(413, 41303, "JSON body too large");
    }
    let Ok(p) = serde_json::from_slice::<JsonPublish>(body) else {
        return error(400, 40006, "invalid request: request body must be message JSON");
    };
    if !valid_topic(&p.topic) || RESERVED.contains(&p.topic.as_str()) {
        return error(400, 40010, "invalid request: topic invalid");
    }
    if let Err(r) = may_publish(state, caller) {
        return *r;
    }
    if let Some(r) = programmed_failure(state) {
        return r;
    }
    if p.priority.is_some_and(|v| !(1..=5).contains(&v)) {
        return error(400, 40007, "invalid priority parameter");
    }
    let message =
        p.message.map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).unwrap_or_else(|| "triggered".into());
    let msg = store(state, &p.topic, p.title, message, p.priority, p.tags);
    json_line(200, &msg)
}

fn store(
    state: &State,
    topic: &str,
    title: Option<String>,
    message: String,
    priority: Option<u8>,
    tags: Vec<String>,
) -> Message {
    let n = state.next_id.fetch_add(1, Ordering::Relaxed);
    let time = now();
    let msg = Message {
        id: format!("m{n:011}"),
        time,
        expires: time + 12 * 3600,
        event: "message".into(),
        topic: topic.to_string(),
        title,
        message,
        priority,
        tags,
    };
    lock(&state.messages).push(msg.clone());
    let _ = state.live.send(msg.clone());
    msg
}

/// The cached messages selected by `since=` (reference: `all`, a message id, a Unix time or a duration).
fn since_filter(messages: &[Message], since: Option<&str>) -> Result<Vec<Message>, ()> {
    let Some(since) = since.filter(|s| !s.is_empty() && *s != "none") else {
        return Ok(Vec::new());
    };
    if since == "all" {
        return Ok(messages.to_vec());
    }
    if let Ok(t) = since.parse::<u64>() {
        return Ok(messages.iter().filter(|m| m.time >= t).cloned().collect());
    }
    let unit = since.chars().last().and_then(|c| match c {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3600),
        'd' => Some(86400),
        _ => None,
    });
    if let (Some(unit), Ok(n)) = (unit, since[..since.len() - 1].parse::<u64>()) {
        let from = now().saturating_sub(n * unit);
        return Ok(messages.iter().filter(|m| m.time >= from).cloned().collect());
    }
    if since.len() == 12 && since.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(match messages.iter().position(|m| m.id == since) {
            Some(i) => messages[i + 1..].to_vec(),
            None => messages.to_vec(),
        });
    }
    Err(())
}

fn subscribe(state: &State, caller: &Caller, topics: Vec<String>, query: &[(String, String)]) -> Response<Body> {
    if state.access.is_some() && matches!(caller, Caller::Anonymous) {
        return error(403, 40301, "forbidden");
    }
    let q = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let poll = matches!(q("poll"), Some("1" | "true" | "yes"));
    let since = q("since").or(if poll { Some("all") } else { None });
    let live = state.live.subscribe();
    let cached: Vec<Message> = lock(&state.messages).iter().filter(|m| topics.contains(&m.topic)).cloned().collect();
    let Ok(cached) = since_filter(&cached, since) else {
        return error(400, 40008, "invalid request: since parameter invalid");
    };
    let mut lines: Vec<String> = Vec::new();
    if !poll {
        let open = serde_json::json!({"id": "open00000000", "time": now(), "event": "open", "topic": topics.join(",")});
        lines.push(open.to_string() + "\n");
    }
    lines.extend(cached.iter().map(|m| serde_json::to_string(m).unwrap_or_default() + "\n"));
    let head = futures::stream::iter(lines.into_iter().map(|l| Ok::<Bytes, std::io::Error>(Bytes::from(l))));
    let body = if poll {
        Body::from_stream(head)
    } else {
        let tail = futures::stream::unfold((live, topics), |(mut rx, topics)| async move {
            loop {
                match rx.recv().await {
                    Ok(m) if topics.contains(&m.topic) => {
                        let line = Bytes::from(serde_json::to_string(&m).unwrap_or_default() + "\n");
                        return Some((Ok(line), (rx, topics)));
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        Body::from_stream(futures::StreamExt::chain(head, tail))
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/x-ndjson; charset=utf-8")
        .body(body)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn since_forms() {
        let m = |id: &str, time| Message {
            id: id.into(),
            time,
            expires: 0,
            event: "message".into(),
            topic: "t".into(),
            title: None,
            message: "x".into(),
            priority: None,
            tags: vec![],
        };
        let all = vec![m("aaaaaaaaaaaa", 10), m("bbbbbbbbbbbb", 20)];
        assert_eq!(since_filter(&all, None).unwrap().len(), 0);
        assert_eq!(since_filter(&all, Some("all")).unwrap().len(), 2);
        assert_eq!(since_filter(&all, Some("15")).unwrap().len(), 1);
        assert_eq!(since_filter(&all, Some("aaaaaaaaaaaa")).unwrap()[0].id, "bbbbbbbbbbbb");
        assert_eq!(since_filter(&all, Some("zzzzzzzzzzzz")).unwrap().len(), 2);
        assert!(since_filter(&all, Some("yesterday")).is_err());
    }
}
