//! Teams as stored. The config file's `teams` are mirrored here by the gateway when it starts and reloads, so that
//! keys, spend and budget periods can refer to them and a team's period anchor survives restarts; teams made at
//! runtime (`/team/new`) live only here, and every node of a fleet runs them.

use crate::keys::KEYS_CHANNEL;
use crate::{now_ms, Backend, Store, StoreError};
use sqlx::{Any, Row, Transaction};

/// One stored team.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TeamRow {
    /// Team name.
    pub team_id: String,
    /// Budget limit in nano-units; `None` = unlimited.
    pub budget_limit: Option<i64>,
    /// Allowed aliases.
    pub models: Vec<String>,
    /// Budget duration text (`30d`).
    pub budget_duration: String,
    /// Anchor of the team's periods: `budget_start` when configured, else when first stored.
    pub anchor_ms: i64,
    /// Requests per minute for the team.
    pub rpm_limit: Option<i64>,
    /// Tokens per minute for the team.
    pub tpm_limit: Option<i64>,
    /// A file team: whether it is in the config a gateway last applied (teams removed from it are kept for
    /// history). An API team is running until deleted.
    pub in_config: bool,
    /// Made at runtime (`/team/new`) rather than by a config file.
    pub api: bool,
    /// LiteLLM's `team_alias` (API teams).
    pub team_alias: Option<String>,
    /// Free-form JSON object (API teams).
    pub metadata: String,
    /// When an API team was made.
    pub created_ms: i64,
}

impl TeamRow {
    /// Whether a gateway runs this team: a file team in the config last applied, or an API team.
    pub fn running(&self) -> bool {
        self.api || self.in_config
    }
}

/// Moves the team generation on, and on PostgreSQL tells every listening node at commit.
async fn bump(tx: &mut Transaction<'_, Any>, backend: Backend) -> Result<(), StoreError> {
    sqlx::query("UPDATE counters SET value = value + 1 WHERE name = 'teams_generation'").execute(&mut **tx).await?;
    if backend == Backend::Postgres {
        sqlx::query(&format!("NOTIFY {KEYS_CHANNEL}")).execute(&mut **tx).await?;
    }
    Ok(())
}

const COLUMNS: &str = "team_id, budget_limit, models, budget_duration, anchor_ms, rpm_limit, tpm_limit, in_config, \
                       origin, team_alias, metadata, created_ms";

impl Store {
    /// Mirrors the config's teams: inserts new ones (anchored now unless `anchor_ms` is given), updates the
    /// limits of existing ones without touching their anchor or spend, and marks missing ones as not in
    /// config. An explicit `budget_start` (given as `Some(anchor)`) always wins. A file team takes over an API
    /// team of its name (the file is the truth for the teams it defines). API teams are otherwise left alone.
    pub async fn sync_teams(&self, teams: &[(TeamRow, bool)]) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        sqlx::query("UPDATE teams SET in_config = 0 WHERE origin = 'file'").execute(&mut *tx).await?;
        for (t, explicit_anchor) in teams {
            let models = serde_json::to_string(&t.models).unwrap_or_else(|_| "[]".into());
            let anchor = if *explicit_anchor { t.anchor_ms } else { now };
            sqlx::query(
                "INSERT INTO teams (team_id, budget_limit, models, budget_duration, anchor_ms, rpm_limit, tpm_limit, in_config, updated_ms, origin, created_ms) \
                 VALUES ($1,$2,$3,$4,$5,$6,$7,1,$8,'file',$8) \
                 ON CONFLICT (team_id) DO UPDATE SET budget_limit=$2, models=$3, budget_duration=$4, rpm_limit=$6, tpm_limit=$7, in_config=1, updated_ms=$8, origin='file', deleted_ms=NULL",
            )
            .bind(&t.team_id)
            .bind(t.budget_limit)
            .bind(models)
            .bind(&t.budget_duration)
            .bind(anchor)
            .bind(t.rpm_limit)
            .bind(t.tpm_limit)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if *explicit_anchor {
                sqlx::query("UPDATE teams SET anchor_ms = $2 WHERE team_id = $1")
                    .bind(&t.team_id)
                    .bind(t.anchor_ms)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every stored team that is not a deleted API team, by name.
    pub async fn list_teams(&self) -> Result<Vec<TeamRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM teams WHERE deleted_ms IS NULL ORDER BY team_id");
        let rows = sqlx::query(&sql).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                let models: String = r.try_get("models")?;
                Ok(TeamRow {
                    team_id: r.try_get("team_id")?,
                    budget_limit: r.try_get("budget_limit")?,
                    models: serde_json::from_str(&models).map_err(|_| StoreError::Corrupt("teams.models"))?,
                    budget_duration: r.try_get("budget_duration")?,
                    anchor_ms: r.try_get("anchor_ms")?,
                    rpm_limit: r.try_get("rpm_limit")?,
                    tpm_limit: r.try_get("tpm_limit")?,
                    in_config: r.try_get::<i64, _>("in_config")? != 0,
                    api: r.try_get::<String, _>("origin")? == "api",
                    team_alias: r.try_get("team_alias")?,
                    metadata: r.try_get("metadata")?,
                    created_ms: r.try_get("created_ms")?,
                })
            })
            .collect()
    }

    /// The generation of the teams: it grows on every change, so a server polls it to notice changes made by
    /// another process (the CLI, another node).
    pub async fn teams_generation(&self) -> Result<i64, StoreError> {
        let row =
            sqlx::query("SELECT value FROM counters WHERE name = 'teams_generation'").fetch_one(self.pool()).await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// Stores a new API team, anchored at `t.created_ms`. A name that a running team has is
    /// [`StoreError::Conflict`]; the name of a deleted API team, or of a file team no file defines any more, is
    /// taken over (with a new anchor: a new team's budget starts afresh).
    pub async fn insert_team(&self, t: &TeamRow) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        let done = sqlx::query(
            "INSERT INTO teams (team_id, budget_limit, models, budget_duration, anchor_ms, rpm_limit, tpm_limit, in_config, updated_ms, origin, team_alias, metadata, created_ms) \
             VALUES ($1,$2,$3,$4,$5,$6,$7,0,$5,'api',$8,$9,$5) \
             ON CONFLICT (team_id) DO UPDATE SET budget_limit=$2, models=$3, budget_duration=$4, anchor_ms=$5, rpm_limit=$6, \
             tpm_limit=$7, in_config=0, updated_ms=$5, origin='api', team_alias=$8, metadata=$9, created_ms=$5, deleted_ms=NULL \
             WHERE teams.deleted_ms IS NOT NULL OR (teams.origin = 'file' AND teams.in_config = 0)",
        );
        let done = bind_api(done, t, t.created_ms).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::Conflict(format!("team `{}`", t.team_id)));
        }
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces the settings of the API team `t.team_id` (its anchor stays). Returns false when no such API team
    /// runs.
    pub async fn update_team(&self, t: &TeamRow) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let done = sqlx::query(
            "UPDATE teams SET budget_limit=$2, models=$3, budget_duration=$4, updated_ms=$5, rpm_limit=$6, tpm_limit=$7, \
             team_alias=$8, metadata=$9 WHERE team_id=$1 AND origin='api' AND deleted_ms IS NULL",
        );
        let done = bind_api(done, t, now_ms()).execute(&mut *tx).await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Deletes the API teams `ids` and every key of theirs (LiteLLM's `/team/delete`): the keys stop working at
    /// once, the teams' rows stay for the spend that names them. Returns the teams deleted and the ids of the
    /// keys deleted with them; names that are no running API team are skipped.
    pub async fn delete_teams(&self, ids: &[String]) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        let (mut teams, mut keys) = (Vec::new(), Vec::new());
        for id in ids {
            let done = sqlx::query(
                "UPDATE teams SET deleted_ms = $2, updated_ms = $2 WHERE team_id = $1 AND origin = 'api' AND deleted_ms IS NULL",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                continue;
            }
            teams.push(id.clone());
            let rows = sqlx::query("SELECT id FROM virtual_keys WHERE team_id = $1 ORDER BY created_ms, id")
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
            for r in rows {
                keys.push(r.try_get::<String, _>(0)?);
            }
            sqlx::query("DELETE FROM virtual_keys WHERE team_id = $1").bind(id).execute(&mut *tx).await?;
        }
        if !teams.is_empty() {
            bump(&mut tx, self.backend()).await?;
            crate::keys::bump(&mut tx, self.backend()).await?;
        }
        tx.commit().await?;
        Ok((teams, keys))
    }
}

/// Binds an API team's fields as `$1` … `$9` (id, limit, models, duration, `time_ms`, rpm, tpm, alias,
/// metadata): `time_ms` is when it was made (insert: its anchor too) or changed (update).
fn bind_api<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    t: &'q TeamRow,
    time_ms: i64,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    q.bind(&t.team_id)
        .bind(t.budget_limit)
        .bind(serde_json::to_string(&t.models).unwrap_or_else(|_| "[]".into()))
        .bind(&t.budget_duration)
        .bind(time_ms)
        .bind(t.rpm_limit)
        .bind(t.tpm_limit)
        .bind(&t.team_alias)
        .bind(&t.metadata)
}
