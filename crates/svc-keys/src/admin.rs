//! Key and team administration shared by the admin API and the `svc keys` / `svc teams` commands, so
//! both enforce the same rules: a key belongs to a configured team, may only name models its team may use,
//! is shown once at creation and keeps its identity across rotation.

use crate::key::{generate_secret, hash_secret, hint_of, looks_like_key, KeyCache};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use svc_budget::{BudgetDuration, Money};
use svc_config::Config;
use svc_store::{now_ms, KeyRow, Store};

/// Why an administration rule refused, whoever asked (mapped to HTTP by the gateway, to exit codes by the CLI).
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A field is missing or wrong; `param` names it.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// The field.
        param: String,
    },
    /// No key has that secret, alias or id.
    #[error("no such key (give the key, its alias or its id)")]
    KeyNotFound,
    /// No team of that name runs.
    #[error("no team `{0}`")]
    TeamNotFound(String),
    /// A team of that name runs already.
    #[error("team `{0}` exists already")]
    TeamExists(String),
    /// The team is defined in the config file: the file changes it.
    #[error("team `{team_id}` is defined in the config file {file}: change it there and reload (`svc reload`)")]
    FileTeam {
        /// The team.
        team_id: String,
        /// The file that defines it.
        file: String,
    },
    /// The store failed, or a unique value (an alias) is taken.
    #[error(transparent)]
    Store(#[from] svc_store::StoreError),
}

impl AdminError {
    pub(crate) fn invalid(message: impl Into<String>, param: &str) -> AdminError {
        AdminError::Invalid { message: message.into(), param: param.to_string() }
    }
}

/// The longest key alias, in bytes (it may label metrics: `server.metrics_key_labels`).
pub const MAX_KEY_ALIAS_BYTES: usize = 128;
/// The longest agent role, in bytes (it is the `agent` of the events the key posts).
pub const MAX_AGENT_ROLE_BYTES: usize = 128;
/// The longest `user_id`, in bytes.
pub const MAX_USER_ID_BYTES: usize = 256;
/// The most `metadata` a key holds, in bytes of JSON text (`user_id` included).
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
/// The most entries of a key's `models` list.
pub const MAX_KEY_MODELS: usize = 256;
/// The most entries of a key's `events` list.
pub const MAX_KEY_EVENTS: usize = 64;

/// 400 naming `param` when `text` is longer than `max` bytes: what a key record holds is bounded (README,
/// "Limits"), and what is over its bound is refused, never cut.
pub(crate) fn at_most(text: &str, max: usize, param: &str) -> Result<(), AdminError> {
    if text.len() > max {
        return Err(AdminError::invalid(format!("`{param}` is {} bytes long; at most {max}", text.len()), param));
    }
    Ok(())
}

/// 400 naming `param` when `list` has more than `max` entries.
pub(crate) fn at_most_entries<T>(list: &[T], max: usize, param: &str) -> Result<(), AdminError> {
    if list.len() > max {
        return Err(AdminError::invalid(format!("`{param}` has {} entries; at most {max}", list.len()), param));
    }
    Ok(())
}

/// The metadata as stored: its JSON text, at most [`MAX_METADATA_BYTES`].
pub(crate) fn metadata_text(metadata: Map<String, Value>) -> Result<String, AdminError> {
    let text = Value::Object(metadata).to_string();
    at_most(&text, MAX_METADATA_BYTES, "metadata")?;
    Ok(text)
}

/// The fields a caller gives a key, written once for `POST /key/generate`, `POST /key/update` and
/// `svc keys create` (LiteLLM's names; `duration` is accepted for `expires`). [`Admin::create`] takes `team_id`
/// and refuses `key` (svc makes every secret); [`Admin::update`] takes `key` (its secret, alias or id) and keeps
/// its team. Any other absent field is left as it is (at creation: none, the team's, or every one).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRequest {
    /// The key to change (update).
    pub key: Option<String>,
    /// Owning team (creation; an update may repeat it, never change it).
    pub team_id: Option<String>,
    /// Unique human name (empty: none).
    pub key_alias: Option<String>,
    /// Agent role (empty: none).
    pub agent_role: Option<String>,
    /// Aliases of its own, a subset of the team's (empty: all of the team's).
    pub models: Option<Vec<String>>,
    /// Event patterns it may post on `POST /events` (`task.*`, `agent.started`; empty: every kind a virtual key
    /// may post).
    pub events: Option<Vec<String>>,
    /// Key budget (same unit as prices).
    pub max_budget: Option<serde_json::Number>,
    /// Key budget period (`30d`).
    pub budget_duration: Option<String>,
    /// Requests per minute.
    pub rpm_limit: Option<u32>,
    /// Tokens per minute.
    pub tpm_limit: Option<u64>,
    /// Lifetime from now, e.g. `30d` (`duration` in LiteLLM).
    #[serde(alias = "duration")]
    pub expires: Option<String>,
    /// Free-form JSON object (replaces the one it had).
    pub metadata: Option<Map<String, Value>>,
    /// LiteLLM's user id: kept in metadata.
    pub user_id: Option<String>,
    /// Blocks (true) or unblocks (false).
    pub blocked: Option<bool>,
}

/// What the admin API and CLI show of a key (never its secret, except `key` right after creation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyInfo {
    /// The secret: only in the answer to creation and rotation.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key: Option<String>,
    /// Stable id.
    pub key_id: String,
    /// `sk-svc-…abcd`.
    pub key_hint: String,
    /// Human name.
    pub key_alias: Option<String>,
    /// Team.
    pub team_id: String,
    /// Agent role.
    pub agent_role: Option<String>,
    /// Own model list.
    pub models: Vec<String>,
    /// Event patterns it may post (empty: every kind a virtual key may post).
    pub events: Vec<String>,
    /// Budget.
    pub max_budget: Option<f64>,
    /// Budget period.
    pub budget_duration: Option<String>,
    /// rpm.
    pub rpm_limit: Option<i64>,
    /// tpm.
    pub tpm_limit: Option<i64>,
    /// Expiry (RFC 3339).
    pub expires: Option<String>,
    /// Blocked/revoked.
    pub blocked: bool,
    /// Creation (RFC 3339).
    pub created_at: String,
    /// Metadata object.
    pub metadata: Value,
}

fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl KeyInfo {
    /// From a stored row.
    pub fn from_row(r: &KeyRow, secret: Option<String>) -> KeyInfo {
        KeyInfo {
            key: secret,
            key_id: r.id.clone(),
            key_hint: r.key_hint.clone(),
            key_alias: r.key_alias.clone(),
            team_id: r.team_id.clone(),
            agent_role: r.agent_role.clone(),
            models: r.models.clone(),
            events: r.events.clone(),
            max_budget: r.max_budget.map(|b| Money::from_nanos(b).as_f64()),
            budget_duration: r.budget_duration.clone(),
            rpm_limit: r.rpm_limit,
            tpm_limit: r.tpm_limit,
            expires: r.expires_ms.map(rfc3339),
            blocked: r.revoked_ms.is_some(),
            created_at: rfc3339(r.created_ms),
            metadata: serde_json::from_str(&r.metadata).unwrap_or(Value::Object(Map::new())),
        }
    }
}

/// Key and team operations over the store, checked against the config.
pub struct Admin<'a> {
    /// The store.
    pub store: &'a Store,
    /// The config (teams and aliases).
    pub config: &'a Config,
    /// The cache to refresh after a change (absent in the CLI).
    pub cache: Option<&'a KeyCache>,
}

fn parse_money(n: &serde_json::Number, param: &str) -> Result<Money, AdminError> {
    Money::parse(&n.to_string()).map_err(|e| AdminError::invalid(format!("`{param}`: {e}"), param))
}

fn parse_duration(text: &str, param: &str) -> Result<BudgetDuration, AdminError> {
    BudgetDuration::parse(text).map_err(|e| AdminError::invalid(format!("`{param}`: {e}"), param))
}

/// A key's `events`: each an event pattern that takes at least one kind a virtual key may post (the kinds only
/// the gateway emits are never posted with a virtual key, whatever its list says).
fn check_events(events: &[String]) -> Result<(), AdminError> {
    at_most_entries(events, MAX_KEY_EVENTS, "events")?;
    for e in events {
        if let Some(why) = svc_config::event_pattern_error(e) {
            return Err(AdminError::invalid(format!("`events`: {why}"), "events"));
        }
        let postable = svc_config::EventKind::ALL
            .iter()
            .any(|k| !k.gateway_only() && svc_config::event_pattern_matches(e, k.as_str()));
        if !postable {
            return Err(AdminError::invalid(
                format!("`events`: `{e}` takes only kinds the gateway emits itself; a virtual key never posts those"),
                "events",
            ));
        }
    }
    Ok(())
}

/// The instant `text` (a duration such as `30d`) from `now`.
fn expiry(text: &str, now: DateTime<Utc>) -> Result<i64, AdminError> {
    let d = parse_duration(text, "expires")?;
    Ok(d.period_at(now, now).end.timestamp_millis())
}

impl Admin<'_> {
    async fn changed(&self) -> Result<(), AdminError> {
        if let Some(c) = self.cache {
            c.refresh(self.store, true).await?;
        }
        Ok(())
    }

    fn check_models(&self, team_id: &str, models: &[String]) -> Result<(), AdminError> {
        at_most_entries(models, MAX_KEY_MODELS, "models")?;
        let Some(team) = self.config.team(team_id) else {
            let known: Vec<&str> = self.config.gateway.teams.iter().map(|t| t.team_id.as_str()).collect();
            return Err(AdminError::invalid(
                format!(
                    "unknown team `{team_id}`; configured teams: {}",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ),
                "team_id",
            ));
        };
        for m in models {
            if !self.config.models.iter().any(|d| &d.alias == m) {
                return Err(AdminError::invalid(format!("unknown model `{m}`"), "models"));
            }
            if !team.models.is_empty() && !team.models.contains(m) {
                return Err(AdminError::invalid(format!("team `{team_id}` may not use model `{m}`"), "models"));
            }
        }
        Ok(())
    }

    /// Creates a key; the answer carries its secret, shown this once.
    pub async fn create(&self, mut req: KeyRequest) -> Result<KeyInfo, AdminError> {
        if req.key.is_some() {
            return Err(AdminError::invalid("svc makes every key's secret: leave `key` out", "key"));
        }
        let team_id = req
            .team_id
            .take()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AdminError::invalid("missing `team_id`", "team_id"))?;
        if req.models.is_none() {
            // The team must be configured, whatever the key's list.
            self.check_models(&team_id, &[])?;
        }
        let now = Utc::now();
        let secret = generate_secret();
        let mut row = KeyRow {
            id: uuid::Uuid::new_v4().to_string(),
            key_hash: hex::encode(hash_secret(&secret)),
            key_hint: hint_of(&secret),
            team_id,
            metadata: "{}".into(),
            created_ms: now.timestamp_millis(),
            anchor_ms: now.timestamp_millis(),
            ..KeyRow::default()
        };
        self.apply(req, &mut row, now)?;
        self.store.insert_key(&row).await?;
        self.changed().await?;
        Ok(KeyInfo::from_row(&row, Some(secret)))
    }

    /// Sets on `row` every field `req` gives, each checked first: the one place the fields of a request are read.
    fn apply(&self, req: KeyRequest, row: &mut KeyRow, now: DateTime<Utc>) -> Result<(), AdminError> {
        if let Some(team) = req.team_id.filter(|t| *t != row.team_id) {
            return Err(AdminError::invalid(
                format!(
                    "a key's team never changes (this one is `{}`, not `{team}`): make a key in that team",
                    row.team_id
                ),
                "team_id",
            ));
        }
        if let Some(models) = req.models {
            self.check_models(&row.team_id, &models)?;
            row.models = models;
        }
        if let Some(events) = req.events {
            check_events(&events)?;
            row.events = events;
        }
        if let Some(a) = req.key_alias {
            at_most(&a, MAX_KEY_ALIAS_BYTES, "key_alias")?;
            row.key_alias = Some(a).filter(|a| !a.is_empty());
        }
        if let Some(r) = req.agent_role {
            at_most(&r, MAX_AGENT_ROLE_BYTES, "agent_role")?;
            row.agent_role = Some(r).filter(|r| !r.is_empty());
        }
        if let Some(b) = &req.max_budget {
            row.max_budget = Some(parse_money(b, "max_budget")?.nanos());
        }
        if let Some(d) = req.budget_duration {
            parse_duration(&d, "budget_duration")?;
            row.budget_duration = Some(d);
        }
        if let Some(v) = req.rpm_limit {
            row.rpm_limit = Some(v.into());
        }
        if let Some(v) = req.tpm_limit {
            row.tpm_limit = i64::try_from(v).ok();
        }
        if let Some(e) = req.expires {
            row.expires_ms = Some(expiry(&e, now)?);
        }
        if req.metadata.is_some() || req.user_id.is_some() {
            let mut metadata = match req.metadata {
                Some(m) => m,
                None => match serde_json::from_str(&row.metadata) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                },
            };
            if let Some(u) = req.user_id {
                at_most(&u, MAX_USER_ID_BYTES, "user_id")?;
                metadata.insert("user_id".into(), Value::String(u));
            }
            row.metadata = metadata_text(metadata)?;
        }
        if let Some(blocked) = req.blocked {
            row.revoked_ms = if blocked { row.revoked_ms.or(Some(now.timestamp_millis())) } else { None };
        }
        row.updated_ms = now.timestamp_millis();
        Ok(())
    }

    /// Finds a key by secret, alias or id.
    pub async fn find(&self, needle: &str) -> Result<KeyRow, AdminError> {
        let found = if looks_like_key(needle) {
            self.store.find_key_by_hash(&hex::encode(hash_secret(needle))).await?
        } else {
            self.store.find_key(needle).await?
        };
        found.ok_or_else(|| AdminError::KeyNotFound)
    }

    /// Changes a key.
    pub async fn update(&self, mut req: KeyRequest) -> Result<KeyInfo, AdminError> {
        let needle = req.key.take().ok_or_else(|| AdminError::invalid("missing `key`", "key"))?;
        let mut row = self.find(&needle).await?;
        self.apply(req, &mut row, Utc::now())?;
        self.store.update_key(&row).await?;
        self.changed().await?;
        Ok(KeyInfo::from_row(&row, None))
    }

    /// Revokes (blocks) a key: it stays on record for audit, and every request with it gets 401.
    pub async fn revoke(&self, needle: &str) -> Result<KeyInfo, AdminError> {
        self.update(KeyRequest { key: Some(needle.to_string()), blocked: Some(true), ..Default::default() }).await
    }

    /// Rotates a key: a new secret for the same record (id, alias, budgets and spend stay). A revoked key is
    /// refused (its new secret could never work).
    pub async fn regenerate(&self, needle: &str) -> Result<KeyInfo, AdminError> {
        let mut row = self.find(needle).await?;
        if row.revoked_ms.is_some() {
            return Err(AdminError::invalid(
                "this key is revoked: a new secret for it would never work (unblock it first, or create a new key)",
                "key",
            ));
        }
        let secret = generate_secret();
        row.key_hash = hex::encode(hash_secret(&secret));
        row.key_hint = hint_of(&secret);
        row.updated_ms = now_ms();
        self.store.update_key(&row).await?;
        self.changed().await?;
        Ok(KeyInfo::from_row(&row, Some(secret)))
    }

    /// Deletes keys; returns the ids deleted.
    pub async fn delete(&self, needles: &[String]) -> Result<Vec<String>, AdminError> {
        let mut ids = Vec::new();
        for n in needles {
            ids.push(self.find(n).await?.id);
        }
        let deleted = self.store.delete_keys(&ids).await?;
        self.changed().await?;
        Ok(deleted)
    }

    /// Every key.
    pub async fn list(&self) -> Result<Vec<KeyInfo>, AdminError> {
        Ok(self.store.list_keys().await?.iter().map(|r| KeyInfo::from_row(r, None)).collect())
    }
}

/// Mirrors the config file's teams into the store (at start and at each reload).
pub async fn sync_teams(store: &Store, config: &Config) -> Result<(), svc_store::StoreError> {
    let rows: Vec<(svc_store::TeamRow, bool)> = config
        .gateway
        .teams
        .iter()
        .filter(|t| t.origin == svc_config::TeamOrigin::File)
        .map(|t| {
            let row = svc_store::TeamRow {
                team_id: t.team_id.clone(),
                budget_limit: t.budget_limit.map(|m| m.nanos()),
                models: t.models.clone(),
                budget_duration: t.budget_duration.to_string(),
                anchor_ms: t.budget_start.map(|s| s.timestamp_millis()).unwrap_or(0),
                rpm_limit: t.rpm_limit.map(i64::from),
                tpm_limit: t.tpm_limit.and_then(|v| i64::try_from(v).ok()),
                in_config: true,
                ..Default::default()
            };
            (row, t.budget_start.is_some())
        })
        .collect();
    store.sync_teams(&rows).await
}

/// The teams of `config` as one JSON object (id → limit, period, models, rate limits, anchor), what a node
/// stores about itself so that nodes whose configurations disagree can be found.
pub fn teams_fingerprint(config: &Config) -> String {
    let teams: serde_json::Map<String, Value> = config
        .gateway
        .teams
        .iter()
        .map(|t| {
            let v = serde_json::json!({
                "budget_limit": t.budget_limit.map(|m| m.to_string()),
                "budget_duration": t.budget_duration.to_string(),
                "budget_start": t.budget_start.map(|d| d.to_rfc3339()),
                "models": t.models,
                "rpm_limit": t.rpm_limit,
                "tpm_limit": t.tpm_limit,
            });
            (t.team_id.clone(), v)
        })
        .collect();
    Value::Object(teams).to_string()
}
