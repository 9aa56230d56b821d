//! `GET /models` (spec 4.2): the aliases the caller may use.

use crate::pipeline::access;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::Json;
use serde_json::{json, Value};
use svc_keys::Principal;

/// Lists aliases; a virtual key sees only those it may use, the master key all.
pub async fn list(State(state): State<AppState>, Extension(principal): Extension<Principal>) -> Json<Value> {
    let p = state.pipeline();
    let data: Vec<Value> = p
        .models
        .aliases
        .iter()
        .filter(|a| access::allowed(&p.config, &principal, &a.id).is_ok())
        .map(|a| json!({"id": a.id, "object": "model", "created": state.edge.started, "owned_by": a.owned_by}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}
