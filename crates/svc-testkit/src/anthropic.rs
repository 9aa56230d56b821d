//! A fake Anthropic Messages API for tests: `POST /v1/messages` (JSON, or SSE with `event:` lines when the
//! request says `stream: true`) answered from programmable [`Canned`] answers, `POST /v1/messages/count_tokens`
//! (always [`COUNTED_TOKENS`]) and `GET /v1/models` for probes. It records every request with its headers, checks `x-api-key` and `anthropic-version` as the real
//! API does (401 / 400 in Anthropic's error shape), and rejects bodies without `model`, `max_tokens` or
//! well-formed `messages`.
//!
//! What it does not do: imitate the model. Answers are exactly what a test queued ([`FakeAnthropic::push`]),
//! else the fallback ([`FakeAnthropic::set_fallback`], by default [`text_message`]); an endless stream
//! ([`Canned::Endless`], a misbehaving upstream that ignores `max_tokens`) runs until the client goes away,
//! which is counted ([`FakeAnthropic::streams_cancelled`]). It binds 127.0.0.1 on an ephemeral port and stops
//! when its handle is dropped.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// One server-sent event as served: `event: <event>` then `data: <data>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name (`message_start`, `content_block_delta`, …).
    pub event: String,
    /// The `data:` payload, sent as it is (so a test can send something that is not JSON).
    pub data: String,
}

impl SseEvent {
    /// An event whose data is `data` as JSON.
    pub fn json(event: impl Into<String>, data: &Value) -> SseEvent {
        SseEvent { event: event.into(), data: data.to_string() }
    }

    /// An event with raw data.
    pub fn raw(event: impl Into<String>, data: impl Into<String>) -> SseEvent {
        SseEvent { event: event.into(), data: data.into() }
    }

    fn encode(&self) -> String {
        let mut out = format!("event: {}\n", self.event);
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out
    }
}

/// What `POST /v1/messages/count_tokens` answers as `input_tokens`, whatever the request, until
/// [`FakeAnthropic::set_count`].
pub const COUNTED_TOKENS: u64 = 42;

/// A programmed answer to `POST /v1/messages`.
#[derive(Debug, Clone)]
pub enum Canned {
    /// 200 with this message; a streaming request gets it as the events Anthropic would send for it
    /// ([`message_events`]).
    Message(Value),
    /// 200 `text/event-stream` with these events, `gap` apart, whatever the request asked.
    Events { events: Vec<SseEvent>, gap: Duration },
    /// An HTTP error with this JSON body (see [`error_body`]) and an optional `retry-after` in seconds.
    Error { status: u16, body: Value, retry_after: Option<u64> },
    /// Any status, content type and body, for answers that are not the protocol.
    Raw { status: u16, content_type: String, body: String },
    /// The inner answer, after a delay.
    Delayed(Duration, Box<Canned>),
    /// 200 `text/event-stream`: `head`, then `repeat` again and again, `gap` apart, until the client goes away.
    Endless { head: Vec<SseEvent>, repeat: SseEvent, gap: Duration },
}

impl Canned {
    /// These events with no gap.
    pub fn events(events: Vec<SseEvent>) -> Canned {
        Canned::Events { events, gap: Duration::ZERO }
    }

    /// An Anthropic error of `error_type` with `message`.
    pub fn error(status: u16, error_type: &str, message: &str) -> Canned {
        Canned::Error { status, body: error_body(error_type, message), retry_after: None }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET` or `POST`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (a string when it was not JSON, null when empty).
    pub body: Value,
}

/// A running fake; dropping it stops the server.
#[derive(Debug)]
pub struct FakeAnthropic {
    base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    api_key: Option<String>,
    queue: Mutex<VecDeque<Canned>>,
    fallback: Mutex<Canned>,
    recorded: Mutex<Vec<Recorded>>,
    /// Off for benchmarks (the list would grow with every request).
    recording: std::sync::atomic::AtomicBool,
    /// Endless streams whose client went away.
    streams_cancelled: AtomicUsize,
    /// What `count_tokens` answers.
    counted: std::sync::atomic::AtomicU64,
}

/// Locks, ignoring poisoning (a panicking test must not hide the state from the next assertion).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeAnthropic {
    /// Starts a server on 127.0.0.1; with `Some(key)` every request must carry `x-api-key: key`.
    pub async fn start(api_key: Option<&str>) -> std::io::Result<FakeAnthropic> {
        Self::start_on("127.0.0.1:0", api_key).await
    }

    /// The fake on `address` (`127.0.0.1:0`: any free port).
    pub async fn start_on(address: &str, api_key: Option<&str>) -> std::io::Result<FakeAnthropic> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            api_key: api_key.map(String::from),
            queue: Mutex::new(VecDeque::new()),
            fallback: Mutex::new(Canned::Message(text_message("Hello from the fake Anthropic server."))),
            recorded: Mutex::new(Vec::new()),
            recording: std::sync::atomic::AtomicBool::new(true),
            streams_cancelled: AtomicUsize::new(0),
            counted: std::sync::atomic::AtomicU64::new(COUNTED_TOKENS),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/models", get(models))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            // The server only ends when the handle aborts it.
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeAnthropic { base_url, shared, task })
    }

    /// `http://127.0.0.1:<port>`, the `api_base` to configure.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Queues an answer: queued answers are used in order, one per `POST /v1/messages`.
    pub fn push(&self, canned: Canned) {
        lock(&self.shared.queue).push_back(canned);
    }

    /// What `POST /v1/messages/count_tokens` answers as `input_tokens` from now on (at first [`COUNTED_TOKENS`]).
    pub fn set_count(&self, tokens: u64) {
        self.shared.counted.store(tokens, std::sync::atomic::Ordering::Relaxed);
    }

    /// The answer used when the queue is empty.
    pub fn set_fallback(&self, canned: Canned) {
        *lock(&self.shared.fallback) = canned;
    }

    /// Whether requests are kept for [`FakeAnthropic::requests`] (on by default; off for benchmarks).
    pub fn set_recording(&self, on: bool) {
        self.shared.recording.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every request received so far, in order (rejected ones included).
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.recorded).clone()
    }

    /// How many endless streams ([`Canned::Endless`]) were dropped by their client.
    pub fn streams_cancelled(&self) -> usize {
        self.shared.streams_cancelled.load(Ordering::SeqCst)
    }
}

impl Drop for FakeAnthropic {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Anthropic's error body: `{"type":"error","error":{"type","message"}}`.
pub fn error_body(error_type: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": error_type, "message": message } })
}

/// A plain text message (`msg_fake`, model `claude-fake`, 10 input and 5 output tokens).
pub fn text_message(text: &str) -> Value {
    json!({
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": { "input_tokens": 10, "output_tokens": 5 },
    })
}

/// The events the Messages API streams for `message`: `message_start`, a `ping`, per block a start, deltas
/// (text and tool input JSON cut into pieces of a few characters) and a stop, then `message_delta` with the
/// stop reason and output tokens, and `message_stop`.
pub fn message_events(message: &Value) -> Vec<SseEvent> {
    let mut start = message.clone();
    let usage = message.get("usage").cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(m) = &mut start {
        m.insert("content".into(), json!([]));
        m.insert("stop_reason".into(), Value::Null);
        m.insert("stop_sequence".into(), Value::Null);
        let mut start_usage = usage.clone();
        if let Value::Object(u) = &mut start_usage {
            u.insert("output_tokens".into(), json!(1));
            // Server tool uses are counted as they happen: the API gives them with the final counts.
            u.remove("server_tool_use");
        }
        m.insert("usage".into(), start_usage);
    }
    let mut events = vec![
        SseEvent::json("message_start", &json!({ "type": "message_start", "message": start })),
        SseEvent::json("ping", &json!({ "type": "ping" })),
    ];
    let blocks = message.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
        let (head, deltas): (Value, Vec<Value>) = match kind {
            "text" => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
                let deltas = pieces(text).into_iter().map(|p| json!({ "type": "text_delta", "text": p })).collect();
                (json!({ "type": "text", "text": "" }), deltas)
            }
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({})).to_string();
                // The API opens a tool's input with an empty fragment.
                let deltas = std::iter::once(String::new())
                    .chain(pieces(&input))
                    .map(|p| json!({ "type": "input_json_delta", "partial_json": p }))
                    .collect();
                let head = json!({ "type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {} });
                (head, deltas)
            }
            _ => (block.clone(), Vec::new()),
        };
        let start = json!({ "type": "content_block_start", "index": index, "content_block": head });
        events.push(SseEvent::json("content_block_start", &start));
        for delta in deltas {
            let delta = json!({ "type": "content_block_delta", "index": index, "delta": delta });
            events.push(SseEvent::json("content_block_delta", &delta));
        }
        let stop = json!({ "type": "content_block_stop", "index": index });
        events.push(SseEvent::json("content_block_stop", &stop));
    }
    let delta = json!({
        "type": "message_delta",
        "delta": { "stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence") },
        "usage": { "output_tokens": usage.get("output_tokens").cloned().unwrap_or(json!(0)) },
    });
    let mut delta = delta;
    if let (Some(tools), Some(Value::Object(u))) = (usage.get("server_tool_use"), delta.get_mut("usage")) {
        u.insert("server_tool_use".into(), tools.clone());
    }
    events.push(SseEvent::json("message_delta", &delta));
    events.push(SseEvent::json("message_stop", &json!({ "type": "message_stop" })));
    events
}

/// Cuts text into pieces of at most 7 characters (on character boundaries).
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

fn record(shared: &Shared, method: &str, path: &str, headers: &HeaderMap, body: &[u8]) -> Value {
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    let headers = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    if shared.recording.load(std::sync::atomic::Ordering::Relaxed) {
        let recorded = Recorded { method: method.into(), path: path.into(), headers, body: body.clone() };
        lock(&shared.recorded).push(recorded);
    }
    body
}

fn error_response(status: u16, error_type: &str, message: &str) -> Response {
    json_response(status, error_body(error_type, message), None)
}

fn json_response(status: u16, body: Value, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    resp
}

/// The real API's header checks: a wrong or missing key is a 401, a missing version a 400.
fn check_headers(shared: &Shared, headers: &HeaderMap) -> Option<Response> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(key) = &shared.api_key {
        if text("x-api-key") != Some(key.as_str()) {
            return Some(error_response(401, "authentication_error", "invalid x-api-key"));
        }
    }
    if text("anthropic-version").is_none() {
        return Some(error_response(400, "invalid_request_error", "anthropic-version: header is required"));
    }
    None
}

/// A few of the real API's body checks, enough to catch a translation that forgets a required field.
fn check_body(body: &Value) -> Result<(), String> {
    if !body.get("model").is_some_and(Value::is_string) {
        return Err("model: Field required".into());
    }
    if body.get("max_tokens").and_then(Value::as_u64).is_none_or(|n| n < 1) {
        return Err("max_tokens: Field required".into());
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err("messages: Field required".into());
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        // The API takes `system` entries inside `messages` too, as Claude Code sends them.
        if !matches!(role, Some("user" | "assistant" | "system")) {
            return Err(format!("messages.{i}.role: Input should be 'user', 'assistant' or 'system'"));
        }
        let typed = |b: &Value| b.get("type").is_some_and(Value::is_string);
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(blocks)) if blocks.iter().all(typed) => {}
            _ => return Err(format!("messages.{i}.content: Input should be a valid list")),
        }
    }
    Ok(())
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = record(&shared, "POST", "/v1/messages", &headers, &body);
    if let Some(rejected) = check_headers(&shared, &headers) {
        return rejected;
    }
    if let Err(message) = check_body(&body) {
        return error_response(400, "invalid_request_error", &message);
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let queued = lock(&shared.queue).pop_front();
    let mut canned = queued.unwrap_or_else(|| lock(&shared.fallback).clone());
    while let Canned::Delayed(delay, inner) = canned {
        tokio::time::sleep(delay).await;
        canned = *inner;
    }
    match canned {
        Canned::Message(message) if stream => sse(message_events(&message), Duration::ZERO),
        Canned::Message(message) => axum::Json(message).into_response(),
        Canned::Events { events, gap } => sse(events, gap),
        Canned::Error { status, body, retry_after } => json_response(status, body, retry_after),
        Canned::Raw { status, content_type, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Canned::Endless { head, repeat, gap } => endless(shared, head, repeat, gap),
        // Unwrapped by the loop above.
        Canned::Delayed(..) => error_response(500, "api_error", "unreachable"),
    }
}

/// Token counting: the real API's header checks and `model` and `messages` required (no `max_tokens`).
async fn count_tokens(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let body = record(&shared, "POST", "/v1/messages/count_tokens", &headers, &body);
    if let Some(rejected) = check_headers(&shared, &headers) {
        return rejected;
    }
    if !body.get("model").is_some_and(Value::is_string) || !body.get("messages").is_some_and(Value::is_array) {
        return error_response(400, "invalid_request_error", "model, messages: Field required");
    }
    let counted = shared.counted.load(std::sync::atomic::Ordering::Relaxed);
    axum::Json(json!({ "input_tokens": counted })).into_response()
}

/// Counts an endless stream as cancelled when its body is dropped (it never ends by itself).
struct Cancelled(Arc<Shared>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        self.0.streams_cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

fn endless(shared: Arc<Shared>, head: Vec<SseEvent>, repeat: SseEvent, gap: Duration) -> Response {
    let head = Bytes::from(head.iter().map(SseEvent::encode).collect::<String>());
    let repeat = Bytes::from(repeat.encode());
    let guard = Cancelled(shared);
    let body = futures::stream::unfold((Some(head), repeat, guard), move |(head, repeat, guard)| async move {
        if let Some(head) = head {
            return Some((Ok::<_, Infallible>(head), (None, repeat, guard)));
        }
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        Some((Ok(repeat.clone()), (None, repeat, guard)))
    });
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], Body::from_stream(body))
        .into_response()
}

fn sse(events: Vec<SseEvent>, gap: Duration) -> Response {
    let body = if gap.is_zero() {
        Body::from(events.iter().map(SseEvent::encode).collect::<String>())
    } else {
        let chunks = futures::stream::iter(events).then(move |e| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, Infallible>(Bytes::from(e.encode()))
        });
        Body::from_stream(chunks)
    };
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    record(&shared, "GET", "/v1/models", &headers, &[]);
    if let Some(rejected) = check_headers(&shared, &headers) {
        return rejected;
    }
    axum::Json(json!({
        "data": [{ "type": "model", "id": "claude-fake", "display_name": "Claude Fake", "created_at": "2025-01-01T00:00:00Z" }],
        "has_more": false,
        "first_id": "claude-fake",
        "last_id": "claude-fake",
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_reassemble_the_message() {
        let msg = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "Hello there, world"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 9},
        });
        let events = message_events(&msg);
        let data: Vec<Value> = events.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
        let text: String = data.iter().filter_map(|d| d["delta"]["text"].as_str()).collect();
        let json: String = data.iter().filter_map(|d| d["delta"]["partial_json"].as_str()).collect();
        assert_eq!(text, "Hello there, world");
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({"city": "Paris"}));
        assert_eq!(events.first().unwrap().event, "message_start");
        assert_eq!(events.last().unwrap().event, "message_stop");
        assert_eq!(SseEvent::raw("ping", "a\nb").encode(), "event: ping\ndata: a\ndata: b\n\n");
    }
}
