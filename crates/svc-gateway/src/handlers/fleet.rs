//! `GET /fleet/nodes` (master key): every node of this gateway's fleet, its state and figures.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::Json;
use serde_json::{json, Value};
use svc_keys::Principal;

/// `{"fleet": …, "nodes": [...]}`, nodes by name.
pub async fn nodes(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Result<Json<Value>, ApiError> {
    p.require_master()?;
    let pipeline = s.pipeline();
    let nodes = svc_routing::node::status(&pipeline.store, &pipeline.config.fleet.name).await?;
    Ok(Json(json!({ "fleet": pipeline.config.fleet.name, "nodes": nodes })))
}
