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
//! model; refusal → `content_filter`; thinking blocks are dropped (in a stream, still counted toward its cap
//! by count-only chunks, see `stream.rs`). A stream always ends with the usage chunk
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

use crate::client::{Call, Endpoint, UpstreamClient};
use crate::http::{self, ApiKey};
use crate::passthrough::{self, Forwarded, Raw, Wire};
use crate::{ChatRequest, ChunkStream, ProviderError, Reply, Target};
use ::http::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::time::Duration;

/// An Anthropic Messages API endpoint.
pub struct Anthropic {
    client: UpstreamClient,
    api_base: String,
    /// The endpoints under `api_base`, parsed once (not per request); `None` when it is not a valid URL.
    urls: Option<Endpoints>,
    /// `x-api-key`; `Err` when the configured key is not a valid header value.
    api_key: Option<Result<ApiKey, ()>>,
    default_max_tokens: u32,
}

/// The URLs called.
struct Endpoints {
    messages: Endpoint,
    count_tokens: Endpoint,
    models: Endpoint,
}

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The `anthropic-version` header's name.
const VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

impl Anthropic {
    /// The public API's base URL.
    pub const DEFAULT_API_BASE: &'static str = "https://api.anthropic.com";
    /// The `anthropic-version` header sent with every call.
    pub const API_VERSION: &'static str = "2023-06-01";

    /// An endpoint at `api_base` (e.g. [`Anthropic::DEFAULT_API_BASE`]; a trailing `/` or `/v1` is ignored),
    /// sharing the pooled `client`. `default_max_tokens` is sent when a request sets no `max_tokens`
    /// (the Messages API requires one).
    pub fn new(client: UpstreamClient, api_base: &str, api_key: Option<&str>, default_max_tokens: u32) -> Anthropic {
        let api_base = api_base.trim_end_matches('/');
        let api_base = api_base.strip_suffix("/v1").unwrap_or(api_base).to_string();
        let url = |path: &str| client.endpoint(&format!("{api_base}{path}"));
        let urls = (|| {
            Some(Endpoints {
                messages: url("/v1/messages")?,
                count_tokens: url("/v1/messages/count_tokens")?,
                models: url("/v1/models")?,
            })
        })();
        let api_key = api_key.map(|k| ApiKey::raw(k).ok_or(()));
        Anthropic { client, api_base, urls, api_key, default_max_tokens }
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// The endpoints, or the error of an `api_base` that is not a URL.
    fn urls(&self) -> Result<&Endpoints, ProviderError> {
        self.urls.as_ref().ok_or_else(|| ProviderError::Unsupported {
            message: format!("`{}` is not a valid api_base", self.api_base),
            param: None,
        })
    }

    /// Adds the version and authentication headers.
    fn authorize(&self, call: Call, deployment: &str) -> Result<Call, ProviderError> {
        self.with_key(call.header(VERSION_HEADER, HeaderValue::from_static(Self::API_VERSION)), deployment)
    }

    /// Adds `x-api-key` when a key is configured.
    fn with_key(&self, call: Call, deployment: &str) -> Result<Call, ProviderError> {
        http::with_key(call, HeaderName::from_static("x-api-key"), self.api_key.as_ref(), deployment)
    }

    /// The Messages body a chat-completions request becomes (not streamed).
    pub(crate) fn messages_body(&self, req: &ChatRequest) -> Result<Map<String, Value>, ProviderError> {
        request::to_messages_request(req, self.default_max_tokens, false)
    }

    fn post(&self, d: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<Call, ProviderError> {
        let body = request::to_messages_request(req, self.default_max_tokens, stream)?;
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
        self.authorize(Call::post_json(&self.urls()?.messages, bytes), d.id)
    }

    pub(crate) async fn chat(&self, d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let call = self.post(d, &req, false)?;
        let bytes = http::fetch(&self.client, d, d.timeout, call, |a| error::status_error(d.id, a)).await?;
        let bad = |detail: String| ProviderError::BadResponse { deployment: d.id.to_string(), detail };
        let msg: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("response is not JSON: {e}")))?;
        let created = chrono::Utc::now().timestamp();
        let body: Map<String, Value> = response::to_chat_completion(&msg, d.upstream_model, created).map_err(bad)?;
        Ok(Reply::Object(body))
    }

    pub(crate) async fn chat_stream(&self, d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let call = self.post(d, &req, true)?;
        let answer = http::open(&self.client, d, call, |a| error::status_error(d.id, a)).await?;
        let created = chrono::Utc::now().timestamp();
        let state =
            stream::StreamState::new(d.id.to_string(), d.upstream_model.to_string(), created, req.wants_stream_usage());
        Ok(stream::chunks(state, answer.into_stream(), d.max_event_bytes))
    }

    /// A Messages request passed through to `{api_base}/v1/messages` (or `…/count_tokens`), with the client's `anthropic-version`
    /// (else [`Anthropic::API_VERSION`]) and `anthropic-beta`.
    pub(crate) async fn forward(&self, d: &Target<'_>, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        let url = if wire == Wire::CountTokens { &self.urls()?.count_tokens } else { &self.urls()?.messages };
        let mut call = Call::post_json(url, req.body);
        if !req.headers.iter().any(|(n, _)| *n == VERSION_HEADER) {
            call = call.header(VERSION_HEADER, HeaderValue::from_static(Self::API_VERSION));
        }
        for (name, value) in req.headers {
            call = call.header(name, value);
        }
        let call = self.with_key(call, d.id)?;
        passthrough::exchange(&self.client, d, call, req.stream, |a| error::status_error(d.id, a), error::stream_error)
            .await
    }

    pub(crate) async fn probe(&self, d: &Target<'_>) -> Result<(), ProviderError> {
        let call = self.authorize(Call::get(&self.urls()?.models), d.id)?;
        http::fetch(&self.client, d, PROBE_TIMEOUT, call, |a| error::status_error(d.id, a)).await.map(drop)
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

    fn client() -> UpstreamClient {
        UpstreamClient::new().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn api_base_is_normalised_and_the_key_never_printed() {
        let cases = [
            ("https://api.anthropic.com", "https://api.anthropic.com"),
            ("https://api.anthropic.com/", "https://api.anthropic.com"),
            ("https://api.anthropic.com/v1", "https://api.anthropic.com"),
            ("http://127.0.0.1:9/proxy/v1/", "http://127.0.0.1:9/proxy"),
        ];
        for (given, want) in cases {
            let a = Anthropic::new(client(), given, Some("sk-ant-secret"), 1024);
            assert_eq!(a.api_base(), want);
            assert!(!format!("{a:?}").contains("sk-ant-secret"));
        }
    }
}
