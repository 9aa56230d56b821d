//! The LiteLLM-compatible admin API of keys, `/key/*`, for the master key (teams: `teams.rs`).

use crate::error::ApiError;
use crate::handlers::{parse_json, read_body, ApiQuery};
use crate::spend::SpendWriter;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Extension, FromRef, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use svc_budget::Money;
use svc_config::Config;
use svc_keys::admin::{Admin, KeyInfo, KeyRequest};
use svc_keys::{KeyCache, Principal};
use svc_limits::budgets::Budgets;
use svc_store::Store;

pub(crate) type Answer = Result<Json<Value>, ApiError>;

/// What the admin API reads: the store and the config (the rules of svc-keys' [`Admin`]), the key cache (a change
/// takes effect on this node before the answer), the budgets (their views) and the spend writer (flushed before a
/// key's total is read). Taken by `FromRef`: a few reference counts per call, off the model path.
#[derive(Clone)]
pub struct AdminState {
    pub(crate) store: Store,
    pub(crate) config: Arc<Config>,
    keys: Arc<KeyCache>,
    pub(crate) budgets: Arc<Budgets>,
    spend: SpendWriter,
}

impl FromRef<AppState> for AdminState {
    fn from_ref(state: &AppState) -> AdminState {
        let p = state.pipeline();
        AdminState {
            store: p.store.clone(),
            config: p.config.clone(),
            keys: state.auth.keys.clone(),
            budgets: p.budgets.clone(),
            spend: p.spend.clone(),
        }
    }
}

impl AdminState {
    fn admin(&self) -> Admin<'_> {
        Admin { store: &self.store, config: &self.config, cache: Some(&self.keys) }
    }
}

pub(crate) async fn body<T: serde::de::DeserializeOwned>(
    s: &AdminState,
    principal: &Principal,
    body: Body,
) -> Result<T, ApiError> {
    principal.require_master()?;
    let bytes = read_body(body, s.config.server.max_request_body_bytes).await?;
    parse_json(&bytes)
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Answer {
    serde_json::to_value(v).map(Json).map_err(|_| ApiError::internal("cannot encode the answer"))
}

/// `POST /key/generate`.
pub async fn generate(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyRequest = body(&s, &p, b).await?;
    to_json(&s.admin().create(req).await?)
}

/// `POST /key/update`.
pub async fn update(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyRequest = body(&s, &p, b).await?;
    to_json(&s.admin().update(req).await?)
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
pub async fn delete(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeysBody = body(&s, &p, b).await?;
    let all: Vec<String> = req.keys.into_iter().chain(req.key_aliases).collect();
    if all.is_empty() {
        return Err(ApiError::bad_request("give the keys to delete in `keys`", Some("keys".into())));
    }
    let deleted = s.admin().delete(&all).await?;
    Ok(Json(json!({ "deleted_keys": deleted })))
}

/// Body naming one key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    key: String,
}

/// `POST /key/regenerate`: new secret, same record.
pub async fn regenerate(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&s.admin().regenerate(&req.key).await?)
}

/// `POST /key/block`.
pub async fn block(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&s.admin().revoke(&req.key).await?)
}

/// `POST /key/unblock`.
pub async fn unblock(State(s): State<AdminState>, Extension(p): Extension<Principal>, b: Body) -> Answer {
    let req: KeyBody = body(&s, &p, b).await?;
    to_json(&s.admin().update(KeyRequest { key: Some(req.key), blocked: Some(false), ..Default::default() }).await?)
}

/// Query naming a key.
#[derive(Debug, Deserialize)]
pub struct KeyQuery {
    key: Option<String>,
}

/// `GET /key/info?key=…`.
pub async fn info(
    State(s): State<AdminState>,
    Extension(p): Extension<Principal>,
    ApiQuery(q): ApiQuery<KeyQuery>,
) -> Answer {
    p.require_master()?;
    let key = q.key.ok_or_else(|| ApiError::bad_request("missing query parameter `key`", Some("key".into())))?;
    let row = s.admin().find(&key).await?;
    let vk = svc_keys::VirtualKey::from_row(&row);
    let budget = match vk.max_budget {
        Some(limit) => {
            let duration = vk.period(&s.config);
            Some(s.budgets.view(svc_limits::budgets::Scope::Key(vk.id.clone()), limit, duration, vk.anchor).await?)
        }
        None => None,
    };
    s.spend.flush().await;
    let spent =
        s.store.sum_spend(&svc_store::SpendFilter { key_id: Some(row.id.clone()), ..Default::default() }).await?;
    Ok(Json(json!({
        "key": row.id,
        "info": KeyInfo::from_row(&row, None),
        "budget": budget,
        "team_budget": s.budgets.team_view(&vk.team_id).await?,
        "total_spend": Money::from_nanos_i128(spent).as_f64(),
        "currency": s.config.gateway.currency,
    })))
}

/// `GET /key/list`.
pub async fn list(State(s): State<AdminState>, Extension(p): Extension<Principal>) -> Answer {
    p.require_master()?;
    let keys = s.admin().list().await?;
    Ok(Json(json!({ "keys": keys, "total_count": keys.len() })))
}
