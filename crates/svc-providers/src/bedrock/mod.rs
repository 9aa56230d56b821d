//! AWS Bedrock (`model: bedrock/<model id>`), at `https://bedrock-runtime.{region}.amazonaws.com` (or
//! `aws_bedrock_runtime_endpoint`), every call signed with SigV4 (`auth::AwsSigner`) or carrying a Bedrock API
//! key as a bearer token. Claude models (`anthropic.…`, and inference profiles such as `us.anthropic.…`) are
//! served by the Anthropic provider through InvokeModel with the Messages body (`Cloud::Bedrock`); every other
//! model by this one, through the Converse API: `POST /model/{id}/converse` and `/converse-stream`, whose stream
//! is AWS's event-stream framing (`frames.rs`). The translation is by direction: `converse.rs` (chat →
//! Converse), `converse_reply.rs` (Converse answer and stream events → chat).
//!
//! Errors: an HTTP error's type is in `x-amzn-ErrorType` (`ThrottlingException:…`) and its text in the body's
//! `message`; the status is kept. A stream's exception frame ends it with the error of its type.

mod converse;
mod converse_reply;
mod frames;

pub(crate) use frames::messages_as_sse;

use crate::auth::Auth;
use crate::client::{Answer, Call, Endpoint, UpstreamClient};
use crate::http::{self, error_body};
use crate::{ChatRequest, ChunkStream, ProviderError, Reply, Target};
use frames::{exception_message, Frame, FrameError};
use futures::StreamExt;
use std::time::Duration;

/// What is escaped in a model id in a path (`anthropic.claude-…-v1:0`, an ARN with `/`): AWS's SDKs escape
/// everything but the unreserved characters.
pub(crate) const MODEL_ID: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The runtime endpoint of `region`, unless `endpoint` names another.
pub fn runtime_endpoint(endpoint: Option<&str>, region: &str) -> String {
    match endpoint {
        Some(e) => e.trim_end_matches('/').to_string(),
        None => format!("https://bedrock-runtime.{region}.amazonaws.com"),
    }
}

/// Whether Bedrock serves `model` with Anthropic's Messages body (a Claude model or inference profile).
pub fn is_claude(model: &str) -> bool {
    model.contains("anthropic.")
}

/// A Bedrock runtime endpoint, for the models spoken to through Converse.
pub struct Bedrock {
    client: UpstreamClient,
    api_base: String,
    auth: Auth,
    default_max_tokens: u32,
}

impl Bedrock {
    /// Converse at `api_base` (see [`runtime_endpoint`]) with `auth`; `default_max_tokens` is sent when a
    /// request sets no cap.
    pub fn new(client: UpstreamClient, api_base: &str, auth: Auth, default_max_tokens: u32) -> Bedrock {
        Bedrock { client, api_base: api_base.trim_end_matches('/').to_string(), auth, default_max_tokens }
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// `{api_base}/model/{model}/{action}`.
    fn url(&self, model: &str, action: &str) -> Result<Endpoint, ProviderError> {
        let id = percent_encoding::utf8_percent_encode(model, MODEL_ID);
        let url = format!("{}/model/{id}/{action}", self.api_base);
        self.client
            .endpoint(&url)
            .ok_or_else(|| ProviderError::Unsupported { message: format!("`{url}` is not a valid URL"), param: None })
    }

    async fn post(&self, d: &Target<'_>, action: &str, body: Vec<u8>) -> Result<Call, ProviderError> {
        let body = bytes::Bytes::from(body);
        let call = Call::post_json(&self.url(d.upstream_model, action)?, body.clone());
        self.auth.apply(&self.client, d, call, &body).await
    }

    pub(crate) async fn chat(&self, d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let call = self.post(d, "converse", converse::to_converse_bytes(&req, self.default_max_tokens)?).await?;
        let bytes = http::fetch(&self.client, d, d.timeout, call, |a| status_error(d.id, a)).await?;
        let bad = |detail: String| ProviderError::BadResponse { deployment: d.id.to_string(), detail };
        let answer: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("response is not JSON: {e}")))?;
        let created = chrono::Utc::now().timestamp();
        Ok(Reply::Object(converse_reply::to_chat_completion(&answer, d.upstream_model, created).map_err(bad)?))
    }

    pub(crate) async fn chat_stream(&self, d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let body = converse::to_converse_bytes(&req, self.default_max_tokens)?;
        let call = self.post(d, "converse-stream", body).await?;
        let answer = http::open(&self.client, d, call, |a| status_error(d.id, a)).await?;
        Ok(converse_chunks(d.id, d.upstream_model, answer.into_stream(), d.max_event_bytes))
    }

    pub(crate) async fn probe(&self, d: &Target<'_>) -> Result<(), ProviderError> {
        probe(&self.client, &self.api_base, &self.auth, d).await
    }
}

/// ConverseStream's bytes (event-stream frames, each at most `max_frame` bytes) as chat-completion chunks of
/// `model`; an exception frame, a broken frame or transport ends the stream with its error.
pub(crate) fn converse_chunks<S, B, E>(deployment: &str, model: &str, bytes: S, max_frame: usize) -> ChunkStream
where
    S: futures::Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let deployment = deployment.to_string();
    let mut state = converse_reply::StreamState::new(&deployment, model, chrono::Utc::now().timestamp());
    let mut ended = false;
    let chunks = frames::frames(bytes, max_frame).filter_map(move |frame| {
        let out = match frame {
            // Nothing after an error (a frame stream may go on after an exception frame).
            _ if ended => None,
            Ok(Frame::Event(kind, payload)) => state.chunk(&kind, &payload).transpose(),
            Ok(Frame::Exception(kind, payload)) => Some(Err(exception_error(&deployment, &kind, &payload))),
            Err(e @ FrameError::Transport(_)) => {
                Some(Err(ProviderError::Unreachable { deployment: deployment.clone(), detail: e.to_string() }))
            }
            Err(e) => Some(Err(ProviderError::BadResponse { deployment: deployment.clone(), detail: e.to_string() })),
        };
        ended |= matches!(out, Some(Err(_)));
        std::future::ready(out)
    });
    Box::pin(chunks)
}

/// Bedrock's free call: `CountTokens` of a one-word Converse input (`POST /model/{id}/count-tokens`). A model
/// that does not count answers 400 `ValidationException`, which still proves the endpoint, the credential and
/// the model's access: that is a pass too.
pub(crate) async fn probe(
    client: &UpstreamClient,
    api_base: &str,
    auth: &Auth,
    d: &Target<'_>,
) -> Result<(), ProviderError> {
    let id = percent_encoding::utf8_percent_encode(d.upstream_model, MODEL_ID);
    let url = format!("{api_base}/model/{id}/count-tokens");
    let endpoint = client
        .endpoint(&url)
        .ok_or_else(|| ProviderError::Unsupported { message: format!("`{url}` is not a valid URL"), param: None })?;
    let body = bytes::Bytes::from_static(
        br#"{"input":{"converse":{"messages":[{"role":"user","content":[{"text":"ping"}]}]}}}"#,
    );
    let call = auth.apply(client, d, Call::post_json(&endpoint, body.clone()), &body).await?;
    let probe = Target { timeout: PROBE_TIMEOUT, ..*d };
    match http::fetch(client, &probe, PROBE_TIMEOUT, call, |a| status_error(d.id, a)).await {
        Ok(_) => Ok(()),
        Err(ProviderError::Status { status: 400, kind: Some(kind), .. }) if kind == "ValidationException" => Ok(()),
        Err(e) => Err(e),
    }
}

/// The error of an exception frame.
fn exception_error(deployment: &str, kind: &str, payload: &[u8]) -> ProviderError {
    ProviderError::Status {
        deployment: deployment.to_string(),
        status: status_of(kind),
        message: exception_message(payload),
        kind: Some(kind.to_string()),
        param: None,
        retry_after: None,
    }
}

/// The HTTP status Bedrock documents for an exception type.
fn status_of(kind: &str) -> u16 {
    match kind.to_ascii_lowercase().trim_end_matches("exception") {
        "validation" => 400,
        "accessdenied" => 403,
        "resourcenotfound" => 404,
        "modeltimeout" => 408,
        "modelerror" => 424,
        "throttling" | "servicequotaexceeded" => 429,
        "serviceunavailable" | "modelnotready" => 503,
        _ => 500,
    }
}

/// An HTTP error of Bedrock: the status kept, the type from `x-amzn-ErrorType` (its part before `:`), the text
/// from the body's `message`.
pub(crate) async fn status_error(deployment: &str, answer: Answer) -> ProviderError {
    let kind = answer
        .headers()
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(':').next().unwrap_or(v).to_string());
    let (status, retry_after, body) = error_body(answer).await;
    let message = if body.is_empty() { http::raw_message(status, &body) } else { exception_message(&body) };
    ProviderError::Status { deployment: deployment.to_string(), status, message, kind, param: None, retry_after }
}

impl std::fmt::Debug for Bedrock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bedrock").field("api_base", &self.api_base).field("auth", &self.auth).finish_non_exhaustive()
    }
}
