//! `GET /health` (liveness, spec 4.3) and `GET /health/readiness` (spec 4.4), with no key; `GET /health/models`
//! (master key): every deployment's health and figures.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use svc_keys::Principal;
use svc_routing::health::View;

/// 200 `{"status":"healthy"}` while the process runs.
pub async fn liveness() -> Json<Value> {
    Json(json!({"status": "healthy"}))
}

/// 200 when no deployment is unavailable and the store answers; 503 with the report otherwise.
pub async fn readiness(State(state): State<AppState>) -> Response {
    let p = state.pipeline();
    let report = state.edge.readiness.check(&p.models, &p.store, p.events.as_ref()).await;
    let status = if report.ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(report.as_ref().clone())).into_response()
}

/// One deployment in `GET /health/models`.
#[derive(Debug, Serialize)]
struct DeploymentHealth {
    deployment: String,
    model: String,
    provider: &'static str,
    endpoint: String,
    in_flight: usize,
    #[serde(flatten)]
    health: View,
}

/// `GET /health/models` (master key): every deployment, in config order, with its state, the reason, the
/// window's figures, its cooldown and its last probe.
pub async fn models(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<Value>, ApiError> {
    principal.require_master()?;
    let p = state.pipeline();
    let data: Vec<DeploymentHealth> = p
        .models
        .all()
        .map(|r| DeploymentHealth {
            deployment: r.deployment.id.clone(),
            model: r.alias.clone(),
            provider: r.deployment.provider_name(),
            endpoint: r.deployment.endpoint(),
            in_flight: r.in_flight.load(std::sync::atomic::Ordering::Relaxed),
            health: r.health.view(),
        })
        .collect();
    let h = &p.config.gateway.health;
    Ok(Json(json!({
        "object": "list",
        "window_seconds": h.window.as_secs(),
        "data": data,
    })))
}
