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

use crate::auth::Auth;
use crate::client::{Call, Endpoint, UpstreamClient};
use crate::http;
use crate::passthrough::{self, Forwarded, Raw, Wire};
use crate::{ChatRequest, ChunkStream, ProviderError, Reply, Target};
use ::http::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::time::Duration;

/// An Anthropic Messages API endpoint: Anthropic's own, or Claude on Vertex AI or Bedrock.
pub struct Anthropic {
    client: UpstreamClient,
    api_base: String,
    /// The endpoints under `api_base`, parsed once (not per request); `None` when it is not a valid URL.
    urls: Option<Endpoints>,
    /// `x-api-key`, or the cloud's credential.
    auth: Auth,
    default_max_tokens: u32,
    /// Whose Messages API it is.
    cloud: Cloud,
}

/// Where Claude is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cloud {
    /// Anthropic's API (`POST /v1/messages`).
    Anthropic,
    /// Vertex AI: `POST {models}/{model}:rawPredict` (`:streamRawPredict`), the version in the body; `models` is
    /// `{api_base}/v1/projects/{project}/locations/{location}/publishers/anthropic/models`.
    Vertex {
        /// The models' URL.
        models: String,
    },
    /// Bedrock: `POST {api_base}/model/{model}/invoke` (`/invoke-with-response-stream`, whose stream is AWS's
    /// event-stream of the Messages events).
    Bedrock,
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
        let auth = Auth::header(HeaderName::from_static("x-api-key"), api_key);
        Anthropic { client, api_base, urls, auth, default_max_tokens, cloud: Cloud::Anthropic }
    }

    /// Claude on a cloud (`cloud` is not [`Cloud::Anthropic`]) at `api_base`, authenticated by `auth`.
    pub fn on_cloud(
        client: UpstreamClient,
        api_base: &str,
        cloud: Cloud,
        auth: Auth,
        default_max_tokens: u32,
    ) -> Anthropic {
        let api_base = api_base.trim_end_matches('/').to_string();
        Anthropic { client, api_base, urls: None, auth, default_max_tokens, cloud }
    }

    /// `anthropic`, `vertex_ai` or `bedrock`.
    pub fn name(&self) -> &'static str {
        match self.cloud {
            Cloud::Anthropic => "anthropic",
            Cloud::Vertex { .. } => "vertex_ai",
            Cloud::Bedrock => "bedrock",
        }
    }

    /// Whether the upstream counts a Messages body's tokens for free (Anthropic's and Vertex AI's
    /// `count-tokens`; Bedrock's is not used).
    pub(crate) fn counts_tokens(&self) -> bool {
        self.cloud != Cloud::Bedrock
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

    /// The call of a Messages body (`count`: of its token count) to deployment `d`, the body made the cloud's
    /// (`edit_body`) and signed or keyed. Anthropic's API also gets the `anthropic-version` header, unless `headers`
    /// (the client's API headers, sent on) hold one.
    async fn messages_call(
        &self,
        d: &Target<'_>,
        body: bytes::Bytes,
        stream: bool,
        count: bool,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Call, ProviderError> {
        let cloud_url;
        let (url, body) = match &self.cloud {
            Cloud::Anthropic => {
                let urls = self.urls()?;
                (if count { &urls.count_tokens } else { &urls.messages }, body)
            }
            Cloud::Vertex { models } => {
                let url = match (count, stream) {
                    (true, _) => format!("{models}/count-tokens:rawPredict"),
                    (false, true) => format!("{models}/{}:streamRawPredict", d.upstream_model),
                    (false, false) => format!("{models}/{}:rawPredict", d.upstream_model),
                };
                cloud_url = self.endpoint(&url)?;
                (&cloud_url, cloud_body(&body, &self.cloud, count, &headers)?)
            }
            Cloud::Bedrock => {
                let model = percent_encoding::utf8_percent_encode(d.upstream_model, crate::bedrock::MODEL_ID);
                let method = if stream { "invoke-with-response-stream" } else { "invoke" };
                cloud_url = self.endpoint(&format!("{}/model/{model}/{method}", self.api_base))?;
                (&cloud_url, cloud_body(&body, &self.cloud, count, &headers)?)
            }
        };
        let mut call = Call::post_json(url, body.clone());
        if self.cloud != Cloud::Bedrock {
            if self.cloud == Cloud::Anthropic && !headers.iter().any(|(n, _)| *n == VERSION_HEADER) {
                call = call.header(VERSION_HEADER, HeaderValue::from_static(Self::API_VERSION));
            }
            for (name, value) in headers {
                call = call.header(name, value);
            }
        }
        self.auth.apply(&self.client, d, call, &body).await
    }

    /// `url` as an endpoint.
    fn endpoint(&self, url: &str) -> Result<Endpoint, ProviderError> {
        self.client.endpoint(url).ok_or_else(|| ProviderError::Unsupported {
            message: format!("`{url}` is not a valid URL (api_base `{}`)", self.api_base),
            param: None,
        })
    }

    /// The Messages body a chat-completions request becomes (not streamed).
    pub(crate) fn messages_body(&self, req: &ChatRequest) -> Result<Map<String, Value>, ProviderError> {
        request::to_messages_request(req, self.default_max_tokens, false)
    }

    async fn post(&self, d: &Target<'_>, req: &ChatRequest, stream: bool) -> Result<Call, ProviderError> {
        let body = request::to_messages_request(req, self.default_max_tokens, stream)?;
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
        self.messages_call(d, bytes.into(), stream, false, Vec::new()).await
    }

    pub(crate) async fn chat(&self, d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let call = self.post(d, &req, false).await?;
        let bytes = http::fetch(&self.client, d, d.timeout, call, |a| error::status_error(d.id, a)).await?;
        let bad = |detail: String| ProviderError::BadResponse { deployment: d.id.to_string(), detail };
        let msg: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("response is not JSON: {e}")))?;
        let created = chrono::Utc::now().timestamp();
        let body: Map<String, Value> = response::to_chat_completion(&msg, d.upstream_model, created).map_err(bad)?;
        Ok(Reply::Object(body))
    }

    pub(crate) async fn chat_stream(&self, d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let call = self.post(d, &req, true).await?;
        let answer = http::open(&self.client, d, call, |a| error::status_error(d.id, a)).await?;
        let created = chrono::Utc::now().timestamp();
        let state =
            stream::StreamState::new(d.id.to_string(), d.upstream_model.to_string(), created, req.wants_stream_usage());
        if self.cloud == Cloud::Bedrock {
            let sse = crate::bedrock::messages_as_sse(answer.into_stream(), d.max_event_bytes);
            return Ok(stream::chunks(state, sse, d.max_event_bytes));
        }
        Ok(stream::chunks(state, answer.into_stream(), d.max_event_bytes))
    }

    /// A Messages request passed through to `{api_base}/v1/messages` (or `…/count_tokens`), with the client's `anthropic-version`
    /// (else [`Anthropic::API_VERSION`]) and `anthropic-beta`.
    pub(crate) async fn forward(&self, d: &Target<'_>, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        let count = wire == Wire::CountTokens;
        let call = self.messages_call(d, req.body, req.stream, count, req.headers).await?;
        if self.cloud == Cloud::Bedrock && req.stream {
            let answer = http::open(&self.client, d, call, |a| error::status_error(d.id, a)).await?;
            let sse = crate::bedrock::messages_as_sse(answer.into_stream(), d.max_event_bytes);
            let events = passthrough::raw_events(d.id.to_string(), sse, d.max_event_bytes, error::stream_error);
            return Ok(Raw::Stream(Box::pin(events)));
        }
        passthrough::exchange(&self.client, d, call, req.stream, |a| error::status_error(d.id, a), error::stream_error)
            .await
    }

    /// A free call that proves the endpoint and the credential: the model list of Anthropic's API; on Vertex AI
    /// a token count (it lists no models per project); on Bedrock the smallest call it has (`max_tokens: 1`).
    pub(crate) async fn probe(&self, d: &Target<'_>) -> Result<(), ProviderError> {
        let probe = Target { timeout: PROBE_TIMEOUT, ..*d };
        let call = match &self.cloud {
            Cloud::Anthropic => {
                let call =
                    Call::get(&self.urls()?.models).header(VERSION_HEADER, HeaderValue::from_static(Self::API_VERSION));
                self.auth.apply(&self.client, d, call, &[]).await?
            }
            Cloud::Vertex { .. } | Cloud::Bedrock => {
                let count = self.cloud != Cloud::Bedrock;
                let body = format!(
                    r#"{{"model":{},"max_tokens":1,"messages":[{{"role":"user","content":"ping"}}]}}"#,
                    Value::from(d.upstream_model)
                );
                let body = if count { body.replace(r#""max_tokens":1,"#, "") } else { body };
                self.messages_call(&probe, body.into(), false, count, Vec::new()).await?
            }
        };
        http::fetch(&self.client, &probe, PROBE_TIMEOUT, call, |a| error::status_error(d.id, a)).await.map(drop)
    }
}

/// A Messages body made a cloud's: no `model` (it is in the URL; kept for Vertex AI's token count, which
/// names it in the body), the cloud's `anthropic_version`, none of the fields the cloud refuses, and the client's
/// `anthropic-beta` values as Bedrock's `anthropic_beta` field (Bedrock takes no such header).
fn cloud_body(
    body: &[u8],
    cloud: &Cloud,
    count: bool,
    headers: &[(HeaderName, HeaderValue)],
) -> Result<bytes::Bytes, ProviderError> {
    let mut map: Map<String, Value> = serde_json::from_slice(body).map_err(|e| ProviderError::Unsupported {
        message: format!("the request is not a JSON object: {e}"),
        param: None,
    })?;
    let version = match cloud {
        Cloud::Bedrock => "bedrock-2023-05-31",
        _ => "vertex-2023-10-16",
    };
    if !count {
        map.remove("model");
        map.insert("anthropic_version".into(), Value::from(version));
    }
    // Fields the clouds refuse ("extraneous key … is not permitted"), as LiteLLM strips them: Bedrock takes no
    // `stream` (the path says it), `metadata`, `inference_geo` or `speed`; neither takes `output_format` or
    // `output_config` yet.
    for field in ["output_format", "output_config"] {
        map.remove(field);
    }
    if *cloud == Cloud::Bedrock {
        for field in ["stream", "metadata", "inference_geo", "speed"] {
            map.remove(field);
        }
        let betas: Vec<Value> = headers
            .iter()
            .filter(|(n, _)| n.as_str() == "anthropic-beta")
            .filter_map(|(_, v)| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|b| Value::from(b.trim()))
            .collect();
        if !betas.is_empty() {
            map.insert("anthropic_beta".into(), Value::Array(betas));
        }
    }
    serde_json::to_vec(&map)
        .map(bytes::Bytes::from)
        .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("api_base", &self.api_base)
            .field("auth", &self.auth)
            .field("cloud", &self.cloud)
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
