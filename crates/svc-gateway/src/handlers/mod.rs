//! HTTP handlers: each extracts, calls the pipeline or the store, and maps the result. Nothing else.

pub mod admin;
pub mod chat;
pub mod config;
pub mod events;
pub mod fleet;
pub mod gemini;
pub mod health;
pub mod metrics;
pub mod models;
pub mod outbox;
pub mod responses;
pub mod spend;
pub mod stats;
pub mod teams;

use crate::error::ApiError;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

/// A query parameter `param` that must be a whole number from `min` to `max` (`default` when absent), else 400
/// naming it.
pub(crate) fn bounded(text: Option<&str>, param: &str, default: i64, min: i64, max: i64) -> Result<i64, ApiError> {
    let Some(text) = text else { return Ok(default) };
    match text.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::bad_request(
            format!("`{param}` must be a whole number from {min} to {max}, not `{text}`"),
            Some(param.into()),
        )),
    }
}

/// Reads a body of at most `limit` bytes (413 in the OpenAI shape beyond it).
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::too_large(limit)),
        Err(_) => Err(ApiError::bad_request("the request body could not be read", None)),
    }
}

/// Parses a JSON body into `T`, answering 400 with serde's description of what is wrong and, when a field is
/// at fault, its path in `param`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: serde_json::Error, param: Option<String>| {
        ApiError::bad_request(format!("invalid request body: {e}"), param)
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let param = e.path().iter().next().is_some().then(|| e.path().to_string());
        invalid(e.into_inner(), param)
    })?;
    deserializer.end().map_err(|e| invalid(e, None))?;
    Ok(value)
}

/// The query string as `T`; a value that does not fit is a 400 in the OpenAI shape naming the parameter
/// (axum's own `Query` answers plain text).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer).map(ApiQuery).map_err(|e| {
            let param = e.path().iter().next().is_some().then(|| e.path().to_string());
            ApiError::bad_query(param, e.inner())
        })
    }
}
