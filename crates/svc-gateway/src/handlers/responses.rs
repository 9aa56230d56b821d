//! The stored-response endpoints of the Responses API: `GET` and `DELETE /responses/{id}`,
//! `GET /responses/{id}/input_items` and `POST /responses/{id}/cancel`. Each finds where the response is kept
//! and whether the caller may reach it (`pipeline::stored::reach`: an id the caller may not reach is answered
//! as unknown), then asks the deployment that holds it.

use crate::error::ApiError;
use crate::pipeline::{access, stored};
use crate::state::AppState;
use axum::extract::{Extension, Path, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use serde_json::Value;
use svc_keys::Principal;
use svc_providers::passthrough::StoredOp;

/// `GET` (retrieve) and `DELETE` of `/responses/{id}`.
pub fn by_id() -> MethodRouter<AppState> {
    get(|s, p, id, uri| run(s, p, id, uri, StoredOp::Retrieve))
        .delete(|s, p, id, uri| run(s, p, id, uri, StoredOp::Delete))
}

/// `GET /responses/{id}/input_items`.
pub fn input_items() -> MethodRouter<AppState> {
    get(|s, p, id, uri| run(s, p, id, uri, StoredOp::InputItems))
}

/// `POST /responses/{id}/cancel`.
pub fn cancel() -> MethodRouter<AppState> {
    post(|s, p, id, uri| run(s, p, id, uri, StoredOp::Cancel))
}

/// Runs `op` on the stored response `id` for `principal`: 404 unless it may reach it, 403 when its key may no
/// longer use the alias it was answered under, else the deployment's answer (`model` the alias for a response
/// object).
async fn run(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    uri: Uri,
    op: StoredOp,
) -> Result<Response, ApiError> {
    let p = state.pipeline();
    let shared = p.config.gateway.responses_shared_within_team;
    let home = stored::reach(&p.models, &p.store, shared, &principal, &id, stored::Asked::ById).await?;
    access::allowed(&p.config, &principal, &home.alias)?;
    let query = uri.query();
    if op == StoredOp::Retrieve && query.is_some_and(|q| q.split('&').any(|p| p == "stream=true")) {
        return Err(ApiError::bad_request(
            "`stream=true` is not served: retrieve the response without it",
            Some("stream".into()),
        ));
    }
    let timeout = home.route.deployment.timeout;
    let answer = tokio::time::timeout(timeout, home.route.deployment.stored_response(op, &id, query)).await;
    match answer {
        Ok(Ok(mut body)) => {
            if matches!(op, StoredOp::Retrieve | StoredOp::Cancel) && body.contains_key("model") {
                body.insert("model".into(), Value::String(home.alias.clone()));
            }
            Ok(axum::Json(Value::Object(body)).into_response())
        }
        Ok(Err(e)) => Err(ApiError::from(e)),
        Err(_) => Err(ApiError::upstream_timeout(format!("the upstream took longer than {} s", timeout.as_secs()))),
    }
}
