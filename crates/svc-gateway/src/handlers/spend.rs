//! `GET /spend/logs` (master key, or a virtual key for its own team): the spend records, filtered and paginated.

use crate::error::ApiError;
use crate::handlers::{bounded, ApiQuery};
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_budget::Money;
use svc_keys::admin::Admin;
use svc_keys::Principal;
use svc_store::{SpendFilter, SpendGroup, Store};

/// Query of `/spend/logs`. Times are RFC 3339 or Unix seconds; numbers are read here, so a bad one is a
/// 400 naming it.
#[derive(Debug, Deserialize)]
pub struct SpendQuery {
    team_id: Option<String>,
    key: Option<String>,
    model: Option<String>,
    client: Option<String>,
    session_id: Option<String>,
    group_by: Option<String>,
    start: Option<String>,
    end: Option<String>,
    limit: Option<String>,
    page: Option<String>,
}

/// The most records one page may hold.
const MAX_LIMIT: i64 = 1000;
/// The last page that may be asked for (a million pages of the largest size is far past any store).
const MAX_PAGE: i64 = 1_000_000;

/// Parses an RFC 3339 time or Unix seconds into Unix milliseconds; times outside the years 1970 to 9999 are
/// a 400 naming `param`.
pub fn parse_time(text: &str, param: &str) -> Result<i64, ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("`{param}`: `{text}` {why}"), Some(param.into()));
    let ms = match text.parse::<i64>() {
        Ok(secs) => secs.checked_mul(1000).ok_or_else(|| bad("is out of range"))?,
        Err(_) => chrono::DateTime::parse_from_rfc3339(text)
            .map(|t| t.timestamp_millis())
            .map_err(|_| bad("is neither RFC 3339 nor Unix seconds"))?,
    };
    // 9999-12-31T23:59:59.999Z
    const LAST: i64 = 253_402_300_799_999;
    if (0..=LAST).contains(&ms) {
        Ok(ms)
    } else {
        Err(bad("is out of range (years 1970 to 9999)"))
    }
}

/// Each known key's name by id: its alias, else its hint (`sk-svc-…abcd`); a deleted key is not named.
fn key_aliases(s: &AppState) -> std::collections::HashMap<String, String> {
    s.auth.keys.all().iter().map(|k| (k.id.clone(), k.alias.clone().unwrap_or_else(|| k.hint.clone()))).collect()
}

/// `GET /spend/logs?group_by=…`: totals per group of the records the filters match, dearest first.
async fn totals(s: &AppState, store: &Store, by: &str, filter: &SpendFilter) -> Result<Json<Value>, ApiError> {
    let group = SpendGroup::parse(by)
        .map_err(|why| ApiError::bad_request(format!("`group_by` {why}"), Some("group_by".into())))?;
    let totals = store.spend_totals(group, filter).await?;
    let aliases = if group == SpendGroup::Key { key_aliases(s) } else { Default::default() };
    let data: Vec<Value> = totals
        .iter()
        .map(|t| {
            json!({"group": t.group, "key_alias": aliases.get(&t.group), "requests": t.requests, "prompt_tokens": t.prompt_tokens,
                "completion_tokens": t.completion_tokens, "spend": Money::from_nanos(t.cost).as_f64(), "spend_nanos": t.cost})
        })
        .collect();
    Ok(Json(json!({ "group_by": by, "data": data })))
}

/// `GET /spend/logs?team_id=&key=&model=&client=&session_id=&start=&end=&limit=&page=` (or `&group_by=`).
pub async fn logs(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<SpendQuery>,
) -> Result<Json<Value>, ApiError> {
    // A virtual key reads its own team's records only.
    let team_id = match p.key() {
        None => q.team_id.clone(),
        Some(k) => {
            p.require_team(q.team_id.as_deref().unwrap_or(&k.team_id))?;
            Some(k.team_id.clone())
        }
    };
    let pipeline = s.pipeline();
    let start_ms = q.start.as_deref().map(|t| parse_time(t, "start")).transpose()?;
    let end_ms = q.end.as_deref().map(|t| parse_time(t, "end")).transpose()?;
    let key_id = match &q.key {
        Some(k) => {
            let row = Admin { store: &pipeline.store, config: &pipeline.config, cache: None }.find(k).await?;
            // Another team's key is not found, for a virtual key, rather than named.
            if p.key().is_some_and(|own| own.team_id != row.team_id) {
                return Err(svc_keys::admin::AdminError::KeyNotFound.into());
            }
            Some(row.id)
        }
        None => None,
    };
    let filter = SpendFilter {
        team_id,
        key_id,
        model: q.model.clone(),
        client: q.client.clone(),
        session_id: q.session_id.clone(),
        start_ms,
        end_ms,
    };
    // Every answered request is in what this returns, even one answered a moment ago.
    pipeline.spend.flush().await;
    if let Some(by) = &q.group_by {
        return totals(&s, &pipeline.store, by, &filter).await;
    }
    let limit = bounded(q.limit.as_deref(), "limit", 100, 1, MAX_LIMIT)?;
    let page = bounded(q.page.as_deref(), "page", 1, 1, MAX_PAGE)?;
    let records = pipeline.store.query_spend(&filter, limit, (page - 1) * limit).await?;
    let aliases = key_aliases(&s);
    let data: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "request_id": r.request_id,
                "time": chrono::DateTime::<chrono::Utc>::from_timestamp_millis(r.ts_ms).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
                "key_id": r.key_id, "key_alias": r.key_id.as_deref().and_then(|id| aliases.get(id)), "team_id": r.team_id, "agent_role": r.agent_role,
                "model": r.model_alias, "upstream_model": r.upstream_model, "deployment": r.deployment,
                "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                "spend": Money::from_nanos(r.cost).as_f64(), "spend_nanos": r.cost, "status": r.status, "latency_ms": r.latency_ms,
                "api": r.api, "client": r.client, "session_id": r.session_id, "response_id": r.response_id,
                "cache_read_tokens": r.cache_read_tokens, "cache_write_tokens": r.cache_write_tokens, "tool_uses": r.tool_uses,
                "basis": r.basis, "spend_parts_nanos": {"input": r.input_cost, "output": r.output_cost,
                    "cache_read": r.cache_read_cost, "cache_write": r.cache_write_cost, "tools": r.tool_cost},
            })
        })
        .collect();
    let total_spend = pipeline.store.sum_spend(&filter).await?;
    Ok(Json(
        json!({ "data": data, "page": page, "limit": limit, "total_spend": Money::from_nanos_i128(total_spend).as_f64() }),
    ))
}
