//! What every HTTP provider shares: the upstream key as a sensitive header value that never prints, and the
//! bounded read of an error answer's body (at most [`MAX_ERROR_BODY`] bytes within [`ERROR_BODY_TIME`]), so
//! an upstream that answers an error with an endless or crawling body costs neither memory nor a stuck task.
//!
//! What this file does not do: parse an error body (each provider knows its own shape).

use crate::{Deployment, ProviderError};
use reqwest::header::HeaderValue;
use std::time::Duration;

/// The most of an error body that is read.
pub const MAX_ERROR_BODY: usize = 64 * 1024;
/// How long reading an error body may take.
pub const ERROR_BODY_TIME: Duration = Duration::from_secs(5);

/// An upstream credential ready for its header: marked sensitive (hyper and reqwest never log it) and
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

/// Sends `rb` to deployment `d` and returns the answer when it is a success, else the provider's error made by
/// `status_error`. A call is bounded as a whole by the deployment's timeout (reading its body too); a stream
/// only until its headers, since a stream may legitimately run longer.
pub(crate) async fn exchange<F: std::future::Future<Output = ProviderError>>(
    d: &Deployment,
    rb: reqwest::RequestBuilder,
    stream: bool,
    status_error: impl FnOnce(reqwest::Response) -> F,
) -> Result<reqwest::Response, ProviderError> {
    let resp = if stream {
        match tokio::time::timeout(d.timeout, rb.send()).await {
            Ok(r) => r.map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))?,
            Err(_) => return Err(ProviderError::Timeout { deployment: d.id.clone(), after: d.timeout }),
        }
    } else {
        rb.timeout(d.timeout).send().await.map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))?
    };
    if !resp.status().is_success() {
        return Err(status_error(resp).await);
    }
    Ok(resp)
}

/// The whole body of a call's answer (within the call's timeout).
pub(crate) async fn body(d: &Deployment, resp: reqwest::Response) -> Result<bytes::Bytes, ProviderError> {
    resp.bytes().await.map_err(|e| ProviderError::from_reqwest(&d.id, d.timeout, &e))
}

/// The status, `Retry-After` (seconds) and at most [`MAX_ERROR_BODY`] bytes of an error answer's body, read
/// within [`ERROR_BODY_TIME`] (what arrived by then is kept).
pub async fn error_body(mut resp: reqwest::Response) -> (u16, Option<u64>, Vec<u8>) {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            let room = MAX_ERROR_BODY - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
    };
    // Dropping the response at the end closes the connection of a body that was not read to its end.
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
