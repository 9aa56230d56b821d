//! Anthropic errors → [`ProviderError::Status`]: the HTTP error of a call (`{"type":"error","error":{"type",
//! "message"}}` with a status), and the `error` event of a stream (a type with no status, so the status is
//! derived from the type).
//!
//! What this file does not do: choose the status the gateway answers with. It keeps the upstream status as it
//! is (529 stays 529; the gateway maps 529 to 503) and only names the error `kind` in the OpenAI style.

use crate::http::{error_body, raw_message};
use crate::ProviderError;
use serde_json::Value;

/// The error types of the Messages API (its "Errors" reference), which are also the `kind` reported.
const KNOWN_TYPES: [&str; 10] = [
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
];

/// Turns an upstream HTTP error into [`ProviderError::Status`], keeping the upstream's status and message.
pub(super) async fn status_error(deployment: &str, resp: crate::client::Answer) -> ProviderError {
    let (status, retry_after, body) = error_body(resp).await;
    let (kind, message) = parse_error_body(status, &body);
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message,
        kind: Some(kind),
        param: None,
        retry_after,
    }
}

/// The `kind` and message of an error body; a body that is not Anthropic's error shape keeps its text
/// (cut to 500 characters) and gets the kind of its status.
pub(super) fn parse_error_body(status: u16, body: &[u8]) -> (String, String) {
    let error = serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("error").cloned());
    let upstream_type = error.as_ref().and_then(|e| e.get("type")).and_then(Value::as_str);
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| raw_message(status, body));
    (kind_for(status, upstream_type).to_string(), message)
}

/// The OpenAI-style error `kind`: Anthropic's own type when it is one of the documented ones, else one
/// derived from the status.
pub(super) fn kind_for(status: u16, upstream_type: Option<&str>) -> &'static str {
    if let Some(known) = upstream_type.and_then(|t| KNOWN_TYPES.iter().copied().find(|k| *k == t)) {
        return known;
    }
    type_for_status(status)
}

/// Anthropic's error `type` for an HTTP status (used for upstream errors without a type of their own, and by
/// the gateway's Messages API for its own errors).
pub fn type_for_status(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The HTTP status an error `type` is documented with, for errors that arrive as a stream event (with no
/// status of their own). An unknown type is an `api_error` (500).
pub(super) fn status_for_type(upstream_type: &str) -> u16 {
    match upstream_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// The [`ProviderError::Status`] of a stream's `error` event (`{"type":"error","error":{"type","message"}}`).
pub(crate) fn stream_error(deployment: &str, event: &Value) -> ProviderError {
    let error = event.get("error");
    let upstream_type = error.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or("api_error");
    let status = status_for_type(upstream_type);
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| format!("upstream stream failed with `{upstream_type}`"));
    ProviderError::Status {
        deployment: deployment.to_string(),
        status,
        message,
        kind: Some(kind_for(status, Some(upstream_type)).to_string()),
        param: None,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_type_then_the_status() {
        let cases: &[(u16, Option<&str>, &str)] = &[
            (400, Some("invalid_request_error"), "invalid_request_error"),
            (401, None, "authentication_error"),
            (403, Some("something_new"), "permission_error"),
            (404, None, "not_found_error"),
            (413, None, "request_too_large"),
            (429, Some("rate_limit_error"), "rate_limit_error"),
            (500, None, "api_error"),
            (502, None, "api_error"),
            (529, None, "overloaded_error"),
            (418, None, "invalid_request_error"),
            (500, Some("overloaded_error"), "overloaded_error"),
        ];
        for (status, upstream, kind) in cases {
            assert_eq!(kind_for(*status, *upstream), *kind, "{status} {upstream:?}");
        }
    }

    #[test]
    fn stream_error_types_get_their_documented_status() {
        let cases = [
            ("overloaded_error", 529),
            ("rate_limit_error", 429),
            ("api_error", 500),
            ("invalid_request_error", 400),
            ("request_too_large", 413),
            ("brand_new_error", 500),
        ];
        for (t, status) in cases {
            assert_eq!(status_for_type(t), status, "{t}");
        }
    }

    #[test]
    fn non_anthropic_bodies_keep_their_text() {
        let (kind, message) = parse_error_body(502, b"<html>bad gateway</html>");
        assert_eq!((kind.as_str(), message.as_str()), ("api_error", "<html>bad gateway</html>"));
        let (kind, message) = parse_error_body(503, b"");
        assert_eq!((kind.as_str(), message.as_str()), ("api_error", "upstream returned HTTP 503"));
    }
}
