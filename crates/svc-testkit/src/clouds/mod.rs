//! Fakes of the clouds agent fleets buy models from, each checking the authentication exactly as the cloud
//! does, so a test proves the gateway's credentials and not only its bodies:
//!
//! - [`azure::FakeAzure`]: Azure OpenAI (`api-key` or an Entra bearer token; `api-version` in the query; the
//!   deployment in the path, or the `/openai/v1` route with the deployment as `model`).
//! - [`vertex::FakeVertex`]: Vertex AI with its OAuth token endpoint, which verifies the service account's RS256
//!   signature of the JWT assertion with the account's public key; Gemini (`generateContent`…) and Claude
//!   (`rawPredict`, `streamRawPredict`, `count-tokens`).
//! - [`bedrock::FakeBedrock`]: Bedrock's runtime, which recomputes each request's SigV4 signature with its own
//!   implementation (`sigv4.rs`, not the gateway's signer) or takes a Bedrock API key; Converse and
//!   ConverseStream (AWS's binary event-stream frames) and InvokeModel of Claude.
//!
//! Each answers a queue of [`Reply`]s (then text), in its own API, with fixed usage, and records every request.

pub mod azure;
pub mod bedrock;
mod sigv4;
pub mod vertex;

use axum::http::HeaderMap;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What a fake answers to a generation.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Text.
    Text(String),
    /// A call of the tool `name` with these arguments.
    ToolCall {
        /// The tool.
        name: String,
        /// Its arguments (an object).
        args: Value,
    },
    /// An error in the cloud's own shape: the HTTP status, the cloud's error type (`ThrottlingException`,
    /// `RESOURCE_EXHAUSTED`, `429`…) and message.
    Error {
        /// HTTP status.
        status: u16,
        /// The cloud's error type or code.
        kind: String,
        /// Its message.
        message: String,
    },
}

/// A request a fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET` or `POST`.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query (without `?`), empty when none.
    pub query: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (null when empty or not JSON).
    pub body: Value,
    /// Whether its credential was accepted.
    pub authorized: bool,
}

/// What every fake keeps: its queue of replies and what it received.
#[derive(Debug, Default)]
pub(crate) struct Common {
    queue: Mutex<VecDeque<Reply>>,
    recorded: Mutex<Vec<Recorded>>,
}

/// Locks, ignoring poisoning (a panicking test must not hide the state from the next assertion).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Common {
    pub(crate) fn push(&self, reply: Reply) {
        lock(&self.queue).push_back(reply);
    }

    /// The next reply: the queue's, else the text `Hello from the cloud.`.
    pub(crate) fn next(&self) -> Reply {
        lock(&self.queue).pop_front().unwrap_or_else(|| Reply::Text("Hello from the cloud.".into()))
    }

    pub(crate) fn record(
        &self,
        method: &str,
        uri: &axum::http::Uri,
        headers: &HeaderMap,
        body: &[u8],
        authorized: bool,
    ) {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        lock(&self.recorded).push(Recorded {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or_default().to_string(),
            headers,
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
            authorized,
        });
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        lock(&self.recorded).clone()
    }
}

/// Starts `router` on 127.0.0.1 (any free port): its base URL and its task.
pub(crate) async fn serve(router: axum::Router) -> std::io::Result<(String, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((base_url, task))
}

/// The Messages API's answer for `reply` (10 input and 5 output tokens, of which 3 input were cache reads).
pub(crate) fn claude_message(reply: &Reply) -> Value {
    let content = match reply {
        Reply::ToolCall { name, args } => json!([{"type": "tool_use", "id": "toolu_1", "name": name, "input": args}]),
        Reply::Text(text) => json!([{"type": "text", "text": text}]),
        Reply::Error { .. } => json!([]),
    };
    let stop = if matches!(reply, Reply::ToolCall { .. }) { "tool_use" } else { "end_turn" };
    json!({"id": "msg_cloud", "type": "message", "role": "assistant", "model": "claude-cloud", "content": content,
        "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 0}})
}
