//! Teams as stored: the config's `teams` list is mirrored here at start so that keys, spend and budget
//! periods can refer to them, and so that a team's period anchor survives restarts.

use crate::{now_ms, Store, StoreError};
use sqlx::Row;

/// One stored team.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Whether the team is in the current config (teams removed from it are kept for history).
    pub in_config: bool,
}

impl Store {
    /// Mirrors the config's teams: inserts new ones (anchored now unless `anchor_ms` is given), updates the
    /// limits of existing ones without touching their anchor or spend, and marks missing ones as not in
    /// config. An explicit `budget_start` (given as `Some(anchor)`) always wins.
    pub async fn sync_teams(&self, teams: &[(TeamRow, bool)]) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        sqlx::query("UPDATE teams SET in_config = 0").execute(&mut *tx).await?;
        for (t, explicit_anchor) in teams {
            let models = serde_json::to_string(&t.models).unwrap_or_else(|_| "[]".into());
            let anchor = if *explicit_anchor { t.anchor_ms } else { now };
            sqlx::query(
                "INSERT INTO teams (team_id, budget_limit, models, budget_duration, anchor_ms, rpm_limit, tpm_limit, in_config, updated_ms) \
                 VALUES ($1,$2,$3,$4,$5,$6,$7,1,$8) \
                 ON CONFLICT (team_id) DO UPDATE SET budget_limit=$2, models=$3, budget_duration=$4, rpm_limit=$6, tpm_limit=$7, in_config=1, updated_ms=$8",
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
        tx.commit().await?;
        Ok(())
    }

    /// Every stored team, by name.
    pub async fn list_teams(&self) -> Result<Vec<TeamRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT team_id, budget_limit, models, budget_duration, anchor_ms, rpm_limit, tpm_limit, in_config FROM teams ORDER BY team_id",
        )
        .fetch_all(self.pool())
        .await?;
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
                })
            })
            .collect()
    }
}
