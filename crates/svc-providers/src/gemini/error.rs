//! Google's errors (`{"error": {"code", "message", "status"}}`) → [`ProviderError::Status`], the upstream's
//! status kept, its `status` name read as an OpenAI-style `kind`.

use crate::http::{error_body, raw_message};
use crate::ProviderError;
use serde_json::Value;

/// The OpenAI-style kind of one of Google's status names.
fn kind_of(status: &str) -> Option<&'static str> {
    Some(match status {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => "invalid_request_error",
        "UNAUTHENTICATED" => "authentication_error",
        "PERMISSION_DENIED" => "permission_error",
        "NOT_FOUND" => "not_found_error",
        "RESOURCE_EXHAUSTED" => "rate_limit_error",
        "UNAVAILABLE" => "overloaded_error",
        _ => return None,
    })
}

/// Turns an upstream HTTP error into [`ProviderError::Status`].
pub(super) async fn status_error(deployment: &str, resp: crate::client::Answer) -> ProviderError {
    let (status, retry_after, body) = error_body(resp).await;
    let error = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v.get("error").cloned());
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| raw_message(status, &body));
    let kind = error.as_ref().and_then(|e| e.get("status")).and_then(Value::as_str).and_then(kind_of);
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message,
        kind: kind.map(String::from),
        param: None,
        retry_after,
    }
}

/// An error given in a stream (an event whose data is `{"error": {…}}`).
pub(super) fn stream_error(deployment: &str, data: &Value) -> ProviderError {
    let error = data.get("error").unwrap_or(data);
    let status = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message: error.get("message").and_then(Value::as_str).unwrap_or("the upstream's stream failed").to_string(),
        kind: error.get("status").and_then(Value::as_str).and_then(kind_of).map(String::from),
        param: None,
        retry_after: None,
    }
}
