//! Small named values kept in the store (such as the demo master key), and change counters.

use crate::{Store, StoreError};
use sqlx::Row;

impl Store {
    /// Reads a named value.
    pub async fn meta_get(&self, name: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT value FROM meta WHERE name = $1").bind(name).fetch_optional(self.pool()).await?;
        Ok(row.map(|r| r.try_get::<String, _>(0)).transpose()?)
    }

    /// Stores a named value unless one exists; returns the value now stored (first writer wins).
    pub async fn meta_get_or_insert(&self, name: &str, value: &str) -> Result<String, StoreError> {
        sqlx::query("INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(value)
            .execute(self.pool())
            .await?;
        Ok(self.meta_get(name).await?.unwrap_or_else(|| value.to_string()))
    }

    /// The generation of the virtual-key table: it grows on every key change, so a server polls it to
    /// notice changes made by another process (the CLI, another node).
    pub async fn keys_generation(&self) -> Result<i64, StoreError> {
        let row =
            sqlx::query("SELECT value FROM counters WHERE name = 'keys_generation'").fetch_one(self.pool()).await?;
        Ok(row.try_get::<i64, _>(0)?)
    }
}

impl Store {
    /// Records that a budget notice (`alert:800`, `exceeded`) was announced for a scope's period; returns
    /// true only for the first caller, so a notice is announced once per period even across restarts.
    pub async fn notice_once(&self, scope: &str, period_start_ms: i64, notice: &str) -> Result<bool, StoreError> {
        let sql = "INSERT INTO budget_notices (scope, period_start_ms, notice, created_ms) VALUES ($1, $2, $3, $4) \
                   ON CONFLICT (scope, period_start_ms, notice) DO NOTHING";
        Ok(self.on_notice(sql, scope, period_start_ms, notice).await? > 0)
    }

    /// Records that a notice's event is stored (in the outbox): a node waiting to announce `exceeded` after it
    /// may go on.
    pub async fn notice_emitted(&self, scope: &str, period_start_ms: i64, notice: &str) -> Result<(), StoreError> {
        let sql = "UPDATE budget_notices SET emitted_ms = $4 WHERE scope = $1 AND period_start_ms = $2 AND notice = $3";
        self.on_notice(sql, scope, period_start_ms, notice).await.map(drop)
    }

    /// The notices already announced for a scope's period.
    pub async fn notices(&self, scope: &str, period_start_ms: i64) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT notice FROM budget_notices WHERE scope = $1 AND period_start_ms = $2";
        self.notice_labels(sql, scope, period_start_ms).await
    }

    /// The notices of a scope's period recorded by their announcer but whose events are not stored yet.
    pub async fn notices_unemitted(&self, scope: &str, period_start_ms: i64) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT notice FROM budget_notices WHERE scope = $1 AND period_start_ms = $2 AND emitted_ms IS NULL";
        self.notice_labels(sql, scope, period_start_ms).await
    }

    /// Runs `sql` over one notice (`$1` scope, `$2` period start, `$3` notice, `$4` now); the rows it changed.
    async fn on_notice(&self, sql: &str, scope: &str, period_start_ms: i64, notice: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(sql)
            .bind(scope)
            .bind(period_start_ms)
            .bind(notice)
            .bind(crate::now_ms())
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// The notices `sql` selects of a scope's period (`$1` scope, `$2` period start).
    async fn notice_labels(&self, sql: &str, scope: &str, period_start_ms: i64) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(sql).bind(scope).bind(period_start_ms).fetch_all(self.pool()).await?;
        rows.iter().map(|r| Ok(r.try_get::<String, _>(0)?)).collect()
    }
}
