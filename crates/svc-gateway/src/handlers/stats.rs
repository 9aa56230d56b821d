//! `GET /gateway/stats` (master key or a dashboard session): this process's request counters.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::Json;
use serde_json::{json, Value};
use svc_keys::Principal;

/// `GET /gateway/stats`: model requests and errors since start (see `ui::stats` for what counts), requests in
/// flight, this node and its start time.
pub async fn stats(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Result<Json<Value>, ApiError> {
    p.require_master()?;
    let p = s.pipeline();
    let in_flight = p.in_flight();
    Ok(Json(json!({
        "requests": s.edge.requests.requests(), "errors": s.edge.requests.errors(), "in_flight": in_flight,
        "node": p.config.fleet.node, "fleet": p.config.fleet.name, "started": s.edge.started,
        "version": env!("CARGO_PKG_VERSION"),
    })))
}
