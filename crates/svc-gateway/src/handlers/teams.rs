//! The LiteLLM-compatible team API: `/team/new`, `/team/update`, `/team/delete` (the master key; a change is in
//! force on this node before the answer, on the others within a second), `/team/list` (the master key) and
//! `/team/info` (also for a key of that team). The rules are svc-keys' [`TeamAdmin`].

use super::admin::{body, to_json, AdminState, Answer};
use crate::error::ApiError;
use crate::handlers::ApiQuery;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Extension, FromRef, State};
use axum::Json;
use serde_json::{json, Value};
use svc_config::TeamConfig;
use svc_keys::admin::KeyInfo;
use svc_keys::teams::{TeamAdmin, TeamIds, TeamInfo, TeamQuery, TeamRequest};
use svc_keys::Principal;
use svc_store::TeamRow;

/// A team as the API shows it: its settings, where it is defined, its number of keys and its budget now.
async fn team_json(s: &AdminState, t: &TeamConfig, rows: &[TeamRow], keys: usize) -> Answer {
    let row = rows.iter().find(|r| r.team_id == t.team_id);
    let Json(mut team) = to_json(&TeamInfo::of(t, row))?;
    if let Value::Object(fields) = &mut team {
        fields.insert("keys".into(), json!(keys));
        fields.insert("budget".into(), json!(s.budgets.team_view(&t.team_id).await?));
        fields.insert("fleet".into(), json!(s.config.fleet.name));
        fields.insert("currency".into(), json!(s.config.gateway.currency));
    }
    Ok(Json(team))
}

/// The running team `id` after a change on this node, as `/team/info`'s `team_info` shows it.
async fn after_change(state: &AppState, id: &str) -> Answer {
    crate::reload::teams::refresh(state, true).await?;
    let s = AdminState::from_ref(state);
    let team = s.config.team(id).ok_or_else(|| ApiError::internal("the team changed did not apply"))?;
    let keys = s.store.list_keys().await?.iter().filter(|k| k.team_id == id).count();
    team_json(&s, team, &s.store.list_teams().await?, keys).await
}

/// `POST /team/new`: a team, running fleet-wide; its budget period starts now.
pub async fn new(State(state): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    made(state, p, b, true).await
}

/// `POST /team/update`: changes a team made by the API (a file's team: 409 naming the file).
pub async fn update(State(state): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    made(state, p, b, false).await
}

async fn made(state: AppState, p: Principal, b: Body, create: bool) -> Answer {
    let s = AdminState::from_ref(&state);
    let req: TeamRequest = body(&s, &p, b).await?;
    let admin = TeamAdmin { store: &s.store, config: &s.config };
    let team = if create { admin.create(req).await? } else { admin.update(req).await? };
    after_change(&state, &team.team_id).await
}

/// `POST /team/delete` → `{"deleted_teams": [...], "deleted_keys": [...]}`: the teams and every key of theirs.
pub async fn delete(State(state): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let s = AdminState::from_ref(&state);
    let req: TeamIds = body(&s, &p, b).await?;
    let (teams, keys) = TeamAdmin { store: &s.store, config: &s.config }.delete(&req.team_ids).await?;
    crate::reload::teams::refresh(&state, true).await?;
    state.auth.keys.refresh(&s.store, true).await?;
    Ok(Json(json!({ "deleted_teams": teams, "deleted_keys": keys })))
}

/// `GET /team/list`: every running team with its settings, its number of keys and its budget view.
pub async fn list(State(s): State<AdminState>, Extension(p): Extension<Principal>) -> Answer {
    p.require_master()?;
    let (keys, rows) = (s.store.list_keys().await?, s.store.list_teams().await?);
    let mut teams = Vec::with_capacity(s.config.gateway.teams.len());
    for t in &s.config.gateway.teams {
        let Json(team) = team_json(&s, t, &rows, keys.iter().filter(|k| k.team_id == t.team_id).count()).await?;
        teams.push(team);
    }
    Ok(Json(Value::Array(teams)))
}

/// `GET /team/info?team_id=…` (the master key, or a key of that team).
pub async fn info(
    State(s): State<AdminState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<TeamQuery>,
) -> Answer {
    let id =
        q.team_id.ok_or_else(|| ApiError::bad_request("missing query parameter `team_id`", Some("team_id".into())))?;
    p.require_team(&id)?;
    let team = s
        .config
        .team(&id)
        .ok_or_else(|| ApiError::not_found("team_not_found", format!("no team `{id}`")).with_param("team_id"))?;
    let keys = s.store.list_keys().await?;
    let team_keys: Vec<KeyInfo> = keys.iter().filter(|k| k.team_id == id).map(|k| KeyInfo::from_row(k, None)).collect();
    let Json(info) = team_json(&s, team, &s.store.list_teams().await?, team_keys.len()).await?;
    let budget = info.get("budget").cloned();
    Ok(Json(json!({ "team_id": id, "team_info": info, "budget": budget, "keys": team_keys })))
}
