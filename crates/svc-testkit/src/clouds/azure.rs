//! A fake Azure OpenAI resource. Like Azure: the key in `api-key` (or `Authorization: Bearer` with an Entra
//! token), else 401 `{"error":{"code":"401","message":"Access denied due to invalid subscription key…"}}`;
//! `api-version` required on every `/openai/…` path but the v1 route's, and one Azure knows, else 404
//! `{"error":{"code":"404","message":"Resource not found"}}`; the deployment in the path
//! (`/openai/deployments/{deployment}/chat/completions`) or, on `/openai/v1/chat/completions`, in `model`, else
//! 404 `DeploymentNotFound`. Chat completions (plain and streamed, with the usage chunk when asked), tool calls,
//! embeddings, the model list, and [`Reply::Error`]s in Azure's shape (`{"error":{"code","message"}}`).

use super::{serve, Common, Recorded, Reply};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;

/// The `api-version` values the fake knows (Azure's GA and preview data-plane versions).
pub const API_VERSIONS: [&str; 4] = ["2024-06-01", "2024-10-21", "2025-01-01-preview", "2025-04-01-preview"];

#[derive(Debug)]
struct Shared {
    api_key: String,
    ad_token: String,
    deployments: Vec<String>,
    common: Common,
}

/// A running fake; dropping it stops the server.
#[derive(Debug)]
pub struct FakeAzure {
    /// `http://127.0.0.1:<port>` (the resource's endpoint, `api_base`).
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeAzure {
    /// A resource with these deployments, taking `api_key` in `api-key` and `ad_token` as a bearer token.
    pub async fn start(api_key: &str, ad_token: &str, deployments: &[&str]) -> std::io::Result<FakeAzure> {
        let shared = Arc::new(Shared {
            api_key: api_key.into(),
            ad_token: ad_token.into(),
            deployments: deployments.iter().map(|d| d.to_string()).collect(),
            common: Common::default(),
        });
        let router = axum::Router::new().fallback(handle).with_state(shared.clone());
        let (base_url, task) = serve(router).await?;
        Ok(FakeAzure { base_url, shared, task })
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

impl Drop for FakeAzure {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error(status: u16, code: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(json!({"error": {"code": code, "message": message}}))).into_response()
}

async fn handle(State(s): State<Arc<Shared>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let authorized = header("api-key") == s.api_key || header("authorization") == format!("Bearer {}", s.ad_token);
    s.common.record(method.as_str(), &uri, &headers, &body, authorized);
    if !authorized {
        let msg = "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.";
        return error(401, "401", msg);
    }
    let path = uri.path();
    let query = uri.query().unwrap_or_default();
    let version = query.split('&').find_map(|p| p.strip_prefix("api-version="));
    let v1 = path.starts_with("/openai/v1/");
    match (v1, version) {
        (true, None | Some("preview")) => {}
        (false, Some(v)) if API_VERSIONS.contains(&v) => {}
        _ => return error(404, "404", "Resource not found"),
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (deployment, action) = match path.strip_prefix("/openai/deployments/").and_then(|r| r.split_once('/')) {
        Some((d, action)) => (d.to_string(), action.to_string()),
        None => {
            let rest = path.strip_prefix("/openai/v1/").or_else(|| path.strip_prefix("/openai/")).unwrap_or_default();
            (request.get("model").and_then(Value::as_str).unwrap_or_default().to_string(), rest.to_string())
        }
    };
    if action == "models" && method == Method::GET {
        let data: Vec<Value> = s.deployments.iter().map(|d| json!({"id": d, "object": "model"})).collect();
        return axum::Json(json!({"object": "list", "data": data})).into_response();
    }
    if !s.deployments.contains(&deployment) {
        let msg = "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.";
        return error(404, "DeploymentNotFound", msg);
    }
    match action.as_str() {
        "chat/completions" => chat(s.common.next(), &deployment, &request),
        "embeddings" => {
            let data = json!([{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.75]}]);
            axum::Json(json!({"object": "list", "data": data, "model": deployment,
                "usage": {"prompt_tokens": 4, "total_tokens": 4}}))
            .into_response()
        }
        _ => error(404, "404", "Resource not found"),
    }
}

/// A chat completion (or its stream) of `reply`: 10 prompt tokens (4 cached) and 5 completion tokens.
fn chat(reply: Reply, deployment: &str, request: &Value) -> Response {
    let (content, calls, finish) = match &reply {
        Reply::Text(t) => (json!(t), None, "stop"),
        Reply::ToolCall { name, args } => (
            Value::Null,
            Some(
                json!([{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args.to_string()}}]),
            ),
            "tool_calls",
        ),
        Reply::Error { status, kind, message } => return error(*status, kind, message),
    };
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4}});
    let model = format!("{deployment}-2024-08-06");
    if request.get("stream") != Some(&Value::Bool(true)) {
        let mut message = json!({"role": "assistant", "content": content});
        if let Some(calls) = calls {
            message["tool_calls"] = calls;
        }
        return axum::Json(json!({"id": "chatcmpl-azure", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                "content_filter_results": {"hate": {"filtered": false, "severity": "safe"}}}],
            "usage": usage}))
        .into_response();
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-azure", "object": "chat.completion.chunk", "created": 1, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    // Azure's first event is the prompt's content-filter results, with no choices.
    let mut events = vec![json!({"id": "", "object": "", "created": 0, "model": "", "choices": [],
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]})];
    events.push(chunk(json!({"role": "assistant", "content": ""}), Value::Null));
    match (content.as_str(), calls) {
        (Some(text), _) => {
            let (a, b) = text.split_at(text.len() / 2);
            events.push(chunk(json!({"content": a}), Value::Null));
            events.push(chunk(json!({"content": b}), Value::Null));
        }
        (None, Some(mut calls)) => {
            calls[0]["index"] = json!(0);
            events.push(chunk(json!({"tool_calls": calls}), Value::Null));
        }
        (None, None) => {}
    }
    events.push(chunk(json!({}), json!(finish)));
    if request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)) {
        events.push(json!({"id": "chatcmpl-azure", "object": "chat.completion.chunk", "created": 1, "model": model,
            "choices": [], "usage": usage}));
    }
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
