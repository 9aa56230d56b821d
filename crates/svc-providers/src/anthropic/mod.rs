//! The Anthropic Messages API provider (`model: anthropic/<id>`): an Anthropic upstream made to look exactly
//! like an OpenAI chat-completions model. Calls go to `POST {api_base}/v1/messages` with `x-api-key` and
//! `anthropic-version: 2023-06-01`; probes to `GET {api_base}/v1/models`.
//!
//! The conversion is split by direction: `request.rs` (OpenAI → Anthropic), `response.rs` (Anthropic →
//! OpenAI), `stream.rs` (Anthropic SSE → OpenAI chunks, one state machine) and `error.rs` (Anthropic errors →
//! [`ProviderError::Status`] with an OpenAI-style `kind`, the upstream status kept, 529 included).
//!
//! What it does not do: retries, fallbacks, health, or the gateway's status mapping (529 → 503): all in the
//! gateway. It never logs the API key (the header is marked sensitive and `Debug` redacts it).
//!
//! # Request fields
//!
//! | OpenAI field | Anthropic | |
//! |---|---|---|
//! | `system` / `developer` messages | `system` (texts joined by a blank line, wherever they stood) | |
//! | `user` / `assistant` messages | turns; consecutive turns of one role merged | empty text dropped |
//! | `tool` messages | `tool_result` blocks of a user turn, before any text of that turn | |
//! | assistant `tool_calls` | `tool_use` blocks; `arguments` parsed to `input` | not a JSON object: 400 |
//! | `image_url` parts | `image` with a `base64` source (`data:…;base64,` URLs) or a `url` source | other data URLs: 400 |
//! | `max_completion_tokens`, `max_tokens` | `max_tokens`, else the deployment's default | |
//! | `temperature`, `top_p` (and `top_k`, not OpenAI's) | as they are (Anthropic's temperature range is 0–1; the upstream's 400 comes back) | |
//! | `stop` | `stop_sequences` | |
//! | `user` | `metadata.user_id` | |
//! | `tools` (function), `tool_choice`, `parallel_tool_calls: false` | `tools` with `input_schema`; `auto`, `none`, `any`, `tool`; `disable_parallel_tool_use` | non-function tools: 400 |
//! | `n` > 1, `logprobs: true`, `functions`, `function_call`, audio `modalities`, other content part types | | 400 naming the field |
//! | `response_format` | dropped with a debug log | see below |
//! | everything else (`seed`, penalties, `logit_bias`, `top_logprobs`, `reasoning_effort`, `store`, `metadata`, `service_tier`, `strict`, `detail`, message `name`, …) | dropped with a debug log | |
//!
//! `response_format` (`json_object` and `json_schema`) is dropped rather than refused: OpenAI itself requires
//! a prompt that asks for JSON with `json_object`, Claude follows such prompts, and refusing would break agents
//! that set it by habit. The output is not schema-checked; a client that needs a guaranteed schema should ask
//! for it through a forced tool call (`tool_choice` naming a function), which translates exactly.
//!
//! # Responses
//!
//! Text blocks → `message.content` (null when the reply is only tool calls), `tool_use` → `tool_calls`;
//! `stop_reason` end_turn/stop_sequence → `stop`, max_tokens → `length`, tool_use → `tool_calls`; usage
//! `prompt_tokens` = input + cache creation + cache read tokens. `id` is the message id, `model` the upstream
//! model; refusal → `content_filter`; thinking blocks are dropped. A stream always ends with the usage chunk
//! when `stream_options.include_usage` is set, also when it is cut short by an `error` event (the error follows
//! the usage chunk; output tokens the upstream had not counted yet are estimated from the characters streamed,
//! see `stream.rs`). Upstream HTTP errors keep their status (529 too) with `kind` set to Anthropic's error type.

mod error;
pub use error::type_for_status;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod request;
mod response;
mod stream;

use crate::http::{self, ApiKey};
use crate::passthrough::{self, Forwarded, Raw, Wire};
use crate::{ChatRequest, ChunkStream, Deployment, ProviderError, Reply};
use reqwest::header::CONTENT_TYPE;
use serde_json::{Map, Value};
use std::time::Duration;

/// An Anthropic Messages API endpoint.
pub struct Anthropic {
    client: reqwest::Client,
    api_base: String,
    /// `x-api-key`; `Err` when the configured key is not a valid header value.
    api_key: Option<Result<ApiKey, ()>>,
    default_max_tokens: u32,
}

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Anthropic {
    /// The public API's base URL.
    pub const DEFAULT_API_BASE: &'static str = "https://api.anthropic.com";
    /// The `anthropic-version` header sent with every call.
    pub const API_VERSION: &'static str = "2023-06-01";

    /// An endpoint at `api_base` (e.g. [`Anthropic::DEFAULT_API_BASE`]; a trailing `/` or `/v1` is ignored),
    /// sharing the pooled `client`. `default_max_tokens` is sent when a request sets no `max_tokens`
    /// (the Messages API requires one).
    pub fn new(client: reqwest::Client, api_base: &str, api_key: Option<&str>, default_max_tokens: u32) -> Anthropic {
        let api_base = api_base.trim_end_matches('/');
        let api_base = api_base.strip_suffix("/v1").unwrap_or(api_base).to_string();
        let api_key = api_key.map(|k| ApiKey::raw(k).ok_or(()));
        Anthropic { client, api_base, api_key, default_max_tokens }
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// Adds the version and authentication headers.
    fn authorize(
        &self,
        rb: reqwest::RequestBuilder,
        deployment: &str,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        self.with_key(rb.header("anthropic-version", Self::API_VERSION), deployment)
    }

    /// Adds `x-api-key` when a key is configured.
    fn with_key(
        &self,
        rb: reqwest::RequestBuilder,
        deployment: &str,
    ) -> Result<reqwest::RequestBuilder, ProviderError> {
        match &self.api_key {
            None => Ok(rb),
            Some(Ok(key)) => Ok(rb.header("x-api-key", key.header())),
            // The key itself is never part of the message.
            Some(Err(())) => Err(ProviderError::Unreachable {
                deployment: deployment.to_string(),
                detail: "the configured api key is not a valid HTTP header value".into(),
            }),
        }
    }

    fn post(&self, d: &Deployment, req: &ChatRequest, stream: bool) -> Result<reqwest::RequestBuilder, ProviderError> {
        let body = request::to_messages_request(req, self.default_max_tokens, stream)?;
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
        let rb = self
            .client
            .post(format!("{}/v1/messages", self.api_base))
            .header(CONTENT_TYPE, "application/json")
            .body(bytes);
        self.authorize(rb, &d.id)
    }

    pub(crate) async fn chat(&self, d: &Deployment, req: ChatRequest) -> Result<Reply, ProviderError> {
        let rb = self.post(d, &req, false)?;
        let resp = http::exchange(d, rb, false, |resp| error::status_error(&d.id, resp)).await?;
        let bytes = http::body(d, resp).await?;
        let bad = |detail: String| ProviderError::BadResponse { deployment: d.id.clone(), detail };
        let msg: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("response is not JSON: {e}")))?;
        let created = chrono::Utc::now().timestamp();
        let body: Map<String, Value> = response::to_chat_completion(&msg, &d.upstream_model, created).map_err(bad)?;
        Ok(Reply::Object(body))
    }

    pub(crate) async fn chat_stream(&self, d: &Deployment, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let rb = self.post(d, &req, true)?;
        let resp = http::exchange(d, rb, true, |resp| error::status_error(&d.id, resp)).await?;
        let created = chrono::Utc::now().timestamp();
        let state = stream::StreamState::new(d.id.clone(), d.upstream_model.clone(), created, req.wants_stream_usage());
        Ok(stream::chunks(state, resp.bytes_stream(), d.max_event_bytes))
    }

    /// A Messages request passed through to `{api_base}/v1/messages` (or `…/count_tokens`), with the client's `anthropic-version`
    /// (else [`Anthropic::API_VERSION`]) and `anthropic-beta`.
    pub(crate) async fn forward(&self, d: &Deployment, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        let path = if wire == Wire::CountTokens { "/v1/messages/count_tokens" } else { "/v1/messages" };
        let mut rb = self
            .client
            .post(format!("{}{path}", self.api_base))
            .header(CONTENT_TYPE, "application/json")
            .body(req.body);
        let has_version = req.headers.iter().any(|(n, _)| n.as_str() == "anthropic-version");
        if !has_version {
            rb = rb.header("anthropic-version", Self::API_VERSION);
        }
        for (name, value) in req.headers {
            rb = rb.header(name, value);
        }
        let rb = self.with_key(rb, &d.id)?;
        let resp = http::exchange(d, rb, req.stream, |resp| error::status_error(&d.id, resp)).await?;
        passthrough::answer(d, resp, req.stream, error::stream_error).await
    }

    pub(crate) async fn probe(&self, d: &Deployment) -> Result<(), ProviderError> {
        let rb = self.client.get(format!("{}/v1/models", self.api_base)).timeout(PROBE_TIMEOUT);
        let resp = self
            .authorize(rb, &d.id)?
            .send()
            .await
            .map_err(|e| ProviderError::from_reqwest(&d.id, PROBE_TIMEOUT, &e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(error::status_error(&d.id, resp).await)
        }
    }
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("api_base", &self.api_base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("default_max_tokens", &self.default_max_tokens)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_base_is_normalised_and_the_key_never_printed() {
        let cases = [
            ("https://api.anthropic.com", "https://api.anthropic.com"),
            ("https://api.anthropic.com/", "https://api.anthropic.com"),
            ("https://api.anthropic.com/v1", "https://api.anthropic.com"),
            ("http://127.0.0.1:9/proxy/v1/", "http://127.0.0.1:9/proxy"),
        ];
        for (given, want) in cases {
            let a = Anthropic::new(reqwest::Client::new(), given, Some("sk-ant-secret"), 1024);
            assert_eq!(a.api_base(), want);
            assert!(!format!("{a:?}").contains("sk-ant-secret"));
        }
    }
}
