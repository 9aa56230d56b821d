//! `POST /config/reload` (master key): the configuration file read again and applied (see `reload.rs`); `svc
//! reload` and `SIGHUP` do the same.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::Json;
use serde_json::{json, Value};
use svc_keys::Principal;

/// `POST /config/reload` → 200 with what runs now; 400 `invalid_config` with every problem; 409
/// `restart_required` naming the settings only a restart changes. Nothing changes unless it answers 200.
pub async fn reload(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Result<Json<Value>, ApiError> {
    p.require_master()?;
    let reloaded = crate::reload::reload_file(&s).await?;
    Ok(Json(json!({ "reloaded": true, "config": reloaded })))
}
