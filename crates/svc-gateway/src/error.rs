//! `ApiError`: the one error type of the HTTP surface, and the only place that knows HTTP statuses and the
//! OpenAI error shape `{"error":{"message","type","param","code"}}`. Every crate's error converts here.
//!
//! An `ApiError` is built only by the named constructors below and is read-only afterwards (apart from
//! `with_param` / `code` while it is built), so the status table lives in this file alone. Building one never
//! logs: a 5xx answer carries its detail in the response extensions ([`LoggedError`]) and the request
//! middleware logs it once.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use svc_front::{ErrorShape, Fault};
use svc_providers::ProviderError;

/// An error answered to a client (boxed: errors are rare, `Result`s on the hot path stay small).
#[derive(Debug, Clone)]
pub struct ApiError(Box<Parts>);

#[derive(Debug, Clone)]
struct Parts {
    status: StatusCode,
    /// OpenAI-style `type` (e.g. `invalid_request_error`, `budget_exceeded`).
    kind: &'static str,
    /// Human message, never containing a secret.
    message: String,
    param: Option<String>,
    /// Seconds for `Retry-After` (429, 503).
    retry_after: Option<u64>,
    /// Extra machine-readable fields placed inside `error` (budget details).
    extra: Option<Map<String, Value>>,
    /// Overrides `code` (default: the status as a string, as LiteLLM does).
    code: Option<String>,
    /// What the log gets for a 5xx and the client does not (a store failure's cause).
    detail: Option<String>,
    /// `x-should-retry`, which the OpenAI and Anthropic SDKs (and the agents built on them) obey: `false` for a
    /// refusal that retrying cannot change before `Retry-After`, `true` for one that a retry may well pass.
    should_retry: Option<bool>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(Parts {
            status,
            kind,
            message: message.into(),
            param: None,
            retry_after: None,
            extra: None,
            code: None,
            detail: None,
            should_retry: None,
        }))
    }

    /// 400 for a bad request field.
    pub fn bad_request(message: impl Into<String>, param: Option<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.0.param = param;
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

    /// 404 for a model alias this gateway does not serve (the one answer for it, whichever stage finds it).
    pub fn unknown_model(alias: &str) -> ApiError {
        ApiError::not_found("model_not_found", format!("The model `{alias}` does not exist."))
            .with_param("model")
            .code("model_not_found")
    }

    /// 413 for a body over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("request body is larger than the limit of {limit} bytes (server.max_request_body_bytes)"),
        )
    }

    /// 429 `Budget exceeded` (spec 4.1 rule 1) with machine-readable `details` and `Retry-After`. Its `code`
    /// is OpenAI's own for an account out of money, `insufficient_quota`, so OpenAI clients (the SDKs' callers,
    /// Codex) stop at once instead of retrying a refusal that will not change before the period resets.
    pub fn budget_exceeded(details: Map<String, Value>, retry_after_secs: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_exceeded", "Budget exceeded");
        e.0.code = Some("insufficient_quota".into());
        e.0.should_retry = Some(false);
        e.0.extra = Some(details);
        e.0.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// 502 for an upstream's 401 or 403: the provider refused the gateway's own credentials for `deployment` (its
    /// `api_key`), which the client cannot fix; said so, so an agent's user does not take it for their own key,
    /// with `x-should-retry: false` (the same credentials will be refused again). The provider's own words (which
    /// may quote part of the gateway's key) go to the request line only.
    pub fn gateway_credentials_refused(deployment: &str, status: u16, upstream: &str) -> ApiError {
        let message = format!(
            "the provider refused the gateway's credentials for deployment `{deployment}` (it answered {status}); \
             this is the gateway's configuration, not your key: tell its operator"
        );
        let mut e = ApiError::new(StatusCode::BAD_GATEWAY, "upstream_auth_error", message);
        e.0.code = Some("upstream_credentials_refused".into());
        e.0.should_retry = Some(false);
        e.0.detail = Some(format!("the provider said: {upstream}"));
        e
    }

    /// 503 `budget_unavailable` in fleet mode when a budget cannot be judged and what this node holds does not
    /// pay for the request: the store could not be asked (or this node's leases may have lapsed while it was cut
    /// off), or the room is held by a silent node or moving between nodes. Not a budget refusal: the budget may
    /// well have room, so it says `x-should-retry: true` with a short `Retry-After`.
    /// `code` says which (`budget_store_unreachable`, `budget_room_stranded`, `budget_room_moving`).
    pub fn budget_unavailable(code: &str, message: impl Into<String>, retry_after_secs: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "budget_unavailable", message);
        e.0.code = Some(code.to_string());
        e.0.should_retry = Some(true);
        e.0.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// 429 over a rate limit (`what`: which one), with `Retry-After`.
    pub fn rate_limited(what: &str, retry_after_secs: u64) -> ApiError {
        let mut e =
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded", format!("Rate limit exceeded: {what}"));
        e.0.retry_after = Some(retry_after_secs.max(1));
        e
    }

    /// 503 with `Retry-After`.
    pub fn overloaded(message: impl Into<String>, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded_error", message);
        e.0.retry_after = Some(retry_after);
        e
    }

    /// 504 for a stream the upstream stopped feeding, or that ran past its time.
    pub fn upstream_timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", message)
    }

    /// 405 for a known path asked with a method it does not take.
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("`{path}` does not take {method} (see the `allow` header)"),
        )
    }

    /// 426: the request asked for a protocol upgrade the route does not serve.
    pub fn upgrade_required(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UPGRADE_REQUIRED, "invalid_request_error", message)
    }

    /// 400 for a query string that does not fit the route's parameters.
    pub fn bad_query(param: Option<String>, reason: impl std::fmt::Display) -> ApiError {
        let message = match &param {
            Some(p) => format!("invalid query parameter `{p}`: {reason}"),
            None => format!("invalid query string: {reason}"),
        };
        ApiError::bad_request(message, param)
    }

    /// The answer to a request the server could not read at all (hyper's 400, 414 and 431).
    pub fn unreadable_request(status: StatusCode) -> ApiError {
        match status {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ApiError::new(
                status,
                "request_headers_too_large",
                "the request headers are too large: at most 100 headers and about 400 KiB in all",
            ),
            StatusCode::URI_TOO_LONG => {
                ApiError::new(status, "uri_too_long", "the request URI is too long: at most 65534 bytes")
            }
            _ => ApiError::new(
                status,
                "invalid_request_error",
                "the request could not be read: it is not valid HTTP/1.1 (request line or headers)",
            ),
        }
    }

    /// 500 for a failure of the gateway itself; `what` goes to the client, nothing more.
    pub fn internal(what: &str) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", format!("internal error: {what}"))
    }

    /// Sets `param`.
    pub fn with_param(mut self, param: impl Into<String>) -> ApiError {
        self.0.param = Some(param.into());
        self
    }

    /// Sets `code`.
    pub fn code(mut self, code: &str) -> ApiError {
        self.0.code = Some(code.to_string());
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The OpenAI-style `type`.
    pub fn kind(&self) -> &'static str {
        self.0.kind
    }

    /// The error as a front end writes it in its API's shape.
    pub fn fault(&self) -> Fault<'_> {
        Fault {
            status: self.0.status.as_u16(),
            code: self.0.kind,
            message: &self.0.message,
            retry_after: self.0.retry_after,
        }
    }

    /// The message the client reads.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let p = &self.0;
        let mut error = Map::new();
        error.insert("message".into(), Value::String(p.message.clone()));
        error.insert("type".into(), Value::String(p.kind.to_string()));
        error.insert("param".into(), p.param.clone().map(Value::String).unwrap_or(Value::Null));
        let code = p.code.clone().unwrap_or_else(|| p.status.as_u16().to_string());
        error.insert("code".into(), Value::String(code));
        if let Some(extra) = &p.extra {
            for (k, v) in extra {
                error.insert(k.clone(), v.clone());
            }
        }
        json!({ "error": error })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.0.status.as_u16(), self.0.kind, self.0.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut resp = (self.0.status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
            .into_response();
        if let Some(secs) = self.0.retry_after {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if let Some(retry) = self.0.should_retry {
            let value = HeaderValue::from_static(if retry { "true" } else { "false" });
            resp.headers_mut().insert(const { HeaderName::from_static("x-should-retry") }, value);
        }
        resp.extensions_mut().insert(ErrorMessage { code: self.0.kind, message: self.0.message.clone() });
        if self.0.status.is_server_error() {
            let parts = *self.0;
            let logged = match parts.detail {
                Some(detail) => format!("{}: {detail}", parts.message),
                None => parts.message,
            };
            resp.extensions_mut().insert(LoggedError(logged));
        }
        resp
    }
}

/// The message of an error response, so a front end with its own error shape (Anthropic Messages) can write
/// the same error in it.
#[derive(Debug, Clone)]
pub struct ErrorMessage {
    /// The OpenAI-style type.
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

/// An error response rewritten in `shape` (status and headers kept: `Retry-After` and `x-should-retry` tell
/// when to retry); other responses, and every response in OpenAI's shape, as they are.
pub fn in_shape(resp: Response, shape: ErrorShape) -> Response {
    let Some(ErrorMessage { code, message }) = resp.extensions().get::<ErrorMessage>().cloned() else {
        return resp;
    };
    let (mut parts, body) = resp.into_parts();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let fault = Fault {
        status: parts.status.as_u16(),
        code,
        message: &message,
        retry_after: header("retry-after").and_then(|v| v.parse().ok()),
    };
    let Some(shaped) = shape.body(&fault) else {
        return Response::from_parts(parts, body);
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(serde_json::to_vec(&shaped).unwrap_or_default()))
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
            ProviderError::Timeout { .. } => ApiError::upstream_timeout(e.to_string()),
            ProviderError::Status { status: status @ (401 | 403), deployment, message, .. } => {
                ApiError::gateway_credentials_refused(&deployment, status, &message)
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
                let mut e = ApiError::new(status, kind, message);
                e.0.param = param;
                e.0.retry_after = retry_after;
                e
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

impl From<svc_limits::Refused> for ApiError {
    fn from(e: svc_limits::Refused) -> ApiError {
        use svc_limits::Refused;
        match e {
            Refused::Budget { details, retry_after_secs } => ApiError::budget_exceeded(*details, retry_after_secs),
            Refused::Unjudged(why) => {
                ApiError::budget_unavailable(why.code(), why.message(), svc_limits::Unjudged::RETRY_SECS)
            }
            Refused::Rate { what, retry_after_secs } => ApiError::rate_limited(&what, retry_after_secs),
            Refused::Store(fault) => ApiError::from(*fault),
            Refused::Internal(what) => ApiError::internal(what),
        }
    }
}

impl From<svc_keys::Forbidden> for ApiError {
    fn from(e: svc_keys::Forbidden) -> ApiError {
        ApiError::forbidden("permission_error", e.to_string())
    }
}

impl From<svc_keys::admin::AdminError> for ApiError {
    fn from(e: svc_keys::admin::AdminError) -> ApiError {
        use svc_keys::admin::AdminError;
        match e {
            AdminError::Invalid { message, param } => ApiError::bad_request(message, Some(param)),
            AdminError::KeyNotFound => ApiError::not_found("key_not_found", e.to_string()).with_param("key"),
            AdminError::TeamNotFound(_) => ApiError::not_found("team_not_found", e.to_string()).with_param("team_id"),
            AdminError::TeamExists(_) | AdminError::FileTeam { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()).with_param("team_id")
            }
            AdminError::Store(s) => ApiError::from(s),
        }
    }
}

impl From<crate::reload::refusal::ReloadError> for ApiError {
    fn from(e: crate::reload::refusal::ReloadError) -> ApiError {
        use crate::reload::refusal::ReloadError;
        let refused = |status, kind, message: String, extra: Map<String, Value>| {
            let mut e = ApiError::new(status, kind, message);
            e.0.extra = Some(extra);
            e
        };
        match e {
            ReloadError::Invalid(diagnostics) => {
                let lines: Vec<Value> = diagnostics.iter().map(|d| Value::String(d.to_string())).collect();
                let message = format!("the configuration does not check; nothing changed\n{}", e_lines(&lines));
                refused(
                    StatusCode::BAD_REQUEST,
                    "invalid_config",
                    message,
                    Map::from_iter([("diagnostics".into(), Value::Array(lines))]),
                )
            }
            ReloadError::NeedsRestart(settings) => {
                let message =
                    format!("these settings change only with a restart; nothing changed: {}", settings.join(", "));
                let list = Value::Array(settings.iter().map(|s| Value::String((*s).to_string())).collect());
                refused(StatusCode::CONFLICT, "restart_required", message, Map::from_iter([("settings".into(), list)]))
            }
            ReloadError::Store(e) => e.into(),
            other => ApiError::new(StatusCode::BAD_REQUEST, "invalid_config", format!("{other}; nothing changed")),
        }
    }
}

fn e_lines(lines: &[Value]) -> String {
    lines.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")
}

impl From<svc_store::StoreError> for ApiError {
    fn from(e: svc_store::StoreError) -> ApiError {
        match e {
            svc_store::StoreError::Conflict(what) => ApiError::bad_request(format!("{what} already exists"), None),
            other => {
                let mut e = ApiError::internal("the store failed");
                e.0.detail = Some(other.to_string());
                e
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_keep_their_cause_for_the_log_only() {
        let e = ApiError::from(svc_store::StoreError::Corrupt("spend_log.cost"));
        assert_eq!(e.message(), "internal error: the store failed");
        let resp = e.into_response();
        let logged = resp.extensions().get::<LoggedError>().map(|l| l.0.clone()).unwrap_or_default();
        assert!(logged.contains("spend_log.cost"), "{logged}");
    }

    #[test]
    fn budget_and_rate_refusals_carry_retry_after() {
        let resp = ApiError::rate_limited("key requests per minute", 0).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"1"[..]));
        let e = ApiError::budget_exceeded(Map::from_iter([("budget".to_string(), json!("team"))]), 30);
        assert_eq!((e.message(), e.body()["error"]["budget"].as_str()), ("Budget exceeded", Some("team")));
        let resp = e.into_response();
        assert_eq!(resp.headers().get("x-should-retry").map(|v| v.as_bytes()), Some(&b"false"[..]));
        let resp = ApiError::rate_limited("key requests per minute", 3).into_response();
        assert!(resp.headers().get("x-should-retry").is_none(), "a rate limit is worth retrying");
    }

    #[test]
    fn a_budget_that_cannot_be_judged_is_a_503_worth_retrying() {
        let e = ApiError::budget_unavailable("budget_store_unreachable", "the budget store cannot be reached", 0);
        assert_eq!((e.status(), e.kind()), (StatusCode::SERVICE_UNAVAILABLE, "budget_unavailable"));
        assert_eq!(e.body()["error"]["code"], "budget_store_unreachable");
        let resp = e.into_response();
        assert_eq!(resp.headers().get("x-should-retry").map(|v| v.as_bytes()), Some(&b"true"[..]));
        assert_eq!(resp.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"1"[..]));
        assert!(resp.extensions().get::<LoggedError>().is_some(), "logged once, as every 5xx");
    }
}
