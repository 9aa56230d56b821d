//! `ApiError`: the one error type of the HTTP surface, and the only place that knows HTTP statuses and the
//! OpenAI error shape `{"error":{"message","type","param","code"}}`. Every crate's error converts here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use svc_providers::ProviderError;

/// An error answered to a client (boxed: errors are rare, `Result`s on the hot path stay small).
#[derive(Debug, Clone)]
pub struct ApiError(Box<ErrorParts>);

/// The parts of an [`ApiError`].
#[derive(Debug, Clone)]
pub struct ErrorParts {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI-style `type` (e.g. `invalid_request_error`, `budget_exceeded`).
    pub kind: &'static str,
    /// Human message, never containing a secret.
    pub message: String,
    /// The offending request field.
    pub param: Option<String>,
    /// Seconds for `Retry-After` (429, 503).
    pub retry_after: Option<u64>,
    /// Extra machine-readable fields placed inside `error` (budget details).
    pub extra: Option<Map<String, Value>>,
    /// Overrides `code` (default: the status as a string, as LiteLLM does).
    pub code: Option<String>,
}

impl std::ops::Deref for ApiError {
    type Target = ErrorParts;
    fn deref(&self) -> &ErrorParts {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ErrorParts {
        &mut self.0
    }
}

impl ApiError {
    /// An error with a status, type and message.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(ErrorParts {
            status,
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
            extra: None,
            code: None,
        }))
    }

    /// 400 for a bad request field.
    pub fn bad_request(message: impl Into<String>, param: Option<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = param;
        e
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
    }

    /// 403.
    pub fn forbidden(kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, kind, message)
    }

    /// 404.
    pub fn not_found(kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, kind, message)
    }

    /// 503 with `Retry-After`.
    pub fn overloaded(message: impl Into<String>, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded_error", message);
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 for a failure of the gateway itself (the store); the detail goes to the log, not the client.
    pub fn internal(what: &str) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", format!("internal error: {what}"))
    }

    /// Sets `param`.
    pub fn with_param(mut self, param: impl Into<String>) -> ApiError {
        self.param = Some(param.into());
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("message".into(), Value::String(self.message.clone()));
        error.insert("type".into(), Value::String(self.kind.to_string()));
        error.insert("param".into(), self.param.clone().map(Value::String).unwrap_or(Value::Null));
        let code = self.code.clone().unwrap_or_else(|| self.status.as_u16().to_string());
        error.insert("code".into(), Value::String(code));
        if let Some(extra) = &self.extra {
            for (k, v) in extra {
                error.insert(k.clone(), v.clone());
            }
        }
        json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut resp =
            (self.status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if self.status.is_server_error() {
            resp.extensions_mut().insert(LoggedError(self.0.message));
        }
        resp
    }
}

/// Marks a 5xx response so the logging middleware writes it once.
#[derive(Debug, Clone)]
pub struct LoggedError(pub String);

impl From<ProviderError> for ApiError {
    fn from(e: ProviderError) -> ApiError {
        match e {
            ProviderError::Unreachable { .. } | ProviderError::BadResponse { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "upstream_unreachable", e.to_string())
            }
            ProviderError::Timeout { .. } => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", e.to_string())
            }
            ProviderError::Status { status, message, kind, param, retry_after, .. } => {
                // Anthropic's 529 "overloaded" has no standard meaning to OpenAI clients: it is a 503.
                let code = if status == 529 { 503 } else { status };
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
                let kind: &'static str = match kind.as_deref() {
                    Some("invalid_request_error") => "invalid_request_error",
                    Some("authentication_error") => "authentication_error",
                    Some("permission_error") => "permission_error",
                    Some("not_found_error") => "not_found_error",
                    Some("rate_limit_error") | Some("rate_limit_exceeded") => "rate_limit_error",
                    Some("overloaded_error") => "overloaded_error",
                    _ if status.is_client_error() => "invalid_request_error",
                    _ => "api_error",
                };
                {
                    let mut e = ApiError::new(status, kind, message);
                    e.param = param;
                    e.retry_after = retry_after;
                    e
                }
            }
            ProviderError::Unsupported { message, param } => ApiError::bad_request(message, param),
        }
    }
}

impl From<svc_providers::RequestError> for ApiError {
    fn from(e: svc_providers::RequestError) -> ApiError {
        ApiError::bad_request(e.message, e.param)
    }
}

impl From<svc_store::StoreError> for ApiError {
    fn from(e: svc_store::StoreError) -> ApiError {
        match e {
            svc_store::StoreError::Conflict(what) => ApiError::bad_request(format!("{what} already exists"), None),
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError::internal("the store failed")
            }
        }
    }
}
