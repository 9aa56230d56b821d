//! A fake Bedrock runtime. Like AWS: every request is signed with SigV4 for service `bedrock` in the fake's
//! region by the fake's credentials (checked by `sigv4.rs`), or carries the fake's Bedrock API key as a bearer
//! token, else 403 with `x-amzn-ErrorType` and `{"message"}`. `POST /model/{id}/converse` and
//! `/converse-stream` (AWS's binary event-stream frames: messageStart, contentBlockStart/Delta/Stop,
//! messageStop, metadata), `/invoke` and `/invoke-with-response-stream` for Claude (the Messages body, with
//! `anthropic_version: bedrock-2023-05-31` and no `model`; a stream of `chunk` frames, each a Messages event
//! base64-encoded in `bytes`), `/count-tokens`. [`Reply::Error`]s as AWS sends them: the status, the type in
//! `x-amzn-ErrorType`, `{"message"}`.

use super::sigv4::{self, Keys};
use super::{claude_message, serve, Common, Recorded, Reply};
use crate::anthropic::message_events;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{json, Value};
use std::sync::Arc;

/// The fake's credentials.
pub const ACCESS_KEY_ID: &str = "AKIAFAKEBEDROCK00001";
/// The secret of [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "fake/Secret+Key/for/the/bedrock/fake0001";
/// The fake's region.
pub const REGION: &str = "us-west-2";
/// A Bedrock API key the fake takes as a bearer token.
pub const API_KEY: &str = "ABSKfakebedrockapikey0001";

#[derive(Debug)]
struct Shared {
    keys: Keys,
    common: Common,
}

/// A running fake; dropping it stops the server.
#[derive(Debug)]
pub struct FakeBedrock {
    /// `http://127.0.0.1:<port>` (`aws_bedrock_runtime_endpoint`).
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeBedrock {
    /// Starts the fake; with `session_token`, SigV4 requests must carry it (temporary credentials).
    pub async fn start(session_token: Option<&str>) -> std::io::Result<FakeBedrock> {
        let keys = Keys {
            access_key_id: ACCESS_KEY_ID.into(),
            secret_access_key: SECRET_ACCESS_KEY.into(),
            session_token: session_token.map(str::to_string),
            region: REGION.into(),
        };
        let shared = Arc::new(Shared { keys, common: Common::default() });
        let router = axum::Router::new().fallback(handle).with_state(shared.clone());
        let (base_url, task) = serve(router).await?;
        Ok(FakeBedrock { base_url, shared, task })
    }

    /// Answers the next generation with `reply`.
    pub fn push(&self, reply: Reply) {
        self.shared.common.push(reply);
    }

    /// Every request received.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.common.requests()
    }
}

impl Drop for FakeBedrock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An AWS error: the status, `x-amzn-ErrorType`, `{"message"}`.
fn aws_error(status: u16, kind: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (code, axum::Json(json!({"message": message}))).into_response();
    if let Ok(v) = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/").parse() {
        r.headers_mut().insert("x-amzn-errortype", v);
    }
    r
}

async fn handle(State(s): State<Arc<Shared>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {API_KEY}"));
    let checked = if bearer { Ok(()) } else { sigv4::verify(&s.keys, "bedrock", &method, &uri, &headers, &body) };
    s.common.record(method.as_str(), &uri, &headers, &body, checked.is_ok());
    if let Err(why) = checked {
        let kind = if why.contains("signature") { "InvalidSignatureException" } else { "UnrecognizedClientException" };
        return aws_error(403, kind, &why);
    }
    let Some((model, action)) = uri.path().strip_prefix("/model/").and_then(|r| r.rsplit_once('/')) else {
        return aws_error(404, "UnknownOperationException", "Unknown operation");
    };
    let model = percent_decode(model);
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let claude = model.contains("anthropic.");
    match (action, claude) {
        ("count-tokens", _) => axum::Json(json!({"inputTokens": 6})).into_response(),
        ("converse" | "converse-stream", _) => {
            if request.get("messages").and_then(Value::as_array).is_none_or(Vec::is_empty) {
                return aws_error(
                    400,
                    "ValidationException",
                    "The provided request is not valid: messages is required",
                );
            }
            match s.common.next() {
                Reply::Error { status, kind, message } => aws_error(status, &kind, &message),
                reply if action == "converse" => axum::Json(converse(&reply)).into_response(),
                reply => frames(converse_events(&reply)),
            }
        }
        ("invoke" | "invoke-with-response-stream", true) => {
            if request.get("anthropic_version").and_then(Value::as_str) != Some("bedrock-2023-05-31")
                || ["model", "stream", "metadata"].iter().any(|k| request.get(k).is_some())
            {
                let msg = "Malformed input request: anthropic_version bedrock-2023-05-31 is required; extraneous key [model], [stream] or [metadata] is not permitted";
                return aws_error(400, "ValidationException", msg);
            }
            match s.common.next() {
                Reply::Error { status, kind, message } => aws_error(status, &kind, &message),
                reply if action == "invoke" => axum::Json(claude_message(&reply)).into_response(),
                reply => frames(claude_chunks(&reply)),
            }
        }
        _ => aws_error(400, "ValidationException", "The requested operation is not supported for this model"),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()),
        ) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Converse's usage: 10 input tokens besides 4 read from the cache and 2 written to it, 5 output tokens.
fn usage() -> Value {
    json!({"inputTokens": 10, "outputTokens": 5, "totalTokens": 21, "cacheReadInputTokens": 4, "cacheWriteInputTokens": 2})
}

fn converse(reply: &Reply) -> Value {
    let (content, stop) = match reply {
        Reply::ToolCall { name, args } => {
            (json!([{"toolUse": {"toolUseId": "tooluse_1", "name": name, "input": args}}]), "tool_use")
        }
        Reply::Text(t) => (json!([{"text": t}]), "end_turn"),
        Reply::Error { .. } => (json!([]), "end_turn"),
    };
    json!({"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop, "usage": usage(),
        "metrics": {"latencyMs": 120}})
}

/// ConverseStream's events for `reply`: (event type, payload).
fn converse_events(reply: &Reply) -> Vec<(String, Value)> {
    let mut events = vec![("messageStart".to_string(), json!({"role": "assistant", "p": "abcdefgh"}))];
    let stop = match reply {
        Reply::ToolCall { name, args } => {
            events.push((
                "contentBlockStart".into(),
                json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": name}}}),
            ));
            let input = args.to_string();
            let (a, b) = input.split_at(input.len() / 2);
            for piece in [a, b] {
                events.push((
                    "contentBlockDelta".into(),
                    json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}}),
                ));
            }
            "tool_use"
        }
        Reply::Text(t) => {
            let (a, b) = t.split_at(t.len() / 2);
            for piece in [a, b] {
                events.push((
                    "contentBlockDelta".into(),
                    json!({"contentBlockIndex": 0, "delta": {"text": piece}, "p": "ab"}),
                ));
            }
            "end_turn"
        }
        Reply::Error { .. } => "end_turn",
    };
    events.push(("contentBlockStop".into(), json!({"contentBlockIndex": 0})));
    events.push(("messageStop".into(), json!({"stopReason": stop})));
    events.push(("metadata".into(), json!({"usage": usage(), "metrics": {"latencyMs": 120}})));
    events
}

/// InvokeModel's stream of Claude: each Messages event as a `chunk`, base64 in `bytes`; the last one carries
/// Bedrock's invocation metrics.
fn claude_chunks(reply: &Reply) -> Vec<(String, Value)> {
    let events = message_events(&claude_message(reply));
    let last = events.len().saturating_sub(1);
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event != "ping")
        .map(|(i, e)| {
            let mut data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
            if i == last {
                data["amazon-bedrock-invocationMetrics"] = json!({"inputTokenCount": 10, "outputTokenCount": 5, "invocationLatency": 300, "firstByteLatency": 100});
            }
            let b64 = base64::engine::general_purpose::STANDARD.encode(data.to_string());
            ("chunk".to_string(), json!({"bytes": b64, "p": "abcd"}))
        })
        .collect()
}

/// A response of event-stream frames.
fn frames(events: Vec<(String, Value)>) -> Response {
    let mut out = Vec::new();
    for (kind, payload) in events {
        let m = Message::new(Bytes::from(payload.to_string()))
            .add_header(Header::new(":event-type", HeaderValue::String(kind.into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())))
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())));
        if aws_smithy_eventstream::frame::write_message_to(&m, &mut out).is_err() {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    }
    Response::builder()
        .header("content-type", "application/vnd.amazon.eventstream")
        .header("x-amzn-bedrock-content-type", "application/json")
        .body(Body::from(out))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Recorded requests' paths, for assertions.
pub fn paths(requests: &[Recorded]) -> Vec<String> {
    requests.iter().map(|r| r.path.clone()).collect()
}
