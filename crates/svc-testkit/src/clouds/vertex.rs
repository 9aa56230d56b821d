//! A fake Vertex AI, with its OAuth token endpoint. Like Google: `POST /token` takes
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>` and verifies the assertion's RS256
//! signature with the service account's public key, its issuer, audience (the endpoint itself), scope and
//! expiry, answering `{"access_token","expires_in","token_type":"Bearer"}` or 400 `invalid_grant`; every model
//! call needs `Authorization: Bearer` with a token it issued and that has not expired (else 401
//! `UNAUTHENTICATED`), for the fake's project and location. It also serves the Gemini API (`/v1beta/models/…`,
//! the key in `x-goog-api-key`, `batchEmbedContents` too). Gemini:
//! `…/publishers/google/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`;
//! Claude: `…/publishers/anthropic/models/{model}:rawPredict`, `:streamRawPredict` (the body must carry
//! `anthropic_version: vertex-2023-10-16` and no `model`), `count-tokens:rawPredict`. Errors in Google's shape.

use super::{claude_message, lock, serve, Common, Recorded, Reply};
use crate::anthropic::message_events;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The test service account's private key (made for these tests, and nothing else).
const PRIVATE_KEY: &str = include_str!("../fixtures/test-service-account.key");
/// Its public key, with which the token endpoint checks the signature.
const PUBLIC_KEY: &str = include_str!("../fixtures/test-service-account.pub");
/// The account.
pub const CLIENT_EMAIL: &str = "svc-test@fake-project.iam.gserviceaccount.com";
/// The project and location the fake serves.
pub const PROJECT: &str = "fake-project";
/// The location the fake serves.
pub const LOCATION: &str = "us-east5";
/// The key of the Gemini API (`x-goog-api-key`) the fake also serves, at `/v1beta/models/…`.
pub const GEMINI_API_KEY: &str = "AIzaFakeGeminiKey0001";

#[derive(Debug)]
struct Shared {
    token_uri: Mutex<String>,
    common: Common,
    tokens: Mutex<Vec<(String, Instant)>>,
    lifetime: AtomicU64,
    exchanges: AtomicUsize,
}

/// A running fake; dropping it stops the server.
#[derive(Debug)]
pub struct FakeVertex {
    /// `http://127.0.0.1:<port>` (`api_base`).
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeVertex {
    /// Starts the fake.
    pub async fn start() -> std::io::Result<FakeVertex> {
        let shared = Arc::new(Shared {
            token_uri: Mutex::new(String::new()),
            common: Common::default(),
            tokens: Mutex::new(Vec::new()),
            lifetime: AtomicU64::new(3600),
            exchanges: AtomicUsize::new(0),
        });
        let router = axum::Router::new().fallback(handle).with_state(shared.clone());
        let (base_url, task) = serve(router).await?;
        *lock(&shared.token_uri) = format!("{base_url}/token");
        Ok(FakeVertex { base_url, shared, task })
    }

    /// The service account's key file, its `token_uri` this fake's endpoint.
    pub fn service_account_json(&self) -> String {
        json!({"type": "service_account", "project_id": PROJECT, "private_key_id": "test-key-1",
            "private_key": PRIVATE_KEY, "client_email": CLIENT_EMAIL, "client_id": "1",
            "token_uri": *lock(&self.shared.token_uri)})
        .to_string()
    }

    /// How long the tokens issued from now on live (`expires_in`).
    pub fn set_token_lifetime(&self, secs: u64) {
        self.shared.lifetime.store(secs, Ordering::Relaxed);
    }

    /// How many tokens were issued.
    pub fn exchanges(&self) -> usize {
        self.shared.exchanges.load(Ordering::Relaxed)
    }

    /// Answers the next generation with `reply`.
    pub fn push(&self, reply: Reply) {
        self.shared.common.push(reply);
    }

    /// Every request received (token exchanges included).
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.common.requests()
    }
}

impl Drop for FakeVertex {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn google_error(status: u16, name: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(json!({"error": {"code": status, "message": message, "status": name}}))).into_response()
}

async fn handle(State(s): State<Arc<Shared>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    if uri.path() == "/token" {
        let answer = exchange(&s, &body);
        s.common.record(method.as_str(), &uri, &headers, &[], answer.is_ok());
        return answer.unwrap_or_else(|why| {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "invalid_grant", "error_description": why})))
                .into_response()
        });
    }
    if let Some(call) = uri.path().strip_prefix("/v1beta/models/") {
        let authorized = headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()) == Some(GEMINI_API_KEY);
        s.common.record(method.as_str(), &uri, &headers, &body, authorized);
        if !authorized {
            return google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.");
        }
        return gemini_api(&s, call, &body);
    }
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let now = Instant::now();
    let authorized = bearer.is_some_and(|t| lock(&s.tokens).iter().any(|(k, until)| k == t && now < *until));
    s.common.record(method.as_str(), &uri, &headers, &body, authorized);
    if !authorized {
        return google_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.");
    }
    let prefix = format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/");
    let Some(rest) = uri.path().strip_prefix(&prefix) else {
        return google_error(404, "NOT_FOUND", "The requested URL was not found on this server.");
    };
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match rest.split_once("/models/").and_then(|(publisher, m)| Some((publisher, m.split_once(':')?))) {
        Some(("google", (_, "countTokens"))) => {
            axum::Json(json!({"totalTokens": 7, "totalBillableCharacters": 20})).into_response()
        }
        Some(("google", (model, "generateContent"))) => gemini(s.common.next(), model, false),
        Some(("google", (model, "streamGenerateContent"))) => gemini(s.common.next(), model, true),
        Some(("anthropic", ("count-tokens", "rawPredict"))) => axum::Json(json!({"input_tokens": 9})).into_response(),
        Some(("anthropic", (_, method @ ("rawPredict" | "streamRawPredict")))) => {
            if request.get("anthropic_version").and_then(Value::as_str) != Some("vertex-2023-10-16")
                || request.get("model").is_some()
            {
                return google_error(
                    400,
                    "INVALID_ARGUMENT",
                    "anthropic_version: vertex-2023-10-16 is required, and `model` is not allowed in the body",
                );
            }
            claude(s.common.next(), method == "streamRawPredict")
        }
        _ => google_error(404, "NOT_FOUND", "Publisher model not found."),
    }
}

/// The Gemini API's methods (the same answers as Vertex AI's Gemini, and `batchEmbedContents`).
fn gemini_api(s: &Shared, call: &str, body: &[u8]) -> Response {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    match call.split_once(':') {
        Some((model, "generateContent")) => gemini(s.common.next(), model, false),
        Some((model, "streamGenerateContent")) => gemini(s.common.next(), model, true),
        Some((_, "countTokens")) => axum::Json(json!({"totalTokens": 7})).into_response(),
        Some((_, "batchEmbedContents")) => {
            let requests = request.get("requests").and_then(Value::as_array).cloned().unwrap_or_default();
            let embeddings: Vec<Value> =
                requests.iter().enumerate().map(|(i, _)| json!({"values": [0.5, i as f64]})).collect();
            axum::Json(json!({ "embeddings": embeddings })).into_response()
        }
        _ => google_error(404, "NOT_FOUND", "models/x is not found for API version v1beta"),
    }
}

/// Checks the assertion and issues a token.
fn exchange(s: &Shared, body: &[u8]) -> Result<Response, String> {
    let form = String::from_utf8_lossy(body);
    let field = |name: &str| form.split('&').find_map(|p| p.strip_prefix(&format!("{name}="))).map(str::to_string);
    if field("grant_type").as_deref() != Some("urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer") {
        return Err("Invalid grant_type.".into());
    }
    let assertion = field("assertion").ok_or("Missing assertion.")?;
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(PUBLIC_KEY.as_bytes()).map_err(|e| e.to_string())?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.set_audience(&[lock(&s.token_uri).clone()]);
    validation.set_issuer(&[CLIENT_EMAIL]);
    validation.set_required_spec_claims(&["exp", "iat", "aud", "iss"]);
    let token =
        jsonwebtoken::decode::<Value>(&assertion, &key, &validation).map_err(|e| format!("Invalid JWT: {e}"))?;
    let scope = token.claims.get("scope").and_then(Value::as_str).unwrap_or_default();
    if !scope.split(' ').any(|s| s == "https://www.googleapis.com/auth/cloud-platform") {
        return Err("Invalid scope.".into());
    }
    let n = s.exchanges.fetch_add(1, Ordering::Relaxed) + 1;
    let lifetime = s.lifetime.load(Ordering::Relaxed);
    let access = format!("ya29.fake-{n}");
    lock(&s.tokens).push((access.clone(), Instant::now() + Duration::from_secs(lifetime)));
    Ok(axum::Json(json!({"access_token": access, "expires_in": lifetime, "token_type": "Bearer"})).into_response())
}

/// Gemini's answer to `reply` (10 prompt tokens of which 3 cached, 5 candidate and 2 thinking tokens), whole or
/// as two events.
fn gemini(reply: Reply, model: &str, stream: bool) -> Response {
    let (parts, finish) = match reply {
        Reply::Text(t) => (json!([{"text": t}]), "STOP"),
        Reply::ToolCall { name, args } => (json!([{"functionCall": {"name": name, "args": args}}]), "STOP"),
        Reply::Error { status, kind, message } => return google_error(status, &kind, &message),
    };
    let usage = json!({"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 2,
        "cachedContentTokenCount": 3, "totalTokenCount": 17});
    let whole = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish}],
        "usageMetadata": usage, "modelVersion": model, "responseId": "vertex-1"});
    if !stream {
        return axum::Json(whole).into_response();
    }
    let first = json!({"candidates": [{"content": {"role": "model", "parts": parts}}], "modelVersion": model, "responseId": "vertex-1"});
    let text = format!(
        "data: {first}\r\n\r\ndata: {}\r\n\r\n",
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": finish}], "usageMetadata": usage, "modelVersion": model, "responseId": "vertex-1"})
    );
    sse(text)
}

/// Claude's Messages answer to `reply`, whole or streamed.
fn claude(reply: Reply, stream: bool) -> Response {
    if let Reply::Error { status, kind, message } = &reply {
        return google_error(*status, kind, message);
    }
    let message = claude_message(&reply);
    if !stream {
        return axum::Json(message).into_response();
    }
    let text: String =
        message_events(&message).iter().map(|e| format!("event: {}\ndata: {}\n\n", e.event, e.data)).collect();
    sse(text)
}

fn sse(text: String) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
