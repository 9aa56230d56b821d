//! OpenAI-compatible upstreams (OpenAI, vLLM, Ollama, Groq, …): the request is forwarded as it is, with
//! only `model` (and, for streams, `stream_options.include_usage`) changed by the caller.

use crate::{sse, ChatRequest, ChunkStream, Deployment, ProviderError, Reply};
use serde_json::{Map, Value};
use std::time::Duration;

/// An OpenAI-compatible endpoint.
#[derive(Debug)]
pub struct OpenAi {
    client: reqwest::Client,
    api_base: String,
    /// `{api_base}/chat/completions`, parsed once (not per request).
    chat_url: Option<reqwest::Url>,
    api_key: Option<String>,
}

/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of an error body that is read.
const MAX_ERROR_BODY: usize = 64 * 1024;

impl OpenAi {
    /// An endpoint at `api_base` (e.g. `https://api.openai.com/v1`), sharing the pooled `client`.
    pub fn new(client: reqwest::Client, api_base: &str, api_key: Option<String>) -> OpenAi {
        let api_base = api_base.trim_end_matches('/').to_string();
        let chat_url = reqwest::Url::parse(&format!("{api_base}/chat/completions")).ok();
        OpenAi { client, api_base, chat_url, api_key }
    }

    /// The base URL.
    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    fn post(&self, body: &ChatRequest) -> Result<reqwest::RequestBuilder, ProviderError> {
        let bytes = serde_json::to_vec(&body.body)
            .map_err(|e| ProviderError::Unsupported { message: format!("cannot encode request: {e}"), param: None })?;
        let mut rb = self
            .client
            .post(self.chat_url.clone().ok_or_else(|| ProviderError::Unsupported {
                message: format!("`{}` is not a valid api_base", self.api_base),
                param: None,
            })?)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        Ok(rb)
    }

    pub(crate) async fn chat(&self, d: &Deployment, req: ChatRequest) -> Result<Reply, ProviderError> {
        let resp = self
            .post(&req)?
            .timeout(d.timeout)
            .send()
            .await
            .map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))?;
        if !resp.status().is_success() {
            return Err(status_error(&d.id, resp).await);
        }
        let bytes = resp.bytes().await.map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(body)) => Ok(Reply { body }),
            _ => Err(ProviderError::BadResponse {
                deployment: d.id.clone(),
                detail: "response is not a JSON object".into(),
            }),
        }
    }

    pub(crate) async fn chat_stream(&self, d: &Deployment, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        // The timeout bounds the wait for the upstream's headers only: a stream may legitimately run longer.
        let send = self.post(&req)?.send();
        let resp = match tokio::time::timeout(d.timeout, send).await {
            Ok(r) => r.map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))?,
            Err(_) => return Err(ProviderError::Timeout { deployment: d.id.clone(), after: d.timeout }),
        };
        if !resp.status().is_success() {
            return Err(status_error(&d.id, resp).await);
        }
        Ok(Box::pin(sse::json_events(d.id.clone(), resp.bytes_stream())))
    }

    pub(crate) async fn probe(&self, d: &Deployment) -> Result<(), ProviderError> {
        let mut rb = self.client.get(format!("{}/models", self.api_base)).timeout(PROBE_TIMEOUT);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        let resp = rb.send().await.map_err(|e| ProviderError::from_reqwest(&d.id, PROBE_TIMEOUT, &e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(status_error(&d.id, resp).await)
        }
    }
}

/// Turns an upstream HTTP error into [`ProviderError::Status`], keeping the upstream's own message.
async fn status_error(deployment: &str, resp: reqwest::Response) -> ProviderError {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut body = Vec::new();
    let mut resp = resp;
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    let parsed: Option<Map<String, Value>> = serde_json::from_slice::<Value>(&body).ok().and_then(|v| match v {
        Value::Object(mut m) => match m.remove("error") {
            Some(Value::Object(e)) => Some(e),
            Some(Value::String(s)) => Some(Map::from_iter([("message".to_string(), Value::String(s))])),
            _ => m.remove("message").map(|msg| Map::from_iter([("message".to_string(), msg)])),
        },
        _ => None,
    });
    let text = |k: &str| parsed.as_ref().and_then(|e| e.get(k)).and_then(Value::as_str).map(String::from);
    let message = text("message").unwrap_or_else(|| {
        let raw = String::from_utf8_lossy(&body);
        let raw = raw.trim();
        if raw.is_empty() {
            format!("upstream returned HTTP {status}")
        } else {
            raw.chars().take(500).collect()
        }
    });
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message,
        kind: text("type"),
        param: text("param"),
        retry_after,
    }
}
