//! `GET /spend/logs` (master key): the spend records, filtered and paginated.

use crate::admin::Admin;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Extension, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_budget::Money;
use svc_store::SpendFilter;

/// Query of `/spend/logs`. Times are RFC 3339 or Unix seconds.
#[derive(Debug, Deserialize)]
pub struct SpendQuery {
    team_id: Option<String>,
    key: Option<String>,
    model: Option<String>,
    start: Option<String>,
    end: Option<String>,
    limit: Option<i64>,
    page: Option<i64>,
}

/// Parses an RFC 3339 time or Unix seconds into Unix milliseconds.
pub fn parse_time(text: &str, param: &str) -> Result<i64, ApiError> {
    if let Ok(secs) = text.parse::<i64>() {
        return Ok(secs * 1000);
    }
    chrono::DateTime::parse_from_rfc3339(text).map(|t| t.timestamp_millis()).map_err(|_| {
        ApiError::bad_request(format!("`{param}`: `{text}` is neither RFC 3339 nor Unix seconds"), Some(param.into()))
    })
}

/// `GET /spend/logs?team_id=&key=&model=&start=&end=&limit=&page=`.
pub async fn logs(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    Query(q): Query<SpendQuery>,
) -> Result<Json<Value>, ApiError> {
    p.require_master()?;
    let key_id = match &q.key {
        Some(k) => Some(Admin { store: &s.store, config: &s.config, cache: None }.find(k).await?.id),
        None => None,
    };
    let filter = SpendFilter {
        team_id: q.team_id.clone(),
        key_id,
        model: q.model.clone(),
        start_ms: q.start.as_deref().map(|t| parse_time(t, "start")).transpose()?,
        end_ms: q.end.as_deref().map(|t| parse_time(t, "end")).transpose()?,
    };
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let page = q.page.unwrap_or(1).max(1);
    let records = s.store.query_spend(&filter, limit, (page - 1) * limit).await?;
    let data: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "request_id": r.request_id,
                "time": chrono::DateTime::<chrono::Utc>::from_timestamp_millis(r.ts_ms).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
                "key_id": r.key_id, "team_id": r.team_id, "agent_role": r.agent_role,
                "model": r.model_alias, "upstream_model": r.upstream_model, "deployment": r.deployment,
                "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                "spend": Money(r.cost).as_f64(), "spend_nanos": r.cost, "status": r.status, "latency_ms": r.latency_ms,
            })
        })
        .collect();
    let total_spend = s.store.sum_spend(&filter).await?;
    Ok(Json(json!({ "data": data, "page": page, "limit": limit, "total_spend": Money(total_spend).as_f64() })))
}
