//! Spend records: one per completed request, written in batches (the gateway's group-commit writer calls
//! [`Store::insert_spend_batch`] with the records of many concurrent requests), and the queries that read
//! them back for `/spend/logs`, `svc spend` and for rebuilding period spend at start.

use crate::{Store, StoreError};
use serde::Serialize;
use sqlx::Row;

/// One request's spend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpendRecord {
    /// The request id (`x-request-id`).
    pub request_id: String,
    /// Completion time.
    pub ts_ms: i64,
    /// Key id (`None` for the master key).
    pub key_id: Option<String>,
    /// Team of the key.
    pub team_id: Option<String>,
    /// Agent role of the key.
    pub agent_role: Option<String>,
    /// Alias the client asked for.
    pub model_alias: String,
    /// Upstream model id.
    pub upstream_model: String,
    /// Deployment that served it.
    pub deployment: String,
    /// Input tokens.
    pub prompt_tokens: i64,
    /// Output tokens.
    pub completion_tokens: i64,
    /// Cost in nano-units.
    pub cost: i64,
    /// HTTP status returned to the client.
    pub status: i64,
    /// Total latency.
    pub latency_ms: i64,
}

/// Filters for [`Store::query_spend`]. `None` means any.
#[derive(Debug, Clone, Default)]
pub struct SpendFilter {
    /// Team.
    pub team_id: Option<String>,
    /// Key id.
    pub key_id: Option<String>,
    /// Alias.
    pub model: Option<String>,
    /// Inclusive start.
    pub start_ms: Option<i64>,
    /// Exclusive end.
    pub end_ms: Option<i64>,
}

/// A sum of spend over a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpendTotal {
    /// The group's label (team, key id or alias).
    pub group: String,
    /// Requests.
    pub requests: i64,
    /// Input tokens.
    pub prompt_tokens: i64,
    /// Output tokens.
    pub completion_tokens: i64,
    /// Cost in nano-units.
    pub cost: i64,
}

const WHERE: &str =
    "($1 IS NULL OR team_id = $1) AND ($2 IS NULL OR key_id = $2) AND ($3 IS NULL OR model_alias = $3) \
     AND ($4 IS NULL OR ts_ms >= $4) AND ($5 IS NULL OR ts_ms < $5)";

impl Store {
    /// Writes many records in one transaction (group commit), as multi-row INSERTs of bound parameters.
    pub async fn insert_spend_batch(&self, records: &[SpendRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        // 13 parameters a row; 512 rows (the spend writer's largest batch) stay under SQLite's and PostgreSQL's
        // parameter limits. One statement is atomic by itself: a batch that fits in one skips BEGIN/COMMIT, a
        // round trip each to the database.
        const ROWS: usize = 512;
        self.restart_wal_if_due().await;
        let single = records.len() <= ROWS;
        let mut tx = if single { None } else { Some(self.writer().begin().await?) };
        for chunk in records.chunks(ROWS) {
            let mut sql = String::from(
                "INSERT INTO spend_log (request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model, deployment, \
                 prompt_tokens, completion_tokens, cost, status, latency_ms) VALUES ",
            );
            crate::push_values(&mut sql, self.backend(), chunk.len(), 13);
            let mut q = sqlx::query(&sql);
            for r in chunk {
                q = q
                    .bind(&r.request_id)
                    .bind(r.ts_ms)
                    .bind(r.key_id.as_deref())
                    .bind(r.team_id.as_deref())
                    .bind(r.agent_role.as_deref())
                    .bind(&r.model_alias)
                    .bind(&r.upstream_model)
                    .bind(&r.deployment)
                    .bind(r.prompt_tokens)
                    .bind(r.completion_tokens)
                    .bind(r.cost)
                    .bind(r.status)
                    .bind(r.latency_ms);
            }
            match tx.as_mut() {
                Some(tx) => q.execute(&mut **tx).await?,
                None => q.execute(self.writer()).await?,
            };
        }
        if let Some(tx) = tx {
            tx.commit().await?;
        }
        Ok(())
    }

    /// Records matching `f`, newest first, `limit` from `offset`.
    pub async fn query_spend(&self, f: &SpendFilter, limit: i64, offset: i64) -> Result<Vec<SpendRecord>, StoreError> {
        let sql = format!(
            "SELECT request_id, ts_ms, key_id, team_id, agent_role, model_alias, upstream_model, deployment, prompt_tokens, \
             completion_tokens, cost, status, latency_ms FROM spend_log WHERE {WHERE} ORDER BY ts_ms DESC, id DESC LIMIT $6 OFFSET $7"
        );
        let rows = bind_filter(sqlx::query(&sql), f).bind(limit).bind(offset).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                Ok(SpendRecord {
                    request_id: r.try_get("request_id")?,
                    ts_ms: r.try_get("ts_ms")?,
                    key_id: r.try_get("key_id")?,
                    team_id: r.try_get("team_id")?,
                    agent_role: r.try_get("agent_role")?,
                    model_alias: r.try_get("model_alias")?,
                    upstream_model: r.try_get("upstream_model")?,
                    deployment: r.try_get("deployment")?,
                    prompt_tokens: r.try_get("prompt_tokens")?,
                    completion_tokens: r.try_get("completion_tokens")?,
                    cost: r.try_get("cost")?,
                    status: r.try_get("status")?,
                    latency_ms: r.try_get("latency_ms")?,
                })
            })
            .collect()
    }

    /// Sum of cost of records matching `f` (the period spend of a team or key).
    pub async fn sum_spend(&self, f: &SpendFilter) -> Result<i64, StoreError> {
        // PostgreSQL sums BIGINT as NUMERIC, which the Any driver cannot decode: cast back.
        let sql = format!("SELECT CAST(COALESCE(SUM(cost), 0) AS BIGINT) FROM spend_log WHERE {WHERE}");
        let row = bind_filter(sqlx::query(&sql), f).fetch_one(self.pool()).await?;
        Ok(row.try_get::<i64, _>(0)?)
    }

    /// Totals grouped by `team_id`, `key_id` or `model_alias`, for records matching `f`.
    pub async fn spend_totals(&self, group_by: &str, f: &SpendFilter) -> Result<Vec<SpendTotal>, StoreError> {
        let column = match group_by {
            "team" => "team_id",
            "key" => "key_id",
            _ => "model_alias",
        };
        let sql = format!(
            "SELECT COALESCE({column}, '(master key)') AS g, COUNT(*) AS n, CAST(COALESCE(SUM(prompt_tokens),0) AS BIGINT) AS p, \
             CAST(COALESCE(SUM(completion_tokens),0) AS BIGINT) AS c, CAST(COALESCE(SUM(cost),0) AS BIGINT) AS s \
             FROM spend_log WHERE {WHERE} GROUP BY g ORDER BY s DESC, g"
        );
        let rows = bind_filter(sqlx::query(&sql), f).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                Ok(SpendTotal {
                    group: r.try_get("g")?,
                    requests: r.try_get("n")?,
                    prompt_tokens: r.try_get("p")?,
                    completion_tokens: r.try_get("c")?,
                    cost: r.try_get("s")?,
                })
            })
            .collect()
    }
}

fn bind_filter<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    f: &'q SpendFilter,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(f.team_id.as_deref()).bind(f.key_id.as_deref()).bind(f.model.as_deref()).bind(f.start_ms).bind(f.end_ms)
}
