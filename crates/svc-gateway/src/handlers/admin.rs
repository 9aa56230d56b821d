//! The LiteLLM-compatible admin API: `/key/*` and `/team/*`, for the master key (`/team/info` also for a key of
//! that team).

use crate::error::ApiError;
use crate::handlers::{parse_json, read_body, ApiQuery};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use svc_budget::Money;
use svc_keys::admin::{Admin, CreateKey, KeyInfo, UpdateKey};
use svc_keys::Principal;

type Answer = Result<Json<Value>, ApiError>;

fn admin(state: &AppState) -> Admin<'_> {
    Admin { store: &state.pipeline.store, config: &state.pipeline.config, cache: Some(&state.auth.keys) }
}

async fn body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    principal: &Principal,
    body: Body,
) -> Result<T, ApiError> {
    principal.require_master()?;
    let bytes = read_body(body, state.pipeline.config.server.max_request_body_bytes).await?;
    parse_json(&bytes)
}

fn to_json<T: serde::Serialize>(v: &T) -> Answer {
    serde_json::to_value(v).map(Json).map_err(|_| ApiError::internal("cannot encode the answer"))
}

/// `POST /key/generate`.
pub async fn generate(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: CreateKey = body(&s, &p, b).await?;
    to_json(&admin(&s).create(req).await?)
}

/// `POST /key/update`.
pub async fn update(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: UpdateKey = body(&s, &p, b).await?;
    to_json(&admin(&s).update(req).await?)
}

/// Body naming keys: `{"keys": [...]}` (also `key_aliases`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysBody {
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    key_aliases: Vec<String>,
}

/// `POST /key/delete` → `{"deleted_keys": [...]}`.
pub async fn delete(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeysBody = body(&s, &p, b).await?;
    let all: Vec<String> = req.keys.into_iter().chain(req.key_aliases).collect();
    if all.is_empty() {
        return Err(ApiError::bad_request("give the keys to delete in `keys`", Some("keys".into())));
    }
    let deleted = admin(&s).delete(&all).await?;
    Ok(Json(json!({ "deleted_keys": deleted })))
}

/// Body naming one key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    key: String,
}

/// `POST /key/regenerate`: new secret, same record.
pub async fn regenerate(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&admin(&s).regenerate(&req.key).await?)
}

/// `POST /key/block`.
pub async fn block(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&admin(&s).revoke(&req.key).await?)
}

/// `POST /key/unblock`.
pub async fn unblock(State(s): State<AppState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&admin(&s).update(UpdateKey { key: req.key, blocked: Some(false), ..Default::default() }).await?)
}

/// Query naming a key.
#[derive(Debug, Deserialize)]
pub struct KeyQuery {
    key: Option<String>,
}

/// `GET /key/info?key=…`.
pub async fn info(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<KeyQuery>,
) -> Answer {
    p.require_master()?;
    let key = q.key.ok_or_else(|| ApiError::bad_request("missing query parameter `key`", Some("key".into())))?;
    let row = admin(&s).find(&key).await?;
    let vk = svc_keys::VirtualKey::from_row(&row);
    let budget = match vk.max_budget {
        Some(limit) => {
            let duration = vk.period(&s.pipeline.config);
            Some(
                s.pipeline
                    .budgets
                    .view(svc_limits::budgets::Scope::Key(vk.id.clone()), limit, duration, vk.anchor)
                    .await?,
            )
        }
        None => None,
    };
    s.pipeline.spend.flush().await;
    let spent = s
        .pipeline
        .store
        .sum_spend(&svc_store::SpendFilter { key_id: Some(row.id.clone()), ..Default::default() })
        .await?;
    Ok(Json(json!({
        "key": row.id,
        "info": KeyInfo::from_row(&row, None),
        "budget": budget,
        "team_budget": s.pipeline.budgets.team_view(&vk.team_id).await?,
        "total_spend": Money::from_nanos_i128(spent).as_f64(),
    })))
}

/// `GET /key/list`.
pub async fn list(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Answer {
    p.require_master()?;
    let keys = admin(&s).list().await?;
    Ok(Json(json!({ "keys": keys, "total_count": keys.len() })))
}

fn team_json(s: &AppState, t: &svc_config::TeamConfig, keys: usize) -> Value {
    json!({
        "team_id": t.team_id,
        "max_budget": t.budget_limit.map(Money::as_f64),
        "budget_duration": t.budget_duration.to_string(),
        "models": t.models,
        "rpm_limit": t.rpm_limit,
        "tpm_limit": t.tpm_limit,
        "keys": keys,
        "budget_start": t.budget_start.map(|d| d.to_rfc3339()),
        "fleet": s.pipeline.config.fleet.name,
    })
}

/// `GET /team/list`: every team of the config with its settings, its number of keys and its budget view.
pub async fn teams(State(s): State<AppState>, Extension(p): Extension<Principal>) -> Answer {
    p.require_master()?;
    let keys = s.pipeline.store.list_keys().await?;
    let mut teams = Vec::with_capacity(s.pipeline.config.gateway.teams.len());
    for t in &s.pipeline.config.gateway.teams {
        let mut team = team_json(&s, t, keys.iter().filter(|k| k.team_id == t.team_id).count());
        if let Value::Object(fields) = &mut team {
            fields.insert("budget".into(), json!(s.pipeline.budgets.team_view(&t.team_id).await?));
        }
        teams.push(team);
    }
    Ok(Json(Value::Array(teams)))
}

/// Query naming a team.
#[derive(Debug, Deserialize)]
pub struct TeamQuery {
    team_id: Option<String>,
}

/// `GET /team/info?team_id=…` (the master key, or a key of that team).
pub async fn team_info(
    State(s): State<AppState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<TeamQuery>,
) -> Answer {
    let id =
        q.team_id.ok_or_else(|| ApiError::bad_request("missing query parameter `team_id`", Some("team_id".into())))?;
    p.require_team(&id)?;
    let team = s
        .pipeline
        .config
        .team(&id)
        .ok_or_else(|| ApiError::not_found("team_not_found", format!("no team `{id}`")).with_param("team_id"))?;
    let keys = s.pipeline.store.list_keys().await?;
    let team_keys: Vec<KeyInfo> = keys.iter().filter(|k| k.team_id == id).map(|k| KeyInfo::from_row(k, None)).collect();
    let budget = s.pipeline.budgets.team_view(&id).await?;
    Ok(Json(
        json!({ "team_id": id, "team_info": team_json(&s, team, team_keys.len()), "budget": budget, "keys": team_keys }),
    ))
}
