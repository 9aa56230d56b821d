//! Teams made and changed at runtime (LiteLLM's `/team/new`, `/team/update`, `/team/delete`; `svc teams new`,
//! `update`, `delete`), beside the config file's. The rules, whoever asks: a team of the file is changed by the
//! file (refused here, naming it); a name is one team's; models are the config's aliases; money and periods parse
//! as the file's do. What runs on a node is its file's teams plus every API team of the store
//! ([`with_api_teams`]), and every node of a fleet applies a change within a second of it (svc-keys' [`watch`]).
//!
//! [`watch`]: crate::watch

use crate::admin::{at_most, at_most_entries, metadata_text, AdminError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use svc_budget::{BudgetDuration, Money};
use svc_config::{Config, ConfigSource, TeamConfig, TeamOrigin};
use svc_store::{Store, TeamRow};

/// The longest team id and alias, in bytes.
pub const MAX_TEAM_ID_BYTES: usize = 128;
/// The most entries of a team's `models` list.
pub const MAX_TEAM_MODELS: usize = 256;

/// The fields of `POST /team/new` and `/team/update` (LiteLLM's names) and of `svc teams new|update`. Absent
/// fields are left as they are (at creation: unlimited, the gateway's period, every model).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TeamRequest {
    /// The team's name (creation: made up when absent, as LiteLLM does; update: which team).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    /// A human name (empty: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team_alias: Option<String>,
    /// Aliases it may use (empty: every one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// Budget per period (`null`: unlimited; absent: as it was).
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub max_budget: Option<Option<serde_json::Number>>,
    /// Budget period (`30d`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_duration: Option<String>,
    /// Requests per minute for the whole team (`null`: none).
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub rpm_limit: Option<Option<u32>>,
    /// Tokens per minute for the whole team (`null`: none).
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    pub tpm_limit: Option<Option<u64>>,
    /// Free-form JSON object (replaces the one it had).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The body of `POST /team/delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamIds {
    /// The teams.
    pub team_ids: Vec<String>,
}

/// The query of `GET /team/info`.
#[derive(Debug, Deserialize)]
pub struct TeamQuery {
    /// The team.
    pub team_id: Option<String>,
}

/// A field that was given, `null` included (`Some(None)`); an absent one stays `None` (`#[serde(default)]`).
fn given<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// What the admin API and CLI show of a team.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TeamInfo {
    /// Name.
    pub team_id: String,
    /// Human name (API teams).
    pub team_alias: Option<String>,
    /// Budget per period.
    pub max_budget: Option<f64>,
    /// Budget period.
    pub budget_duration: String,
    /// Aliases it may use (empty: every one).
    pub models: Vec<String>,
    /// Requests per minute.
    pub rpm_limit: Option<u32>,
    /// Tokens per minute.
    pub tpm_limit: Option<u64>,
    /// Anchor of its periods (RFC 3339), when the file sets one.
    pub budget_start: Option<String>,
    /// `file` (change it in the config file) or `api`.
    pub defined_in: String,
    /// Metadata object (API teams).
    pub metadata: Value,
}

impl TeamInfo {
    /// Of a running team, with what only the store keeps of an API team (`row`).
    pub fn of(t: &TeamConfig, row: Option<&TeamRow>) -> TeamInfo {
        TeamInfo {
            team_id: t.team_id.clone(),
            team_alias: row.and_then(|r| r.team_alias.clone()),
            max_budget: t.budget_limit.map(Money::as_f64),
            budget_duration: t.budget_duration.to_string(),
            models: t.models.clone(),
            rpm_limit: t.rpm_limit,
            tpm_limit: t.tpm_limit,
            budget_start: t.budget_start.map(|d| d.to_rfc3339()),
            defined_in: t.origin.as_str().to_string(),
            metadata: row.and_then(|r| serde_json::from_str(&r.metadata).ok()).unwrap_or(Value::Object(Map::new())),
        }
    }
}

/// A stored API team as the config's teams are: its period anchored where the store keeps it.
pub fn team_of_row(r: &TeamRow, default: BudgetDuration) -> TeamConfig {
    TeamConfig {
        team_id: r.team_id.clone(),
        budget_limit: r.budget_limit.map(Money::from_nanos),
        models: r.models.clone(),
        budget_duration: BudgetDuration::parse(&r.budget_duration).unwrap_or(default),
        budget_start: r.api.then(|| DateTime::<Utc>::from_timestamp_millis(r.anchor_ms)).flatten(),
        rpm_limit: r.rpm_limit.and_then(|v| u32::try_from(v).ok()),
        tpm_limit: r.tpm_limit.and_then(|v| u64::try_from(v).ok()),
        origin: if r.api { TeamOrigin::Api } else { TeamOrigin::File },
    }
}

/// `config` running the store's API teams (`rows`) beside its file's: the API teams it had are replaced, and an
/// API team of a name the file defines is left out (the file wins). Returns whether the teams changed.
pub fn with_api_teams(config: &mut Config, rows: &[TeamRow]) -> bool {
    let default = config.gateway.budget_duration;
    let mut teams: Vec<TeamConfig> =
        config.gateway.teams.iter().filter(|t| t.origin == TeamOrigin::File).cloned().collect();
    let file_teams = teams.len();
    for r in rows.iter().filter(|r| r.api) {
        if !teams[..file_teams].iter().any(|t| t.team_id == r.team_id) {
            teams.push(team_of_row(r, default));
        }
    }
    let changed = teams != config.gateway.teams;
    config.gateway.teams = teams;
    changed
}

/// Stores the file's teams of `config` (a gateway's start and reload) and runs the store's API teams beside them
/// in it. Returns the teams generation read before the teams were listed.
pub async fn mirror(store: &Store, config: &mut Config) -> Result<i64, svc_store::StoreError> {
    crate::admin::sync_teams(store, config).await?;
    let generation = store.teams_generation().await?;
    with_api_teams(config, &store.list_teams().await?);
    Ok(generation)
}

/// Where `config` was read from, to name in a refusal.
fn file_of(config: &Config) -> String {
    match &config.source {
        ConfigSource::File(p) => p.display().to_string(),
        ConfigSource::Builtin => "the built-in demo configuration".into(),
    }
}

/// Team operations over the store, checked against the running config.
pub struct TeamAdmin<'a> {
    /// The store.
    pub store: &'a Store,
    /// What runs (the file's teams and the API teams; models and defaults).
    pub config: &'a Config,
}

impl TeamAdmin<'_> {
    /// The running team `id` as the API may change it: refused when the file defines it, or none runs.
    fn api_team(&self, id: &str) -> Result<&TeamConfig, AdminError> {
        match self.config.team(id) {
            Some(t) if t.origin == TeamOrigin::File => {
                Err(AdminError::FileTeam { team_id: id.to_string(), file: file_of(self.config) })
            }
            Some(t) => Ok(t),
            None => Err(AdminError::TeamNotFound(id.to_string())),
        }
    }

    /// Makes a team; its budget period starts now.
    pub async fn create(&self, req: TeamRequest) -> Result<TeamInfo, AdminError> {
        let id = match req.team_id.as_deref().map(str::trim) {
            Some("") => return Err(AdminError::invalid("`team_id` is empty", "team_id")),
            Some(id) => id.to_string(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        at_most(&id, MAX_TEAM_ID_BYTES, "team_id")?;
        match self.config.team(&id) {
            Some(t) if t.origin == TeamOrigin::File => {
                return Err(AdminError::FileTeam { team_id: id, file: file_of(self.config) })
            }
            Some(_) => return Err(AdminError::TeamExists(id)),
            None => {}
        }
        let now = Utc::now().timestamp_millis();
        let mut row = TeamRow {
            team_id: id.clone(),
            budget_duration: self.config.gateway.budget_duration.to_string(),
            api: true,
            metadata: "{}".into(),
            anchor_ms: now,
            created_ms: now,
            ..TeamRow::default()
        };
        self.apply(req, &mut row)?;
        self.store.insert_team(&row).await.map_err(|e| match e {
            svc_store::StoreError::Conflict(_) => AdminError::TeamExists(id.clone()),
            other => AdminError::Store(other),
        })?;
        Ok(TeamInfo::of(&team_of_row(&row, self.config.gateway.budget_duration), Some(&row)))
    }

    /// Changes an API team (its budget period keeps its anchor; a new limit holds from the next request).
    pub async fn update(&self, req: TeamRequest) -> Result<TeamInfo, AdminError> {
        let id = req.team_id.clone().ok_or_else(|| AdminError::invalid("missing `team_id`", "team_id"))?;
        self.api_team(&id)?;
        let mut row = self
            .store
            .list_teams()
            .await?
            .into_iter()
            .find(|r| r.team_id == id && r.api)
            .ok_or_else(|| AdminError::TeamNotFound(id.clone()))?;
        self.apply(req, &mut row)?;
        if !self.store.update_team(&row).await? {
            return Err(AdminError::TeamNotFound(id));
        }
        Ok(TeamInfo::of(&team_of_row(&row, self.config.gateway.budget_duration), Some(&row)))
    }

    /// Deletes API teams and their keys; refused whole when any is a file's or none runs.
    pub async fn delete(&self, ids: &[String]) -> Result<(Vec<String>, Vec<String>), AdminError> {
        if ids.is_empty() {
            return Err(AdminError::invalid("give the teams to delete in `team_ids`", "team_ids"));
        }
        for id in ids {
            self.api_team(id)?;
        }
        Ok(self.store.delete_teams(ids).await?)
    }

    /// Sets on `row` every field `req` gives, each checked first.
    fn apply(&self, req: TeamRequest, row: &mut TeamRow) -> Result<(), AdminError> {
        if let Some(alias) = req.team_alias {
            at_most(&alias, MAX_TEAM_ID_BYTES, "team_alias")?;
            row.team_alias = Some(alias).filter(|a| !a.is_empty());
        }
        if let Some(models) = req.models {
            at_most_entries(&models, MAX_TEAM_MODELS, "models")?;
            let known = self.config.aliases();
            if let Some(m) = models.iter().find(|m| !m.contains('*') && !known.contains(&m.as_str())) {
                return Err(AdminError::invalid(
                    format!("unknown model `{m}`; models served: {}", known.join(", ")),
                    "models",
                ));
            }
            row.models = models;
        }
        if let Some(b) = req.max_budget {
            let money = b.map(|b| Money::parse(&b.to_string())).transpose();
            row.budget_limit =
                money.map_err(|e| AdminError::invalid(format!("`max_budget`: {e}"), "max_budget"))?.map(Money::nanos);
        }
        if let Some(d) = req.budget_duration {
            BudgetDuration::parse(&d)
                .map_err(|e| AdminError::invalid(format!("`budget_duration`: {e}"), "budget_duration"))?;
            row.budget_duration = d;
        }
        if let Some(v) = req.rpm_limit {
            row.rpm_limit = v.map(i64::from);
        }
        if let Some(v) = req.tpm_limit {
            let v = v.map(i64::try_from).transpose();
            row.tpm_limit = v.map_err(|_| AdminError::invalid("`tpm_limit` is too large", "tpm_limit"))?;
        }
        if let Some(m) = req.metadata {
            row.metadata = metadata_text(m)?;
        }
        Ok(())
    }
}
