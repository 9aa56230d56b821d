//! Google's Gemini API provider (`model: gemini/<id>`): `POST {api_base}/v1beta/models/{model}:generateContent`
//! (`:streamGenerateContent?alt=sse` for a stream) with the key in `x-goog-api-key`; probes to
//! `GET {api_base}/v1beta/models`; OpenAI embeddings as `:batchEmbedContents` (`embed.rs`). The same API serves
//! Gemini models on Vertex AI (`model: vertex_ai/gemini-…`): at
//! `…/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:…`, with a service account's
//! access token, probed by a free `countTokens`. A Gemini request is passed through (`forward`); any other is translated by
//! direction: `request.rs` (chat → Gemini), `response.rs` (Gemini → chat, a reply and each stream event),
//! `error.rs` (Google's errors → [`ProviderError::Status`]).
//!
//! | chat completions | Gemini | |
//! |---|---|---|
//! | `system` / `developer` messages | `systemInstruction` | |
//! | `user` / `assistant` messages | `user` / `model` turns, consecutive turns of one role merged | |
//! | `image_url` parts | `inlineData` (a `data:` URL) or `fileData` | |
//! | assistant `tool_calls`, `tool` messages | `functionCall` parts, `functionResponse` parts (`{"output": content}`) named after their call | |
//! | `tools` (function), `tool_choice` | `functionDeclarations` with `parametersJsonSchema`, `functionCallingConfig` | other tools: 400 |
//! | `max_completion_tokens` / `max_tokens`, `temperature`, `top_p`, `n`, `stop`, `seed`, penalties, `response_format` | `generationConfig` | |
//! | everything else | dropped with a debug log | |
//!
//! Replies: text parts → `content`, thought parts → `reasoning_content`, `functionCall` → `tool_calls`;
//! `finishReason` STOP → `stop` (`tool_calls` when the answer calls a function), MAX_TOKENS → `length`,
//! SAFETY and the like → `content_filter`; `usageMetadata` → `usage` (thinking tokens are output, and in
//! `completion_tokens_details.reasoning_tokens`; cached ones in `prompt_tokens_details.cached_tokens`).

mod embed;
mod error;
mod request;
mod response;

use crate::auth::{Auth, GoogleToken};
use crate::client::{Call, Endpoint, UpstreamClient};
use crate::http;
use crate::passthrough::{self, Forwarded, Raw, Wire};
use crate::{ChatRequest, ChunkStream, ProviderError, Reply, Target};
use ::http::header::HeaderName;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// What Gemini's `countTokens` takes of the request `req` becomes (its `generateContentRequest`, less the model).
pub(crate) fn count_body(req: &ChatRequest) -> Result<serde_json::Map<String, serde_json::Value>, ProviderError> {
    let mut body = request::to_gemini(req)?;
    body.remove("generationConfig");
    Ok(body)
}

/// Who serves Gemini's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// Google's Gemini API, with a key.
    GeminiApi,
    /// Vertex AI, with a service account's token.
    Vertex,
}

/// A Gemini API endpoint: Google's Gemini API (a key), or Gemini models on Vertex AI (a service account).
pub struct Gemini {
    client: UpstreamClient,
    api_base: String,
    /// Google's Gemini API, or Vertex AI.
    host: Host,
    /// The models' URL: `{api_base}/v1beta/models`, or Vertex AI's
    /// `{api_base}/v1/projects/{project}/locations/{location}/publishers/google/models`.
    models_url: String,
    /// `x-goog-api-key`, or Vertex AI's access token.
    auth: Auth,
}

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The method of a generation, and of a streamed one.
const GENERATE: &str = "generateContent";
const STREAM: &str = "streamGenerateContent?alt=sse";

/// The header holding the key.
const KEY_HEADER: HeaderName = HeaderName::from_static("x-goog-api-key");

impl Gemini {
    /// The public API's base URL.
    pub const DEFAULT_API_BASE: &'static str = "https://generativelanguage.googleapis.com";

    /// An endpoint at `api_base` (a trailing `/` or `/v1beta` is ignored), sharing the pooled `client`.
    pub fn new(client: UpstreamClient, api_base: &str, api_key: Option<&str>) -> Gemini {
        let api_base = api_base.trim_end_matches('/');
        let api_base = api_base.strip_suffix("/v1beta").unwrap_or(api_base).to_string();
        let models_url = format!("{api_base}/v1beta/models");
        Gemini { client, api_base, host: Host::GeminiApi, models_url, auth: Auth::header(KEY_HEADER, api_key) }
    }

    /// Gemini models of Vertex AI's `project` in `location`, at `api_base` (else the location's own endpoint,
    /// `https://{location}-aiplatform.googleapis.com`; the global one for `global`), with `token`'s access tokens.
    pub fn vertex(
        client: UpstreamClient,
        api_base: Option<&str>,
        project: &str,
        location: &str,
        token: Arc<GoogleToken>,
    ) -> Gemini {
        let api_base = vertex_base(api_base, location);
        let models_url = format!("{api_base}/v1/projects/{project}/locations/{location}/publishers/google/models");
        Gemini { client, api_base, host: Host::Vertex, models_url, auth: Auth::Google(token) }
    }

    /// `gemini` or `vertex_ai`.
    pub fn name(&self) -> &'static str {
        match self.host {
            Host::GeminiApi => "gemini",
            Host::Vertex => "vertex_ai",
        }
    }

    /// Whether it is Vertex AI's (whose `countTokens` takes the request's own fields, not a
    /// `generateContentRequest`).
    pub(crate) fn on_vertex(&self) -> bool {
        self.host == Host::Vertex
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// `{models_url}/{model}:{method}` (the model's characters as they are: model ids are plain).
    fn url(&self, model: &str, method: &str) -> Result<Endpoint, ProviderError> {
        let url = format!("{}/{model}:{method}", self.models_url);
        self.client.endpoint(&url).ok_or_else(|| ProviderError::Unsupported {
            message: format!("`{}` with model `{model}` is not a valid URL", self.api_base),
            param: None,
        })
    }

    /// A call of `method` (`generateContent`, `streamGenerateContent?alt=sse`, `countTokens`) with the key.
    async fn call(&self, d: &Target<'_>, method: &str, body: impl Into<bytes::Bytes>) -> Result<Call, ProviderError> {
        let body = body.into();
        let call = Call::post_json(&self.url(d.upstream_model, method)?, body.clone());
        self.auth.apply(&self.client, d, call, &body).await
    }

    pub(crate) async fn chat(&self, d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let body = request::to_gemini_bytes(&req)?;
        let call = self.call(d, GENERATE, body).await?;
        let bytes = http::fetch(&self.client, d, d.timeout, call, |a| error::status_error(d.id, a)).await?;
        let bad = |detail: String| ProviderError::BadResponse { deployment: d.id.to_string(), detail };
        let answer: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("response is not JSON: {e}")))?;
        let created = chrono::Utc::now().timestamp();
        Ok(Reply::Object(response::to_chat_completion(&answer, d.upstream_model, created).map_err(bad)?))
    }

    pub(crate) async fn chat_stream(&self, d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let body = request::to_gemini_bytes(&req)?;
        let call = self.call(d, STREAM, body).await?;
        let answer = http::open(&self.client, d, call, |a| error::status_error(d.id, a)).await?;
        let events =
            passthrough::raw_events(d.id.to_string(), answer.into_stream(), d.max_event_bytes, error::stream_error);
        let mut state = response::StreamState::new(d.id, d.upstream_model, chrono::Utc::now().timestamp());
        Ok(Box::pin(events.map(move |ev| ev.and_then(|ev| state.chunk(&ev.data)))))
    }

    /// Whether it embeds (the Gemini API's `batchEmbedContents`; Vertex AI's embeddings are another API).
    pub(crate) fn embeds(&self) -> bool {
        self.host == Host::GeminiApi
    }

    /// A Gemini request passed through (`generateContent`, `streamGenerateContent` or `countTokens`), or an
    /// OpenAI embeddings request as `batchEmbedContents`.
    pub(crate) async fn forward(&self, d: &Target<'_>, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        if wire == Wire::Embeddings {
            let (inputs, body) = embed::to_batch(&req.body, d.upstream_model)?;
            let call = self.call(d, "batchEmbedContents", body).await?;
            let answer = http::fetch(&self.client, d, d.timeout, call, |a| error::status_error(d.id, a)).await?;
            return embed::from_batch(d.id, &answer, d.upstream_model, &inputs);
        }
        let method = match (wire, req.stream) {
            (Wire::GeminiCountTokens, _) => "countTokens",
            (_, true) => STREAM,
            (_, false) => GENERATE,
        };
        let call = self.call(d, method, req.body).await?;
        passthrough::exchange(&self.client, d, call, req.stream, |a| error::status_error(d.id, a), error::stream_error)
            .await
    }

    /// A free call that proves the endpoint, the credential and the model: the model list of the Gemini API, a
    /// `countTokens` on Vertex AI (which lists no models per project).
    pub(crate) async fn probe(&self, d: &Target<'_>) -> Result<(), ProviderError> {
        if self.host == Host::Vertex {
            let probe = Target { timeout: PROBE_TIMEOUT, ..*d };
            let body = r#"{"contents":[{"role":"user","parts":[{"text":"ping"}]}]}"#;
            let call = self.call(&probe, "countTokens", body).await?;
            return http::fetch(&self.client, &probe, PROBE_TIMEOUT, call, |a| error::status_error(d.id, a))
                .await
                .map(drop);
        }
        let url = format!("{}/v1beta/models?pageSize=1", self.api_base);
        let endpoint = self.client.endpoint(&url).ok_or_else(|| ProviderError::Unsupported {
            message: format!("`{}` is not a valid api_base", self.api_base),
            param: None,
        })?;
        let call = self.auth.apply(&self.client, d, Call::get(&endpoint), &[]).await?;
        http::fetch(&self.client, d, PROBE_TIMEOUT, call, |a| error::status_error(d.id, a)).await.map(drop)
    }
}

/// Vertex AI's endpoint for `location`, unless `api_base` names another.
pub fn vertex_base(api_base: Option<&str>, location: &str) -> String {
    match (api_base, location) {
        (Some(base), _) => base.trim_end_matches('/').to_string(),
        (None, "global") => "https://aiplatform.googleapis.com".to_string(),
        (None, location) => format!("https://{location}-aiplatform.googleapis.com"),
    }
}

impl std::fmt::Debug for Gemini {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemini").field("api_base", &self.api_base).field("auth", &self.auth).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_base_is_normalised_and_the_key_never_printed() {
        let client = UpstreamClient::new().unwrap_or_else(|e| panic!("{e}"));
        for (given, want) in [
            ("https://generativelanguage.googleapis.com/", "https://generativelanguage.googleapis.com"),
            ("https://generativelanguage.googleapis.com/v1beta", "https://generativelanguage.googleapis.com"),
            ("http://127.0.0.1:9/g/", "http://127.0.0.1:9/g"),
        ] {
            let g = Gemini::new(client.clone(), given, Some("AIza-secret"));
            assert_eq!(g.api_base(), want);
            assert!(!format!("{g:?}").contains("AIza-secret"));
        }
    }
}
