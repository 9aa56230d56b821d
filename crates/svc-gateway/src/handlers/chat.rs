//! `POST /chat/completions` (spec 4.1).

use crate::auth::Principal;
use crate::error::ApiError;
use crate::handlers::read_body;
use crate::pipeline;
use crate::state::AppState;
use crate::RequestId;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};

/// Chat completion, plain or streamed.
pub async fn completions(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Extension(RequestId(request_id, started)): Extension<RequestId>,
    body: Body,
) -> Response {
    let result: Result<Response, ApiError> = async {
        let bytes = read_body(body, state.config.server.max_request_body_bytes).await?;
        pipeline::handle(&state, principal, request_id.to_string(), &bytes, started).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}
