//! Request counters for the dashboard's requests and errors per second (`GET /gateway/stats`): two relaxed
//! atomics the request-context middleware bumps for every model request. A separate small struct so a metrics
//! module can feed the same numbers later.
//!
//! What is counted: every answer to a model request (`POST` to `/chat/completions`, `/embeddings`,
//! `/messages`, `/responses`, at the root or under `/v1`) is one request; of those, an answer whose status is
//! 500 or above (the gateway's own failures and upstream failures, which it answers 502, 503 or 504) is also
//! one error. Refusals the caller can fix (400, 401, 403, 404, 413, 429 over a budget or rate limit) are not
//! errors. A stream that fails after its 200 was sent counts as a request only.

use axum::http::{Method, StatusCode};
use std::sync::atomic::{AtomicU64, Ordering};

/// Model requests answered and how many of them failed, since start.
#[derive(Debug, Default)]
pub struct RequestCounters {
    requests: AtomicU64,
    errors: AtomicU64,
}

impl RequestCounters {
    /// Counts the answer to one model request (see [`is_model_request`]).
    pub fn record(&self, status: StatusCode) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if status.is_server_error() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Model requests answered since start.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Of those, answered with a status of 500 or above.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// True for the paths that call a model.
pub fn is_model_request(method: &Method, path: &str) -> bool {
    use svc_front::gemini::{model_and_method, Method as Gemini};
    if *method != Method::POST {
        return false;
    }
    let gemini = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"));
    if let Some(tail) = gemini {
        return model_and_method(tail).is_some_and(|(_, m)| m != Gemini::CountTokens);
    }
    let path = path.strip_prefix("/v1").unwrap_or(path);
    matches!(path, "/chat/completions" | "/embeddings" | "/messages" | "/responses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_requests_and_their_server_errors_are_counted() {
        let c = RequestCounters::default();
        let answers = [
            (Method::POST, "/v1/chat/completions", StatusCode::OK),
            (Method::POST, "/messages", StatusCode::BAD_GATEWAY),
            (Method::POST, "/responses", StatusCode::TOO_MANY_REQUESTS),
            (Method::POST, "/v1/embeddings", StatusCode::SERVICE_UNAVAILABLE),
            (Method::GET, "/v1/models", StatusCode::OK),
            (Method::POST, "/key/generate", StatusCode::INTERNAL_SERVER_ERROR),
            (Method::POST, "/v1/messages/count_tokens", StatusCode::OK),
            (Method::GET, "/responses", StatusCode::UPGRADE_REQUIRED),
            (Method::POST, "/v1beta/models/gemini-x:streamGenerateContent", StatusCode::OK),
            (Method::POST, "/v1/models/gemini-x:embedContent", StatusCode::INTERNAL_SERVER_ERROR),
            (Method::POST, "/v1beta/models/gemini-x:countTokens", StatusCode::OK),
            (Method::POST, "/v1beta/models/gemini-x:predict", StatusCode::NOT_FOUND),
        ];
        for (method, path, status) in answers {
            if is_model_request(&method, path) {
                c.record(status);
            }
        }
        assert_eq!((c.requests(), c.errors()), (6, 3));
    }
}
