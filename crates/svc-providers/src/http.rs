//! What every HTTP provider shares: the upstream key as a sensitive header value that never prints, and the
//! bounded read of an error answer's body (at most [`MAX_ERROR_BODY`] bytes within [`ERROR_BODY_TIME`]), so
//! an upstream that answers an error with an endless or crawling body costs neither memory nor a stuck task.
//!
//! What this file does not do: parse an error body (each provider knows its own shape).

use crate::client::{Answer, BodyError, Call, UpstreamClient};
use crate::{raw, ProviderError, Target};
use ::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;
use std::future::Future;
use std::time::Duration;

/// The most of an error body that is read.
pub const MAX_ERROR_BODY: usize = 64 * 1024;
/// How long reading an error body may take.
pub const ERROR_BODY_TIME: Duration = Duration::from_secs(5);

/// An upstream credential ready for its header: marked sensitive (hyper never logs it) and
/// redacted in `Debug`.
#[derive(Clone)]
pub struct ApiKey(HeaderValue);

impl ApiKey {
    /// `value` as given (e.g. for `x-api-key`); `None` when it is not a valid header value (the caller
    /// reports that without the key).
    pub fn raw(value: &str) -> Option<ApiKey> {
        ApiKey::sensitive(value.to_string())
    }

    /// `Bearer <value>` for `Authorization`.
    pub fn bearer(value: &str) -> Option<ApiKey> {
        ApiKey::sensitive(format!("Bearer {value}"))
    }

    fn sensitive(text: String) -> Option<ApiKey> {
        let mut v = HeaderValue::from_str(&text).ok()?;
        v.set_sensitive(true);
        Some(ApiKey(v))
    }

    /// The header value.
    pub fn header(&self) -> HeaderValue {
        self.0.clone()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// Sends `call` to deployment `d` and returns the whole body of its answer when it is a success, else the
/// provider's error made by `status_error`. The call is bounded as a whole by `timeout` (reading its body too),
/// and the body by the deployment's `max_response_bytes` (a longer one is [`ProviderError::BadResponse`]).
pub(crate) async fn fetch<F: Future<Output = ProviderError>>(
    client: &UpstreamClient,
    d: &Target<'_>,
    timeout: Duration,
    call: Call,
    status_error: impl FnOnce(Answer) -> F,
) -> Result<Bytes, ProviderError> {
    let deployment = d.id;
    let exchange = async {
        let answer = client.send(call).await.map_err(|e| transport_error(deployment, timeout, &*e))?;
        if !answer.status().is_success() {
            return Err(status_error(answer).await);
        }
        match answer.bytes(d.max_response_bytes).await {
            Ok(bytes) => Ok(bytes),
            Err(BodyError::Transport(e)) => Err(transport_error(deployment, timeout, &e)),
            Err(too_large @ BodyError::TooLarge(_)) => Err(ProviderError::BadResponse {
                deployment: deployment.to_string(),
                detail: format!("{too_large} (max_response_bytes)"),
            }),
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(ProviderError::Timeout { deployment: deployment.to_string(), after: timeout }),
    }
}

/// [`fetch`] of an answer that must be a JSON object (else [`ProviderError::BadResponse`]), read as deep as its
/// top-level fields.
pub(crate) async fn fetch_object<F: Future<Output = ProviderError>>(
    client: &UpstreamClient,
    d: &Target<'_>,
    call: Call,
    status_error: impl FnOnce(Answer) -> F,
) -> Result<raw::Object, ProviderError> {
    let bytes = fetch(client, d, d.timeout, call, status_error).await?;
    raw::Object::parse(&bytes).map_err(|_| ProviderError::BadResponse {
        deployment: d.id.to_string(),
        detail: "response is not a JSON object".into(),
    })
}

/// Adds `key` as header `name` when a key is configured (`key` is `Err` when the configured one is not a valid
/// header value: then the call fails, without the key in the message).
pub(crate) fn with_key(
    call: Call,
    name: HeaderName,
    key: Option<&Result<ApiKey, ()>>,
    deployment: &str,
) -> Result<Call, ProviderError> {
    match key {
        None => Ok(call),
        Some(Ok(key)) => Ok(call.header(name, key.header())),
        Some(Err(())) => Err(ProviderError::Unreachable {
            deployment: deployment.to_string(),
            detail: "the configured api key is not a valid HTTP header value".into(),
        }),
    }
}

/// Sends `call` to deployment `d` and returns the answer, its body still to read, when it is a success, else
/// the provider's error made by `status_error`. Bounded by the deployment's timeout until the answer's headers
/// (a stream may legitimately run longer; the gateway bounds it).
pub(crate) async fn open<F: Future<Output = ProviderError>>(
    client: &UpstreamClient,
    d: &Target<'_>,
    call: Call,
    status_error: impl FnOnce(Answer) -> F,
) -> Result<Answer, ProviderError> {
    let answer = match tokio::time::timeout(d.timeout, client.send(call)).await {
        Ok(answer) => answer.map_err(|e| transport_error(d.id, d.timeout, &*e))?,
        Err(_) => return Err(ProviderError::Timeout { deployment: d.id.to_string(), after: d.timeout }),
    };
    if !answer.status().is_success() {
        return Err(status_error(answer).await);
    }
    Ok(answer)
}

/// A failure of the transport: a timeout, or else "unreachable" with every cause named.
pub(crate) fn transport_error(
    deployment: &str,
    timeout: Duration,
    e: &(dyn std::error::Error + 'static),
) -> ProviderError {
    if crate::client::is_timeout(e) {
        return ProviderError::Timeout { deployment: deployment.to_string(), after: timeout };
    }
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    ProviderError::Unreachable { deployment: deployment.to_string(), detail }
}

/// The status, `Retry-After` (seconds) and at most [`MAX_ERROR_BODY`] bytes of an error answer's body, read
/// within [`ERROR_BODY_TIME`] (what arrived by then is kept).
pub async fn error_body(mut answer: Answer) -> (u16, Option<u64>, Vec<u8>) {
    let status = answer.status().as_u16();
    let retry_after = answer
        .headers()
        .get(::http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = answer.chunk().await {
            let room = MAX_ERROR_BODY - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
    };
    // Dropping the answer at the end closes the connection of a body that was not read to its end.
    let _ = tokio::time::timeout(ERROR_BODY_TIME, read).await;
    (status, retry_after, body)
}

/// The text of a body that is not the provider's error shape: trimmed, at most 500 characters, or a
/// sentence naming the status when it is empty.
pub fn raw_message(status: u16, body: &[u8]) -> String {
    let raw = String::from_utf8_lossy(body);
    let raw = raw.trim();
    if raw.is_empty() {
        format!("upstream returned HTTP {status}")
    } else {
        raw.chars().take(500).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_print() {
        let k = ApiKey::bearer("sk-very-secret").unwrap_or_else(|| panic!("valid"));
        assert!(!format!("{k:?}").contains("secret"));
        assert!(k.header().is_sensitive());
        assert!(ApiKey::raw("bad\nkey").is_none());
        assert_eq!(raw_message(503, b"  "), "upstream returned HTTP 503");
    }
}
