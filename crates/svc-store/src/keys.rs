//! Virtual-key records. The store keeps only the SHA-256 hash of a key and a short hint of it; generating,
//! hashing and checking keys is the gateway's job.

use crate::{conflict, Backend, Store, StoreError};
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

/// One stored virtual key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRow {
    /// Stable identity: unchanged by rotation.
    pub id: String,
    /// Lowercase hex SHA-256 of the full key.
    pub key_hash: String,
    /// A recognisable but useless part of the key, e.g. `sk-svc-…a1b2`.
    pub key_hint: String,
    /// Unique human name.
    pub key_alias: Option<String>,
    /// Owning team.
    pub team_id: String,
    /// Agent role, when the key is for one.
    pub agent_role: Option<String>,
    /// Aliases this key may use (JSON array text); empty means all of its team's.
    pub models: Vec<String>,
    /// Event patterns this key may post on `POST /events` (JSON array text); empty means every kind a key may
    /// post.
    pub events: Vec<String>,
    /// Key budget in nano-units.
    pub max_budget: Option<i64>,
    /// Key budget duration (`30d`), else the team's.
    pub budget_duration: Option<String>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Free-form JSON object text.
    pub metadata: String,
    /// Expiry time.
    pub expires_ms: Option<i64>,
    /// Revocation time.
    pub revoked_ms: Option<i64>,
    /// Creation time.
    pub created_ms: i64,
    /// Last change.
    pub updated_ms: i64,
    /// Anchor of the key's budget periods.
    pub anchor_ms: i64,
}

const COLUMNS: &str = "id, key_hash, key_hint, key_alias, team_id, agent_role, models, max_budget, budget_duration, \
     rpm_limit, tpm_limit, metadata, expires_ms, revoked_ms, created_ms, updated_ms, anchor_ms, events";

fn from_row(r: &AnyRow) -> Result<KeyRow, StoreError> {
    let models: String = r.try_get("models")?;
    let events: String = r.try_get("events")?;
    Ok(KeyRow {
        id: r.try_get("id")?,
        key_hash: r.try_get("key_hash")?,
        key_hint: r.try_get("key_hint")?,
        key_alias: r.try_get("key_alias")?,
        team_id: r.try_get("team_id")?,
        agent_role: r.try_get("agent_role")?,
        models: serde_json::from_str(&models).map_err(|_| StoreError::Corrupt("virtual_keys.models"))?,
        events: serde_json::from_str(&events).map_err(|_| StoreError::Corrupt("virtual_keys.events"))?,
        max_budget: r.try_get("max_budget")?,
        budget_duration: r.try_get("budget_duration")?,
        rpm_limit: r.try_get("rpm_limit")?,
        tpm_limit: r.try_get("tpm_limit")?,
        metadata: r.try_get("metadata")?,
        expires_ms: r.try_get("expires_ms")?,
        revoked_ms: r.try_get("revoked_ms")?,
        created_ms: r.try_get("created_ms")?,
        updated_ms: r.try_get("updated_ms")?,
        anchor_ms: r.try_get("anchor_ms")?,
    })
}

/// Moves the key generation on, and on PostgreSQL tells every listening node at commit (`NOTIFY`), so a key
/// change reaches the whole fleet at once instead of at its next poll.
pub(crate) async fn bump(tx: &mut Transaction<'_, Any>, backend: Backend) -> Result<(), StoreError> {
    sqlx::query("UPDATE counters SET value = value + 1 WHERE name = 'keys_generation'").execute(&mut **tx).await?;
    if backend == Backend::Postgres {
        sqlx::query(&format!("NOTIFY {KEYS_CHANNEL}")).execute(&mut **tx).await?;
    }
    Ok(())
}

/// The PostgreSQL channel key and team changes are announced on (one watcher serves both).
pub(crate) const KEYS_CHANNEL: &str = "svc_keys";

/// Key changes announced by the store (PostgreSQL `LISTEN`); see [`Store::key_changes`].
pub struct KeyChanges(sqlx::postgres::PgListener);

impl KeyChanges {
    /// Waits for the next key change anywhere in the fleet. An error means the connection broke (listen again).
    pub async fn next(&mut self) -> Result<(), StoreError> {
        self.0.recv().await?;
        Ok(())
    }
}

impl std::fmt::Debug for KeyChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyChanges")
    }
}

impl Store {
    /// Listens for key changes made anywhere in the fleet (PostgreSQL); `None` on SQLite, where polling the
    /// key generation is enough (one machine).
    pub async fn key_changes(&self) -> Result<Option<KeyChanges>, StoreError> {
        let Some(url) = self.url() else { return Ok(None) };
        let mut listener = sqlx::postgres::PgListener::connect(url).await?;
        listener.listen(KEYS_CHANNEL).await?;
        Ok(Some(KeyChanges(listener)))
    }

    /// Inserts a new key. A taken alias is [`StoreError::Conflict`].
    pub async fn insert_key(&self, k: &KeyRow) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        let sql = format!(
            "INSERT INTO virtual_keys ({COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18)"
        );
        bind_all(sqlx::query(&sql), k).execute(&mut *tx).await.map_err(|e| conflict(e, "key alias"))?;
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Replaces every field of the key with `k.id`. Returns false when no such key exists.
    pub async fn update_key(&self, k: &KeyRow) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let sql =
            "UPDATE virtual_keys SET key_hash=$2, key_hint=$3, key_alias=$4, team_id=$5, agent_role=$6, models=$7, \
                   max_budget=$8, budget_duration=$9, rpm_limit=$10, tpm_limit=$11, metadata=$12, expires_ms=$13, \
                   revoked_ms=$14, created_ms=$15, updated_ms=$16, anchor_ms=$17, events=$18 WHERE id=$1";
        let done = bind_all(sqlx::query(sql), k).execute(&mut *tx).await.map_err(|e| conflict(e, "key alias"))?;
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes keys by id; returns the ids that existed.
    pub async fn delete_keys(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let mut deleted = Vec::new();
        for id in ids {
            let done = sqlx::query("DELETE FROM virtual_keys WHERE id = $1").bind(id).execute(&mut *tx).await?;
            if done.rows_affected() > 0 {
                deleted.push(id.clone());
            }
        }
        bump(&mut tx, self.backend()).await?;
        tx.commit().await?;
        Ok(deleted)
    }

    /// Every key, oldest first.
    pub async fn list_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM virtual_keys ORDER BY created_ms, id");
        let rows = sqlx::query(&sql).fetch_all(self.pool()).await?;
        rows.iter().map(from_row).collect()
    }

    /// The key whose id or alias is `needle` (two indexed lookups, id first).
    pub async fn find_key(&self, needle: &str) -> Result<Option<KeyRow>, StoreError> {
        for column in ["id", "key_alias"] {
            let sql = format!("SELECT {COLUMNS} FROM virtual_keys WHERE {column} = $1");
            if let Some(row) = sqlx::query(&sql).bind(needle).fetch_optional(self.pool()).await? {
                return from_row(&row).map(Some);
            }
        }
        Ok(None)
    }

    /// The key whose secret hashes to `key_hash` (lowercase hex SHA-256).
    pub async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<KeyRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM virtual_keys WHERE key_hash = $1");
        let row = sqlx::query(&sql).bind(key_hash).fetch_optional(self.pool()).await?;
        row.as_ref().map(from_row).transpose()
    }
}

fn bind_all<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    k: &'q KeyRow,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    q.bind(&k.id)
        .bind(&k.key_hash)
        .bind(&k.key_hint)
        .bind(k.key_alias.as_deref())
        .bind(&k.team_id)
        .bind(k.agent_role.as_deref())
        .bind(serde_json::to_string(&k.models).unwrap_or_else(|_| "[]".into()))
        .bind(k.max_budget)
        .bind(k.budget_duration.as_deref())
        .bind(k.rpm_limit)
        .bind(k.tpm_limit)
        .bind(&k.metadata)
        .bind(k.expires_ms)
        .bind(k.revoked_ms)
        .bind(k.created_ms)
        .bind(k.updated_ms)
        .bind(k.anchor_ms)
        .bind(serde_json::to_string(&k.events).unwrap_or_else(|_| "[]".into()))
}
