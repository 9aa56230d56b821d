//! A programmable OpenAI-compatible upstream for tests and benchmarks: `POST /v1/chat/completions` (plain
//! and SSE), `POST /v1/responses` and `POST /v1/embeddings` (`crate::responses`) and `GET /v1/models`, answering a fixed reply with fixed usage, recording every request, and
//! misbehaving on demand (fail the next N calls, delay, hold a stream after its first chunk, cut a stream).

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// How the upstream answers.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Reply text (split into `chunks` pieces when streamed).
    pub content: String,
    /// Reported prompt tokens.
    pub prompt_tokens: u64,
    /// Reported completion tokens.
    pub completion_tokens: u64,
    /// Content chunks of a stream.
    pub chunks: usize,
    /// Pause between stream chunks.
    pub chunk_delay: Duration,
    /// Pause before answering at all.
    pub delay: Duration,
    /// Answers (status, error message) for the next calls, one each.
    pub fail_next: VecDeque<(u16, String)>,
    /// After the first content chunk, wait for [`Upstream::release`].
    pub hold_stream: bool,
    /// Drop the connection after this many stream chunks.
    pub cut_stream_after: Option<usize>,
    /// Keep a copy of each request (off for benchmarks).
    pub record: bool,
    /// Status of `GET /v1/models`.
    pub models_status: u16,
    /// Report usage (off: like a server that never sends any, in replies and streams alike).
    pub report_usage: bool,
    /// The `usage` object sent instead of the honest one (replies and the stream's usage chunk): absurd or
    /// malformed counts.
    pub usage_override: Option<Value>,
    /// The whole body of a 200 reply instead of a completion (e.g. an error object).
    pub reply_override: Option<Value>,
    /// A stream that never ends: content chunks (`content` each) one after another, `chunk_delay` apart,
    /// ignoring `max_tokens`, until the client goes away.
    pub endless: bool,
    /// After the first content chunk, a line of this many bytes with no newline, sent in 64 KiB pieces
    /// `chunk_delay` apart, then nothing more.
    pub long_line: Option<usize>,
    /// A Responses stream that never ends: `response.created`, then this event's data (its `type` names it)
    /// again and again, `chunk_delay` apart, ignoring `max_output_tokens`, until the client goes away.
    pub endless_event: Option<Value>,
    /// Output items put before the message in a Responses answer (a `web_search_call`, say).
    pub extra_output: Vec<Value>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            content: "Hello from the test upstream.".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            chunks: 5,
            chunk_delay: Duration::ZERO,
            delay: Duration::ZERO,
            fail_next: VecDeque::new(),
            hold_stream: false,
            cut_stream_after: None,
            record: true,
            models_status: 200,
            report_usage: true,
            usage_override: None,
            reply_override: None,
            endless: false,
            long_line: None,
            endless_event: None,
            extra_output: Vec::new(),
        }
    }
}

/// A request the upstream received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The JSON body.
    pub body: Value,
    /// The headers.
    pub headers: HeaderMap,
}

/// Shared state of a running upstream.
#[derive(Debug, Default)]
pub struct Shared {
    pub(crate) behaviour: Mutex<Behaviour>,
    requests: Mutex<Vec<Recorded>>,
    release: Notify,
    /// Streams whose client went away before the end.
    pub streams_cancelled: AtomicUsize,
    /// Streams sent to the end.
    pub streams_completed: AtomicUsize,
    /// Calls answered (any status).
    pub calls: AtomicUsize,
    /// Input token counts answered (`POST /v1/responses/input_tokens`).
    pub counts: AtomicUsize,
    /// The Responses answers it keeps (`crate::responses`).
    pub(crate) stored: crate::responses::Stored,
}

/// A running upstream; stops when dropped.
pub struct Upstream {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    /// The bound address.
    pub addr: SocketAddr,
    /// State, for assertions.
    pub shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl Upstream {
    /// Starts on an ephemeral port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Upstream> {
        Upstream::start_on("127.0.0.1:0", Behaviour::default()).await
    }

    /// Starts on `addr` with a behaviour.
    pub async fn start_on(addr: &str, behaviour: Behaviour) -> std::io::Result<Upstream> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { behaviour: Mutex::new(behaviour), ..Default::default() });
        let app = router(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(async { drop(stopped.await) }).await;
        });
        Ok(Upstream { base_url: format!("http://{addr}/v1"), addr, shared, stop: Some(stop) })
    }

    /// Changes the behaviour.
    pub fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        if let Ok(mut b) = self.shared.behaviour.lock() {
            f(&mut b);
        }
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Lets held streams go on.
    pub fn release(&self) {
        self.shared.release.notify_waiters();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The routes, for embedding in another server.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/responses/input_tokens", post(crate::responses::input_tokens))
        .route("/v1/responses/{id}", get(crate::responses::retrieve).delete(crate::responses::delete))
        .route("/v1/responses/{id}/input_items", get(crate::responses::input_items))
        .route("/v1/responses/{id}/cancel", post(crate::responses::cancel))
        .route("/responses", post(crate::responses::responses))
        .route("/v1/embeddings", post(crate::responses::embeddings))
        .route("/embeddings", post(crate::responses::embeddings))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .with_state(shared)
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    let status = s.behaviour.lock().map(|b| b.models_status).unwrap_or(200);
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if code.is_success() {
        Json(json!({"object": "list", "data": [{"id": "up-model", "object": "model", "created": 0, "owned_by": "test"}]})).into_response()
    } else {
        (code, Json(json!({"error": {"message": "models unavailable", "type": "api_error"}}))).into_response()
    }
}

pub(crate) fn error(status: u16, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({"error": {"message": message, "type": "upstream_test_error", "param": null, "code": null}})))
        .into_response()
}

/// Takes one call of any endpoint: counts it, takes the next queued failure, parses and records the request,
/// waits `delay`; the behaviour and the request, or the answer to give instead (400 for a body that is not
/// JSON, the queued failure).
pub(crate) async fn take(s: &Shared, headers: HeaderMap, body: &Bytes) -> Result<(Behaviour, Value), Response> {
    s.calls.fetch_add(1, Ordering::Relaxed);
    let (b, failure) = match s.behaviour.lock() {
        Ok(mut b) => {
            let f = b.fail_next.pop_front();
            (b.clone(), f)
        }
        Err(_) => return Err(error(500, "poisoned")),
    };
    let Ok(req) = serde_json::from_slice::<Value>(body) else { return Err(error(400, "invalid JSON")) };
    if b.record {
        if let Ok(mut r) = s.requests.lock() {
            r.push(Recorded { body: req.clone(), headers });
        }
    }
    if !b.delay.is_zero() {
        tokio::time::sleep(b.delay).await;
    }
    if let Some((status, message)) = failure {
        return Err(error(status, &message));
    }
    Ok((b, req))
}

async fn chat(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (b, req) = match take(&s, headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let model = req.get("model").cloned().unwrap_or(Value::Null);
    let usage = b.usage_override.clone().unwrap_or_else(|| json!({"prompt_tokens": b.prompt_tokens, "completion_tokens": b.completion_tokens, "total_tokens": b.prompt_tokens + b.completion_tokens}));
    if !req.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        if let Some(body) = &b.reply_override {
            return Json(body.clone()).into_response();
        }
        let mut reply = json!({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": b.content}, "finish_reason": "stop"}],
            "usage": usage, "system_fingerprint": "fp_test",
        });
        if !b.report_usage {
            if let Some(o) = reply.as_object_mut() {
                o.remove("usage");
            }
        }
        return Json(reply).into_response();
    }
    let with_usage =
        b.report_usage && req.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    if b.endless || b.long_line.is_some() {
        return misbehaving_stream(s, b, model);
    }
    stream(s, b, model, usage, with_usage)
}

/// A stream that never ends by itself: endless content chunks, or one line without an end.
fn misbehaving_stream(s: Arc<Shared>, b: Behaviour, model: Value) -> Response {
    let chunk = move |delta: Value| {
        let c = json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        Bytes::from(format!("data: {c}\n\n"))
    };
    let first = chunk(json!({"role": "assistant", "content": ""}));
    let guard = StreamGuard { shared: s, finished: false };
    let sent_line = 0usize;
    let body = futures::stream::unfold(
        (Some(first), guard, b, chunk, sent_line),
        |(first, guard, b, chunk, sent_line)| async move {
            if let Some(first) = first {
                return Some((Ok::<Bytes, std::io::Error>(first), (None, guard, b, chunk, sent_line)));
            }
            if !b.chunk_delay.is_zero() {
                tokio::time::sleep(b.chunk_delay).await;
            }
            match b.long_line {
                Some(total) if sent_line >= total => {
                    // The line is sent; hold the connection open without another byte.
                    std::future::pending::<()>().await;
                    None
                }
                Some(total) => {
                    let mut piece = if sent_line == 0 { b"data: {\"x\":\"".to_vec() } else { Vec::new() };
                    let n = (total - sent_line).min(64 * 1024);
                    piece.resize(piece.len() + n, b'a');
                    Some((Ok(Bytes::from(piece)), (None, guard, b, chunk, sent_line + n)))
                }
                None => {
                    let bytes = chunk(json!({"content": b.content}));
                    Some((Ok(bytes), (None, guard, b, chunk, sent_line)))
                }
            }
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| error(500, "cannot build response"))
}

/// Counts a stream as cancelled unless it reached its end.
pub(crate) struct StreamGuard {
    pub(crate) shared: Arc<Shared>,
    pub(crate) finished: bool,
}

impl StreamGuard {
    fn mark_finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let counter = if self.finished { &self.shared.streams_completed } else { &self.shared.streams_cancelled };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

fn stream(s: Arc<Shared>, b: Behaviour, model: Value, usage: Value, with_usage: bool) -> Response {
    let n = b.chunks.max(1);
    let text: Vec<char> = b.content.chars().collect();
    let per = text.len().div_ceil(n).max(1);
    let mut events: Vec<String> = Vec::new();
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if with_usage {
            c["usage"] = Value::Null;
        }
        format!("data: {c}\n\n")
    };
    events.push(chunk(json!({"role": "assistant", "content": ""}), Value::Null));
    for piece in text.chunks(per) {
        events.push(chunk(json!({"content": piece.iter().collect::<String>()}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if with_usage {
        let c = json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model, "choices": [], "usage": usage});
        events.push(format!("data: {c}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_string());
    let guard = StreamGuard { shared: s.clone(), finished: false };
    let body =
        futures::stream::unfold((events.into_iter().enumerate(), guard, b), move |(mut it, mut guard, b)| async move {
            let (i, ev) = match it.next() {
                Some(x) => x,
                None => {
                    guard.mark_finished();
                    return None;
                }
            };
            if b.cut_stream_after.is_some_and(|cut| i >= cut) {
                // End the body abruptly: the client sees a broken stream.
                return Some((Err(std::io::Error::other("cut")), (it, guard, b)));
            }
            if i == 2 && b.hold_stream {
                guard.shared.release.notified().await;
            }
            if i > 0 && !b.chunk_delay.is_zero() {
                tokio::time::sleep(b.chunk_delay).await;
            }
            Some((Ok::<Bytes, std::io::Error>(Bytes::from(ev)), (it, guard, b)))
        });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| error(500, "cannot build response"))
}
