//! HTTP handlers: each extracts, calls the pipeline or the store, and maps the result. Nothing else.

pub mod admin;
pub mod chat;
pub mod events;
pub mod health;
pub mod models;
pub mod spend;

use crate::error::ApiError;
use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

/// Reads a body of at most `limit` bytes (413 in the OpenAI shape beyond it).
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("request body is larger than the limit of {limit} bytes (server.max_request_body_bytes)"),
        )),
        Err(_) => Err(ApiError::bad_request("the request body could not be read", None)),
    }
}

/// Parses a JSON body into `T`, answering 400 with serde's description of what is wrong.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}"), None))
}
