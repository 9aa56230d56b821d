//! OpenAI-compatible upstreams (OpenAI, vLLM, Ollama, Groq, …): the request is forwarded as it is, with
//! only `model` (and, for streams, `stream_options.include_usage`) changed by the caller. An answer is
//! checked before it is believed: a 200 whose body is an error object, or has no `choices`, is
//! [`ProviderError::BadResponse`] (a 502 the gateway may retry), never a completion.

use crate::client::{Answer, Call, Endpoint, UpstreamClient};
use crate::http::{self, error_body, raw_message, ApiKey};
use crate::passthrough::{self, Forwarded, Raw, StoredOp, Wire};
use crate::{raw, sse, ChatRequest, ChunkStream, ProviderError, Reply, Target};
use serde_json::{Map, Value};
use std::time::Duration;

/// An OpenAI-compatible endpoint, or an Azure OpenAI deployment (the same API at other paths, with
/// `api-version` in the query and the key in `api-key`).
#[derive(Debug)]
pub struct OpenAi {
    client: UpstreamClient,
    api_base: String,
    /// `openai` or `azure`.
    name: &'static str,
    /// The endpoints under `api_base`, parsed once (not per request); `None` when it is not a valid URL.
    urls: Option<Endpoints>,
    /// Where stored responses are (`{api_base}/responses`), and the query every call carries (Azure's
    /// `api-version=…`; empty for others).
    responses_root: String,
    query: String,
    /// The header of the key: `Authorization` (`Bearer …`), or Azure's `api-key`.
    key_header: ::http::header::HeaderName,
    /// The key's header value; `Err` when the configured key is not a valid header value.
    api_key: Option<Result<ApiKey, ()>>,
}

/// The URLs called.
#[derive(Debug)]
struct Endpoints {
    chat: Endpoint,
    responses: Endpoint,
    input_tokens: Endpoint,
    embeddings: Endpoint,
    models: Endpoint,
}

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl OpenAi {
    /// An endpoint at `api_base` (e.g. `https://api.openai.com/v1`), sharing the pooled `client`.
    pub fn new(client: UpstreamClient, api_base: &str, api_key: Option<&str>) -> OpenAi {
        let api_base = api_base.trim_end_matches('/').to_string();
        let url = |path: &str| client.endpoint(&format!("{api_base}/{path}"));
        let urls = (|| {
            Some(Endpoints {
                chat: url("chat/completions")?,
                responses: url("responses")?,
                input_tokens: url("responses/input_tokens")?,
                embeddings: url("embeddings")?,
                models: url("models")?,
            })
        })();
        let api_key = api_key.map(|k| ApiKey::bearer(k).ok_or(()));
        let responses_root = format!("{api_base}/responses");
        let key_header = ::http::header::AUTHORIZATION;
        OpenAi { client, api_base, name: "openai", urls, responses_root, query: String::new(), key_header, api_key }
    }

    /// Azure OpenAI's `deployment` at `api_base` (`https://<resource>.openai.azure.com`): chat completions and
    /// embeddings at `/openai/deployments/{deployment}/…?api-version={api_version}`, Responses at
    /// `/openai/responses?api-version=…`; or, when `api_version` is `v1`, `latest` or `preview` or `api_base`
    /// ends in `/openai/v1`, the v1 route (`/openai/v1/chat/completions`…, the deployment as `model`). The key
    /// goes in `api-key`; without one, `ad_token` (Microsoft Entra ID) as a bearer token.
    pub fn azure(
        client: UpstreamClient,
        api_base: &str,
        deployment: &str,
        api_version: &str,
        api_key: Option<&str>,
        ad_token: Option<&str>,
    ) -> OpenAi {
        let base = api_base.trim_end_matches('/');
        let v1 = base.ends_with("/openai/v1") || matches!(api_version, "v1" | "latest" | "preview");
        let resource = base.strip_suffix("/openai/v1").or_else(|| base.strip_suffix("/openai")).unwrap_or(base);
        let (root, chat_root, query) = match (v1, api_version) {
            (true, "preview") => {
                (format!("{resource}/openai/v1"), format!("{resource}/openai/v1"), "api-version=preview".to_string())
            }
            (true, _) => (format!("{resource}/openai/v1"), format!("{resource}/openai/v1"), String::new()),
            (false, v) => {
                let version: String = percent_encoding::utf8_percent_encode(v, PATH_SEGMENT).to_string();
                (
                    format!("{resource}/openai"),
                    format!("{resource}/openai/deployments/{deployment}"),
                    format!("api-version={version}"),
                )
            }
        };
        let q = if query.is_empty() { String::new() } else { format!("?{query}") };
        let url = |root: &str, path: &str| client.endpoint(&format!("{root}/{path}{q}"));
        let urls = (|| {
            Some(Endpoints {
                chat: url(&chat_root, "chat/completions")?,
                responses: url(&root, "responses")?,
                input_tokens: url(&root, "responses/input_tokens")?,
                embeddings: url(&chat_root, "embeddings")?,
                models: url(&root, "models")?,
            })
        })();
        let (key_header, api_key) = match (api_key, ad_token) {
            (Some(k), _) => (::http::header::HeaderName::from_static("api-key"), Some(ApiKey::raw(k).ok_or(()))),
            (None, Some(t)) => (::http::header::AUTHORIZATION, Some(ApiKey::bearer(t).ok_or(()))),
            (None, None) => (::http::header::AUTHORIZATION, None),
        };
        let responses_root = format!("{root}/responses");
        OpenAi {
            client,
            api_base: resource.to_string(),
            name: "azure",
            urls,
            responses_root,
            query,
            key_header,
            api_key,
        }
    }

    /// `openai`, or `azure`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The endpoints, or the error of an `api_base` that is not a URL.
    fn urls(&self) -> Result<&Endpoints, ProviderError> {
        self.urls.as_ref().ok_or_else(|| ProviderError::Unsupported {
            message: format!("`{}` is not a valid api_base", self.api_base),
            param: None,
        })
    }

    /// Adds `Authorization` when a key is configured.
    fn authorize(&self, call: Call, deployment: &str) -> Result<Call, ProviderError> {
        http::with_key(call, self.key_header.clone(), self.api_key.as_ref(), deployment)
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    fn post(&self, d: &Target<'_>, body: &ChatRequest) -> Result<Call, ProviderError> {
        let bytes = body
            .to_json()
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
        self.authorize(Call::post_json(&self.urls()?.chat, bytes), d.id)
    }

    pub(crate) async fn chat(&self, d: &Target<'_>, req: ChatRequest) -> Result<Reply, ProviderError> {
        let call = self.post(d, &req)?;
        let answer = http::fetch_object(&self.client, d, call, |a| status_error(d.id, a)).await?;
        check_completion(&answer)
            .map_err(|detail| ProviderError::BadResponse { deployment: d.id.to_string(), detail })?;
        Ok(Reply::Json(answer))
    }

    pub(crate) async fn chat_stream(&self, d: &Target<'_>, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        let answer = http::open(&self.client, d, self.post(d, &req)?, |a| status_error(d.id, a)).await?;
        Ok(Box::pin(sse::json_events(d.id.to_string(), answer.into_stream(), d.max_event_bytes)))
    }

    /// A Responses, input-token count or embeddings request passed through to `{api_base}/responses`,
    /// `/responses/input_tokens` or `/embeddings`.
    pub(crate) async fn forward(&self, d: &Target<'_>, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        let url = match wire {
            Wire::Embeddings => &self.urls()?.embeddings,
            Wire::InputTokens => &self.urls()?.input_tokens,
            Wire::Responses | Wire::Messages | Wire::CountTokens | Wire::Gemini | Wire::GeminiCountTokens => {
                &self.urls()?.responses
            }
        };
        let call = self.authorize(Call::post_json(url, req.body), d.id)?;
        passthrough::exchange(&self.client, d, call, req.stream, |a| status_error(d.id, a), stream_error).await
    }

    /// `op` on the stored response `id` (`{api_base}/responses/{id}`…), with the client's query string.
    pub(crate) async fn stored(
        &self,
        d: &Target<'_>,
        op: StoredOp,
        id: &str,
        query: Option<&str>,
    ) -> Result<Map<String, Value>, ProviderError> {
        let segment = percent_encoding::utf8_percent_encode(id, PATH_SEGMENT);
        let (method, tail) = match op {
            StoredOp::Retrieve => (::http::Method::GET, ""),
            StoredOp::Delete => (::http::Method::DELETE, ""),
            StoredOp::InputItems => (::http::Method::GET, "/input_items"),
            StoredOp::Cancel => (::http::Method::POST, "/cancel"),
        };
        let query = match (self.query.as_str(), query.filter(|q| !q.is_empty())) {
            ("", None) => String::new(),
            ("", Some(q)) | (q, None) => format!("?{q}"),
            (fixed, Some(q)) => format!("?{fixed}&{q}"),
        };
        let url =
            self.client.endpoint(&format!("{}/{segment}{tail}{query}", self.responses_root)).ok_or_else(|| {
                ProviderError::Unsupported {
                    message: format!("`{}` is not a valid api_base", self.api_base),
                    param: None,
                }
            })?;
        let call = self.authorize(Call::new(method, &url, bytes::Bytes::new()), d.id)?;
        let bytes = http::fetch(&self.client, d, d.timeout, call, |a| status_error(d.id, a)).await?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(body)) => Ok(body),
            _ => Err(ProviderError::BadResponse {
                deployment: d.id.to_string(),
                detail: "response is not a JSON object".into(),
            }),
        }
    }

    pub(crate) async fn probe(&self, d: &Target<'_>) -> Result<(), ProviderError> {
        let call = self.authorize(Call::get(&self.urls()?.models), d.id)?;
        http::fetch(&self.client, d, PROBE_TIMEOUT, call, |a| status_error(d.id, a)).await.map(drop)
    }
}

/// What is escaped in a path segment: controls, space, and what would end or split the segment.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Whether an answer is a chat completion: not an error object (an `error` that is not null), and a `choices`
/// array of objects (each read to its first character). The error says what is wrong.
fn check_completion(answer: &raw::Object) -> Result<(), String> {
    if answer.get("error").is_some_and(|e| e != "null") {
        let whole: Map<String, Value> = serde_json::from_slice(answer.bytes()).unwrap_or_default();
        return Err(format!("the upstream answered 200 with an error: {}", sse::error_message(&whole)));
    }
    let choices = answer.get("choices").ok_or_else(|| "the response has no `choices`".to_string())?;
    // serde_json, as the answer was read: jiter refuses a lone surrogate escape, which an upstream may write.
    match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(choices) {
        Ok(list) if list.iter().all(|c| c.get().starts_with('{')) => Ok(()),
        _ => Err("`choices` is not an array of objects".into()),
    }
}

/// The error of an OpenAI stream's `error` event.
fn stream_error(deployment: &str, event: &Value) -> ProviderError {
    let message = event.as_object().map(sse::error_message).unwrap_or_default();
    ProviderError::BadResponse {
        deployment: deployment.to_string(),
        detail: format!("the stream sent an error: {message}"),
    }
}

/// Turns an upstream HTTP error into [`ProviderError::Status`], keeping the upstream's own message.
async fn status_error(deployment: &str, resp: Answer) -> ProviderError {
    let (status, retry_after, body) = error_body(resp).await;
    let parsed: Option<Map<String, Value>> = serde_json::from_slice::<Value>(&body).ok().and_then(|v| match v {
        Value::Object(mut m) => match m.remove("error") {
            Some(Value::Object(e)) => Some(e),
            Some(Value::String(s)) => Some(Map::from_iter([("message".to_string(), Value::String(s))])),
            _ => m.remove("message").map(|msg| Map::from_iter([("message".to_string(), msg)])),
        },
        _ => None,
    });
    let text = |k: &str| parsed.as_ref().and_then(|e| e.get(k)).and_then(Value::as_str).map(String::from);
    let message = text("message").unwrap_or_else(|| raw_message(status, &body));
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message,
        kind: text("type"),
        param: text("param"),
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_completion_must_have_choices_and_no_error() {
        let ok = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]});
        let check = |v: Value| match raw::Object::parse(v.to_string().as_bytes()) {
            Ok(answer) => check_completion(&answer),
            Err(_) => Err("response is not a JSON object".into()),
        };
        assert_eq!(check(ok), Ok(()));
        for bad in [
            json!({"error": {"message": "quota exceeded", "type": "insufficient_quota"}}),
            json!({"object": "chat.completion"}),
            json!({"choices": "no"}),
            json!({"choices": [1]}),
            json!({"choices": [{"a": 1}, "x"]}),
            json!([1]),
        ] {
            assert!(check(bad.clone()).is_err(), "{bad}");
        }
        assert!(raw::Object::parse(b"not json").is_err());
        // A lone surrogate escape in the generated text (an upstream may write one) is still a completion.
        let lone = raw::Object::parse(br#"{"choices":[{"index":0,"message":{"content":"\ud83d"}}]}"#);
        assert_eq!(lone.map_err(|e| e.to_string()).and_then(|a| check_completion(&a)), Ok(()));
        let said = check(json!({"error": {"message": "quota exceeded"}}));
        assert!(said.is_err_and(|m| m.contains("quota exceeded")));
    }
}
